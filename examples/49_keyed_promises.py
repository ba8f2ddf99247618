"""One call, several keyed promises, awaited later (design 002, durable promises).

``render_scenes`` is bound to a new execution per invocation (a render-farm job workflow with
an identity derived from the invocation) and returns one promise handle per scene, each with a
1-hour hard deadline. The execution submits the jobs to a (fake) render daemon and replies per
key as jobs finish. An await with a 60-second timeout ends only that waiting interval: the
promise stays open. The hard deadline ends the scene that never finishes, through the normal
resolution path; with every keyed promise terminal, the execution is cancelled and cancels the
daemon job it still owns.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import HOUR, Aborted, Completed, Sleeping, Terminal, define_signal, define_task
from bide.bindings import BindingSet, Start, WorkflowBinding
from bide.promises import Promises, promise_tools, read_promise
from bide.tools import ToolRegistry, result_of


class Scenes(BaseModel):
    scenes: list[str]


class Rendered(BaseModel):
    url: str


JOB_DONE = define_signal("app.render-done", 1, Rendered)


class RenderDaemon:
    """The machine that really renders: idempotent by job key, as job APIs allow."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.cancelled: list[str] = []

    def submit(self, key: str) -> None:
        self.jobs.setdefault(key, "running")

    def finish(self, key: str) -> None:
        self.jobs[key] = "done"

    def cancel(self, key: str) -> None:
        if self.jobs.get(key) == "running":
            self.jobs[key] = "cancelled"
            self.cancelled.append(key)


def render_farm(daemon: RenderDaemon, bindings: list[BindingSet]) -> Any:
    """The execution recipe: one task per invocation, replying per completion key."""

    async def run(task: Any, rt: Any) -> None:
        keys: dict[str, Any] = task.input["keys"]
        for scene in keys:
            daemon.submit(f"{task.id}/{scene}")
        finished = {}
        for scene in keys:
            state = await rt.read_signal(JOB_DONE, scene)
            if state is not None:
                finished[scene] = state.value.url

        def build(tx: Any) -> Any:
            for scene, url in finished.items():
                ref = keys[scene]
                if read_promise(tx, ref["promise"]).status == "open":
                    bindings[0].reply_in(
                        tx,
                        task.input["invocation"],
                        scene,
                        correlation=ref["correlation"],
                        value={"url": url},
                    )
            waiting = tuple(JOB_DONE.key(s) for s in keys if s not in finished)
            if not waiting:  # every scene replied: the execution's work is done
                return Terminal(outcome=Completed(result=sorted(finished)))
            return Sleeping(checkpoint={"phase": "run", "done": len(finished)}, signals=waiting)

        await rt.commit(build)

    async def cancelled(task: Any, rt: Any) -> None:
        # Cancelled once all its promises are terminal: clean up what it still owns.
        for scene in task.input["keys"]:
            daemon.cancel(f"{task.id}/{scene}")
        await rt.commit(Terminal(outcome=Aborted(reason=task.abort_reason)))

    return define_task("app.render-farm", 1, lambda _: "run", {"run": run}, abort=cancelled)


def build(world: World) -> tuple[ToolRegistry, BindingSet, RenderDaemon]:
    daemon = RenderDaemon()
    holder: list[BindingSet] = []
    binding = WorkflowBinding(
        "render_scenes",
        "Render scenes; returns one promise handle per scene",
        Scenes,
        Start(render_farm(daemon, holder)),
        "promises",
        hard_deadline=HOUR,
        keys=lambda args: args.scenes,
    )
    holder.append(BindingSet([binding]))
    return ToolRegistry([*holder[0].tools, *promise_tools()]), holder[0], daemon


async def scenario(world: World) -> dict[str, Any]:
    say = world.say
    registry, bindings, daemon = world.services.setdefault("setup", build(world))
    h = await world.process([registry.task, *bindings.task_kinds()])

    async def call(name: str, arguments: dict[str, Any], key: str) -> Any:
        t = await h.create_task(registry.task, registry.call(name, arguments), key=key)
        await h.run_until_parked()
        return t

    say("1. The agent calls render_scenes(['intro', 'outro', 'credits']).")
    first = await call("render_scenes", {"scenes": ["intro", "outro", "credits"]}, "c1")
    result = result_of(h.outcome(first))
    handles: dict[str, str] = result.details["promises"]
    say(f"   -> {len(handles)} promise handles; daemon jobs: {sorted(daemon.jobs.values())}")
    producer = _producer(h, handles["intro"])  # the started execution: every key's producer
    execution = h.task(producer)
    say(f"   the execution {execution.kind} is {execution.status}")

    world.at(5 * 60)
    say("2. The daemon finishes 'intro'; the execution replies for that key.")
    daemon.finish(f"{producer}/intro")
    await h.signal(producer, JOB_DONE, "intro", {"url": "https://cdn.example/intro.mp4"})
    await h.run_until_parked()
    statuses = {k: Promises(h).get(p).status for k, p in handles.items()}
    say(f"   promises: {statuses}")

    say("3. Later the agent awaits them by handle.")
    got = await call("promise_await", {"promise_id": handles["intro"], "timeout_seconds": 60}, "a1")
    say(f"   await intro -> {result_of(h.outcome(got)).text}")
    waiting = await call(
        "promise_await", {"promise_id": handles["outro"], "timeout_seconds": 60}, "a2"
    )
    say(f"   await outro: the call is {h.task(waiting).status}")
    world.at(5 * 60 + 60)
    await h.run_until_parked()
    say(f"   after 60s -> {result_of(h.outcome(waiting)).text}")
    say(f"   outro's status: {Promises(h).get(handles['outro']).status}")

    world.at(20 * 60)
    daemon.finish(f"{producer}/credits")
    await h.signal(producer, JOB_DONE, "credits", {"url": "https://cdn.example/credits.mp4"})
    await h.run_until_parked()
    say("4. 'credits' finishes too; 'outro' never does.")
    wake = h.wake()
    say(f"   wake(): at=+{((wake.at or 0) - world.clock.now()) / 60:.0f} min (the hard deadline)")

    world.at(HOUR)
    await h.run_until_parked()
    outro = Promises(h).get(handles["outro"])
    assert outro is not None
    say(f"5. At the hard deadline: outro {outro.status} ({outro.error})")
    say(f"   every keyed promise is terminal; the execution: {h.outcome(producer).status}")
    cancelled = [k.split("/")[1] for k in daemon.cancelled]
    say(f"   the execution cancelled the daemon jobs it still owned: {cancelled}")
    late = await call("promise_await", {"promise_id": handles["outro"]}, "a3")
    say(f"   await outro now -> {result_of(h.outcome(late)).text}")
    return {
        "statuses": {k: Promises(h).get(p).status for k, p in handles.items()},
        "cancelled": cancelled,
        "execution": h.outcome(producer).status,
    }


def _producer(h: Any, promise_id: str) -> str:
    promise = read_promise(h, promise_id)
    assert promise is not None and promise.producer is not None
    return promise.producer


def check(result: dict[str, Any], world: World) -> None:
    """Two scenes rendered, the third expired at the deadline; the execution was cancelled."""
    assert result["statuses"] == {"intro": "resolved", "outro": "expired", "credits": "resolved"}
    assert result["cancelled"] == ["outro"]
    assert result["execution"] == "aborted"


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: keyed promises awaited later; a timeout left one open; the deadline ended it")
