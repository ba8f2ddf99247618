"""62: render jobs beat while they work; a dead one is noticed in minutes, not hours (issue 13,
heartbeats).

``render_video`` submits a job to the render farm in a step, then waits for the farm's
``rendered`` signal with a six hour ``timeout`` and a five minute ``heartbeat``:
``ctx.wait_for(RENDERED, project, timeout=6 * HOUR, heartbeat=5 * MINUTE)``. While a job
works, the farm beats (over HTTP ``POST .../signals/farm.rendered/{key}/heartbeat`` or the
webhook's ``/heartbeat``; here ``Harness.beat``): each beat moves the wait's ``beat_by`` five
minutes on and writes nothing else, and ``wake().at`` follows the latest deadline. One job
finishes; the other's render node dies after two beats: at the missed beat the body gets
``HeartbeatMissed`` (a ``WaitTimeout`` it can catch) and fails the call 13 minutes in, long
before the six hour deadline. The dead job's late report is refused ``closed``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import START, World, run_resilient

from bide import HOUR, MINUTE, define_signal
from bide.tools import ToolRegistry, result_of
from bide.workflow import FatalError, HeartbeatMissed, define_workflow_tool


class RenderArgs(BaseModel):
    project_id: str


class Rendered(BaseModel):
    url: str


RENDERED = define_signal("farm.rendered", 1, Rendered)


class RenderFarm:
    """Submissions are idempotent by key; a job reports back under its project's key."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    def submit(self, project: str, key: str) -> str:
        return self.jobs.setdefault(key, f"job-{project}")


def tools(farm: RenderFarm) -> ToolRegistry:
    async def render_video(args: RenderArgs, ctx: Any) -> dict[str, str]:
        job = await ctx.step(lambda s: farm.submit(args.project_id, s.idempotency_key))
        try:
            done = await ctx.wait_for(
                RENDERED, args.project_id, timeout=6 * HOUR, heartbeat=5 * MINUTE
            )
        except HeartbeatMissed:
            raise FatalError(f"{job} stopped beating: its render node is presumed dead") from None
        return {"url": done.url}

    tool = define_workflow_tool(
        "render_video", "Render a video; returns its URL", RenderArgs, render_video
    )
    return ToolRegistry([tool])


def minutes(at: float | None) -> str:
    return "none" if at is None else f"+{(at - START) / MINUTE:.0f} min"


async def scenario(world: World) -> dict[str, Any]:
    farm = world.services.setdefault("farm", RenderFarm())
    registry = tools(farm)
    h = await world.process([registry.task])
    say = world.say

    say("1. render_video(intro) and render_video(outro) submit their jobs and wait.")
    calls = {}
    for project in ("intro", "outro"):
        call = registry.call("render_video", {"project_id": project})
        calls[project] = await h.create_task(registry.task, call, key=project)
    wake = await h.run_until_parked()
    say(f"   both calls sleep; wake(): at={minutes(wake.at)} (the first beat due; until: +360)")

    say("2. the farm beats every 4 minutes while the jobs work.")
    alive = {"intro": (4, 8, 12, 16), "outro": (4, 8)}  # outro's node dies after minute 8
    sent = world.services.setdefault("beats", set())  # the farm's, not the process's
    for at in (4, 8, 12, 13, 16):
        world.at(at * MINUTE)
        results = []
        for project in (p for p, times in alive.items() if at in times and (p, at) not in sent):
            # A beat lost to a crash is sent again (its sender got no answer), at that time.
            results.append(f"{project} -> {await h.beat(calls[project], RENDERED, project)}")
            sent.add((project, at))
        wake = await h.run_until_parked()
        line = ", ".join(results) or "none"
        say(f"   +{at} min: beats {line}; wake(): at={minutes(wake.at)}")
        outro = h.outcome(calls["outro"])
        if outro is not None and "noticed" not in world.services:
            # When the call was seen ended (kept in the world: a rerun after a crash sees it
            # ended from its first look on, at the clock time of the crash).
            world.services["noticed"] = (world.clock.now() - START) / MINUTE
            say(f"   outro missed its beat: {result_of(outro).text}")

    world.at(18 * MINUTE)
    if h.outcome(calls["intro"]) is None:
        done = Rendered(url="https://cdn.example/intro.mp4")
        sent = await h.signal(calls["intro"], RENDERED, "intro", done.model_dump())
        say(f"3. +18 min: intro's job reports its video -> {sent}")
    await h.run_until_parked()
    intro = result_of(h.outcome(calls["intro"]))
    say(f"   intro: {intro.text}")

    world.at(30 * MINUTE)
    late = await h.signal(calls["outro"], RENDERED, "outro", {"url": "https://cdn.example/x"})
    say(f"4. +30 min: outro's dead job reports after all -> {late}")
    return {
        "intro": intro.text,
        "outro": result_of(h.outcome(calls["outro"])).text,
        "noticed_minutes": world.services.get("noticed"),
        "late": str(late),
        "jobs": len(farm.jobs),
    }


def check(result: dict[str, Any], world: World) -> None:
    """The finished job's URL came back; the dead one was noticed at its missed beat (minute
    13: last beat at 8 plus 5), not at its six hour deadline; its late report is closed."""
    assert result["intro"] == '{"url": "https://cdn.example/intro.mp4"}'
    assert result["outro"] == (
        "FatalError: job-outro stopped beating: its render node is presumed dead"
    )
    assert result["noticed_minutes"] == 13
    assert result["late"] == "closed"
    assert result["jobs"] == 2


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: beats kept one job's wait open; the dead job was noticed 13 minutes in, not 6 hours")
