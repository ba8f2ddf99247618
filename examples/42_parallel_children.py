"""Nested calls without waiting in memory, and a wait with policy "any" (design 001 ch. VI).

``research_both`` starts two nested ``research`` calls with ``wait=False`` and parks until the
first of them ends; it records which ended in its checkpoint and parks again on the other.
Each research call itself parks on a signal (a person or a service answering).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import SignalValue, WakeTasks, define_signal
from bide.tools import Sleep, ToolRegistry, Wait, define_tool, result_of


class Topic(BaseModel):
    topic: str


class Pair(BaseModel):
    x: str
    y: str


class Finding(BaseModel):
    text: str


FOUND = define_signal("app.finding", 1, Finding)


def tools(log: list[str]) -> ToolRegistry:
    async def research(args: Topic, api: Any) -> Any:
        state = await api.read_signal(FOUND, "found")
        if isinstance(state, SignalValue):
            log.append(args.topic)
            return f"{args.topic}: {state.value.text}"
        return Sleep(signals=[FOUND.key("found")])

    async def research_both(args: Pair, api: Any) -> Any:
        a = await api.execute_tool("research", {"topic": args.x}, key="a", wait=False)
        b = await api.execute_tool("research", {"topic": args.y}, key="b", wait=False)
        done = set((api.checkpoint or {}).get("done", []))
        if isinstance(api.wake, WakeTasks):
            done.update(api.wake.ended)
        still = [call.task_id for call in (a, b) if call.task_id not in done]
        if still:
            return Wait(checkpoint={"done": sorted(done)}, on=still, policy="any")
        ra, rb = await a.result(), await b.result()
        return f"{ra.text}\n{rb.text}"

    return ToolRegistry(
        [
            define_tool("research", "Research a topic", Topic, research, replay="safe"),
            define_tool("research_both", "Research two topics", Pair, research_both, replay="safe"),
        ]
    )


async def scenario(world: World) -> dict[str, Any]:
    log: list[str] = world.services.setdefault("log", [])
    registry = tools(log)
    h = await world.process([registry.task])
    call = registry.call("research_both", {"x": "tides", "y": "winds"})
    t = await h.create_task(registry.task, call, key="both")
    await h.run_until_parked()
    children = {r.input["arguments"]["topic"]: r.id for r in h.live_tasks.values() if r.owner == t}
    state = h.task(t).state
    world.say(f"   research_both is {state.status} (policy {getattr(state, 'policy', '-')})")
    world.say(f"   on {len(children)} nested calls, each parked on a signal")
    if "winds" in children:
        result = await h.signal(children["winds"], FOUND, "found", {"text": "westerlies"})
        world.say(f"   'winds' answered -> {result}")
        await h.run_until_parked()
        state = h.task(t).state
        world.say(f"   research_both woke on the first child and parked again: {state.status}")
    if "tides" in children:
        result = await h.signal(children["tides"], FOUND, "found", {"text": "twice a day"})
        world.say(f"   'tides' answered -> {result}")
        await h.run_until_parked()
    text = result_of(h.outcome(t)).text
    world.say("   result:", text.replace("\n", " | "))
    return {"text": text, "log": sorted(log)}


def check(result: dict[str, Any], world: World) -> None:
    """Both findings. research is replay-safe: a crash mid-run may run it again (at least
    once), while its call still resolves exactly once (the sweep's ledger checks that)."""
    assert result["text"] == "tides: twice a day\nwinds: westerlies"
    assert sorted(set(result["log"])) == ["tides", "winds"]
    if world.crashes == 0:
        assert result["log"] == ["tides", "winds"]


if __name__ == "__main__":
    world = World()
    world.say("research_both starts two nested calls and waits for the first to end:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: wait=False handles, policy any, both results")
