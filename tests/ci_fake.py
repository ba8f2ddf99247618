"""A fake CI service and the run_ci tool of design 001 ch. V, instrumented with counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from bide import HOUR, SignalValue, define_signal
from bide.tools import Sleep, ToolResult, define_tool


class CiResult(BaseModel):
    status: str
    log_url: str


class CiArgs(BaseModel):
    ref: str


CI_RESULT = define_signal("app.ci-result", 1, CiResult)


@dataclass
class FakeCi:
    """Builds are idempotent by key, as a real CI's API would be."""

    builds: dict[str, str] = field(default_factory=dict)
    triggers: int = 0
    cancelled: list[str] = field(default_factory=list)
    executions: int = 0
    crash_on_woken_run: BaseException | None = None

    def trigger(self, ref: str, key: str) -> str:
        self.triggers += 1
        return self.builds.setdefault(key, f"build-{len(self.builds) + 1}")

    def cancel(self, build: str) -> None:
        self.cancelled.append(build)


def run_ci_tool(ci: FakeCi, replay: str = "safe", name: str = "run_ci"):
    async def execute(args: CiArgs, api):
        ci.executions += 1
        state = await api.read_signal(CI_RESULT, "done")
        if isinstance(state, SignalValue):
            if ci.crash_on_woken_run is not None:
                crash, ci.crash_on_woken_run = ci.crash_on_woken_run, None
                raise crash
            return ToolResult.of_text(
                f"CI {state.value.status}: {state.value.log_url}",
                is_error=state.value.status != "passed",
            )
        if state is not None:
            return ToolResult.of_text(
                f"CI build {api.checkpoint['build']} never reported", is_error=True
            )
        run_id = await api.memo("ci.run", f"run-{api.task_id}")
        build = ci.trigger(args.ref, key=run_id)
        return Sleep(
            checkpoint={"build": build}, signals=[CI_RESULT.key("done")], until=api.now() + 2 * HOUR
        )

    async def cancel(args: CiArgs, api):
        if api.checkpoint is not None:
            ci.cancel(api.checkpoint["build"])
        else:
            run_id = await api.memo("ci.run")
            ci.cancel(ci.builds.get(run_id, f"by-key:{run_id}"))

    return define_tool(
        name,
        "Run CI on a git ref and report the result",
        CiArgs,
        execute,
        replay=replay,
        cancel=cancel,
    )
