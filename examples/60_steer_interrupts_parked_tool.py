"""60: a steer interrupts a parked tool (design 003, "Semantics").

The agent calls run_ci, which starts a build and parks on the CI webhook. The user changes
their mind and steers: the parked call is cancelled at once (its ``cancel`` stops the build),
its result says it was interrupted, and the same run answers the steer next: the model runs
CI on the other branch. A follow-up sent while that second call waits does not interrupt it;
it runs after the answer. When run as a program, the process dies once right before the
interrupted call's result is stored; the next process runs ``cancel`` again (cancels are
idempotent) and finishes the story.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import HOUR, SignalValue, SQLiteStore, define_signal
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.testing import FaultyStore
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool


class CiResult(BaseModel):
    status: str
    log_url: str


class CiArgs(BaseModel):
    ref: str


CI_RESULT = define_signal("app.ci-result", 1, CiResult)


class FakeCi:
    """Builds are idempotent by key; cancelling one twice is harmless."""

    def __init__(self) -> None:
        self.builds: dict[str, str] = {}
        self.cancelled: list[str] = []

    def trigger(self, key: str) -> str:
        return self.builds.setdefault(key, f"build-{len(self.builds) + 7}")

    def cancel(self, build: str) -> None:
        if build not in self.cancelled:
            self.cancelled.append(build)


def tools(ci: FakeCi) -> ToolRegistry:
    async def execute(args: CiArgs, api: Any) -> Any:
        state = await api.read_signal(CI_RESULT, "done")
        if isinstance(state, SignalValue):
            return ToolResult.of_text(f"CI {state.value.status} on {args.ref}")
        if state is not None:
            return ToolResult.of_text(f"CI on {args.ref} never reported", is_error=True)
        build = ci.trigger(await api.memo("ci.run", f"run-{api.task_id}"))
        return Sleep(
            checkpoint={"build": build}, signals=[CI_RESULT.key("done")], until=api.now() + 2 * HOUR
        )

    async def cancel(args: CiArgs, api: Any) -> None:
        if api.checkpoint is not None:
            ci.cancel(api.checkpoint["build"])

    return ToolRegistry(
        [
            define_tool(
                "run_ci", "Run CI on a git ref", CiArgs, execute, replay="safe", cancel=cancel
            )
        ]
    )


def script(request: ModelRequest) -> ModelResponse:
    """Answers from the conversation, so a request sent again after a crash gets the same."""
    last = request.messages[-1]
    if last.role == "user" and "main" in last.text:
        return call_tool("run_ci", {"ref": "main"}, id="ci-main")
    if last.role == "user" and "release" in last.text:
        return call_tool("run_ci", {"ref": "release"}, id="ci-release")
    if last.role == "tool":
        return reply(f"Done: {last.text}.")
    return reply(f"You asked: {last.text}")


def interrupted_result(writes: Any) -> bool:
    """The commit that stores the interrupted call's result."""
    return any(
        r.kind == "bide.tool" and r.abort_marked and r.state.status == "terminal" for r in writes
    )


async def deliver(h: Any, ref: str, value: dict[str, str]) -> str | None:
    """The CI webhook for the parked call on ``ref``, if one is parked."""
    for record in h.live_tasks.values():
        arguments = record.input.get("arguments") if record.kind == "bide.tool" else None
        if arguments == {"ref": ref} and record.state.status == "sleeping":
            return str(await h.signal(record.id, CI_RESULT, "done", value))
    return None


async def scenario(world: World) -> dict[str, Any]:
    ci = world.services.setdefault("ci", FakeCi())
    agent = world.services.setdefault("agent", Agent(ScriptedProvider(script), tools(ci)))
    if world.once("crash-demo") and isinstance(world.store, FaultyStore):
        world.store.match = interrupted_result
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    say = world.say
    main = await conv.create("main")

    say("1. 'Run CI on main': run_ci starts a build and parks on the CI webhook.")
    await conv.submit(main, "Run CI on main", request_id="r1")
    await h.run_until_parked()
    say(f"   builds: {sorted(ci.builds.values())}; cancelled: {ci.cancelled}")

    world.at(10 * 60)
    say("2. Ten minutes later the user steers: 'No, run it on the release branch'.")
    await conv.submit(main, "No, run it on the release branch", request_id="r2", when_busy="steer")
    await h.run_until_parked()
    say(f"   cancel stopped {ci.cancelled}; builds: {sorted(ci.builds.values())}")

    say("3. A follow-up while the release build runs waits for it.")
    follow = await conv.submit(main, "Then post the summary", request_id="r3")
    say(f"   the follow-up is {follow.status}")
    world.at(40 * 60)
    result = await deliver(h, "release", {"status": "passed", "log_url": "https://ci.example/8"})
    if result is not None:
        say(f"   the release build's webhook -> {result}")
    await h.run_until_parked()
    for entry in conv.entries(main):
        say(f"   {entry['type']:>11}: {entry.get('text')}")
    statuses = {rid: conv.submission(main, rid).status for rid in ("r1", "r2", "r3")}  # type: ignore[union-attr]
    say(f"   submissions: {statuses}")
    return {
        "texts": [(e["type"], e.get("text")) for e in conv.entries(main)],
        "statuses": statuses,
        "builds": sorted(ci.builds.values()),
        "cancelled": list(ci.cancelled),
    }


def check(result: dict[str, Any], world: World) -> None:
    """The steer cancelled the main build and was answered by the same run; the follow-up
    waited for the release build."""
    assert result["builds"] == ["build-7", "build-8"]
    assert result["cancelled"] == ["build-7"]
    assert result["texts"] == [
        ("user", "Run CI on main"),
        ("assistant", ""),
        ("tool_result", "interrupted by a steer"),
        ("user", "No, run it on the release branch"),
        ("assistant", ""),
        ("tool_result", "CI passed on release"),
        ("assistant", "Done: CI passed on release."),
        ("user", "Then post the summary"),
        ("assistant", "You asked: Then post the summary"),
    ]
    assert result["statuses"] == {"r1": "done", "r2": "done", "r3": "done"}


if __name__ == "__main__":
    world = World(FaultyStore(SQLiteStore()))
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    assert world.crashes == 1, "the demonstration crash happened"
    print("ok: the steer cancelled the parked call and was answered next; the follow-up waited")
