"""A tool that polls by parking on time, with backoff (design 001 ch. V).

``wait_for_render`` asks a render farm whether a job is done. Instead of sleeping in memory it
parks until the next poll time: 1, 2, 4, 8 minutes... Between polls nothing runs, and
``wake().at`` tells the host when to come back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import MINUTE
from bide.tools import Sleep, ToolRegistry, define_tool, result_of


class RenderArgs(BaseModel):
    job: str


class RenderFarm:
    """Finishes a job after a fixed number of minutes."""

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        self.started: float | None = None
        self.polls = 0

    def status(self, now: float) -> str:
        self.polls += 1
        if self.started is None:
            self.started = now
        return "done" if now - self.started >= self.minutes * MINUTE else "rendering"


def tools(farm: RenderFarm) -> ToolRegistry:
    async def execute(args: RenderArgs, api: Any) -> Any:
        attempt = (api.checkpoint or {}).get("attempt", 0)
        if farm.status(api.now()) == "done":
            return f"{args.job} rendered after {attempt} waits"
        delay = MINUTE * 2**attempt
        return Sleep(checkpoint={"attempt": attempt + 1}, until=api.now() + delay)

    poll = define_tool(
        "wait_for_render", "Wait for a render job", RenderArgs, execute, replay="safe"
    )
    return ToolRegistry([poll])


async def scenario(world: World) -> dict[str, Any]:
    farm = world.services.setdefault("farm", RenderFarm(minutes=10))
    registry = tools(farm)
    h = await world.process([registry.task])
    call = registry.call("wait_for_render", {"job": "intro.mp4"})
    t = await h.create_task(registry.task, call, key="render")
    waits = []
    while True:
        wake = await h.run_until_parked()
        if wake.at is None:
            break
        delay = wake.at - world.clock.now()
        waits.append(delay)
        world.say(f"   parked; wake().at is in {delay / MINUTE:.0f} min; nothing runs meanwhile")
        world.clock.set(wake.at)  # the alarm fires
    text = result_of(h.outcome(t)).text
    world.say(f"   result: {text!r} ({farm.polls} polls)")
    return {"text": text, "waits": [w / MINUTE for w in waits]}


def check(result: dict[str, Any], world: World) -> None:
    """The job finishes after 10 minutes: polls at 0, 1, 3, 7 and 15 minutes."""
    assert result["text"] == "intro.mp4 rendered after 4 waits"


if __name__ == "__main__":
    world = World()
    world.say("wait_for_render polls a render farm, parking between polls:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    assert outcome["waits"] == [1, 2, 4, 8]
    print("ok: backoff 1, 2, 4, 8 minutes, all parked on time")
