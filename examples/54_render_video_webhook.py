"""54: render_video waits for the render farm's webhook (design 003, "Wait for an external
system to call back").

The body mints a webhook (``await ctx.webhook()``), hands its URL to the farm in a step, and
awaits the request. Nothing runs in between; the session has no alarm at all. The farm's POST
resumes the body, which returns the video URL; a failure report ends the call with an error
(``FatalError``). A request after the call ended is refused ``closed``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide.tools import ToolRegistry, result_of
from bide.workflow import FatalError, define_workflow_tool, post_webhook


class RenderArgs(BaseModel):
    project_id: str


class RenderFarm:
    """Renders are idempotent by key; the farm calls back the URL it was given."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, str]] = {}

    def submit(self, project: str, callback: str, key: str) -> str:
        job = self.jobs.setdefault(
            key, {"id": f"job-{len(self.jobs) + 1}", "project": project, "callback": callback}
        )
        return job["id"]

    def job(self, project: str) -> dict[str, str] | None:
        return next((j for j in self.jobs.values() if j["project"] == project), None)


def tools(farm: RenderFarm) -> ToolRegistry:
    async def render_video(args: RenderArgs, ctx: Any) -> dict[str, str]:
        done = await ctx.webhook()
        job = await ctx.step(
            lambda s: farm.submit(args.project_id, done.url, s.idempotency_key), name="submit"
        )
        callback = await done
        if callback["status"] != "ok":
            raise FatalError(f"Render {job} failed: {callback['status']}")
        return {"url": callback["url"]}

    tool = define_workflow_tool(
        "render_video", "Render a video; returns its URL", RenderArgs, render_video
    )
    return ToolRegistry([tool])


async def scenario(world: World) -> dict[str, Any]:
    farm = world.services.setdefault("farm", RenderFarm())
    registry = tools(farm)
    h = await world.process([registry.task])
    h.services["webhook_base_url"] = "https://bide.example"
    say = world.say

    say("1. render_video(intro) submits the job with its webhook URL, then waits.")
    call = registry.call("render_video", {"project_id": "intro"})
    first = await h.create_task(registry.task, call, key="intro")
    wake = await h.run_until_parked()
    job = farm.job("intro")
    if job is not None:
        say(f"   {job['id']} calls back {job['callback'][:32]}...")
    say(f"   the call is {h.task(first).state.status}; wake(): active={wake.active}, at={wake.at}")
    world.at(25 * 60)
    if job is not None and h.outcome(first) is None:
        body = {"status": "ok", "url": "https://cdn.example/intro.mp4"}
        say(f"2. 25 minutes later the farm posts -> {post_webhook(h, job['callback'], body)}")
    await h.run_until_parked()
    one = result_of(h.outcome(first))
    say(f"   result: {one.text}")
    if job is not None:
        late = post_webhook(h, job["callback"], {"status": "ok", "url": "again"})
        say(f"   the farm retries its POST after the call ended -> {late}")

    say("3. render_video(outro): the farm reports a failure.")
    call = registry.call("render_video", {"project_id": "outro"})
    second = await h.create_task(registry.task, call, key="outro")
    await h.run_until_parked()
    job = farm.job("outro")
    if job is not None and h.outcome(second) is None:
        post_webhook(h, job["callback"], {"status": "out of memory"})
    await h.run_until_parked()
    two = result_of(h.outcome(second))
    say(f"   result: {two.code}: {two.text}")
    return {"first": one.text, "second": two.text, "jobs": len(farm.jobs)}


def check(result: dict[str, Any], world: World) -> None:
    """One job per call; the URL came back; the failure is an error result."""
    assert result["first"] == '{"url": "https://cdn.example/intro.mp4"}'
    assert result["second"] == "FatalError: Render job-2 failed: out of memory"
    assert result["jobs"] == 2


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: parked on a webhook with no alarm; resumed by the farm's POST")
