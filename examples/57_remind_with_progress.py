"""57: a reminder that reports progress and posts a message (design 003, "Report progress").

``ctx.progress(value)`` is for the event stream only (``progress`` events, coalesced): a UI
shows it, the model never sees it and the agent is not woken. ``await
task.post_message(text)`` is the one-way channel to the parent: it wakes the agent with a
message attributed to the task (queued while the agent is busy, sent once).
The return value arrives last, as the completion notification.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import MINUTE
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool, install


class RemindArgs(BaseModel):
    note: str
    delay_minutes: float


async def remind_with_progress(args: RemindArgs, ctx: Any, task: Any) -> dict[str, str]:
    ctx.progress({"status": "preparing reminder"})  # the event stream only
    await task.post_message(f"Reminder scheduled for {args.delay_minutes:.0f} minutes from now.")
    await ctx.sleep(minutes=args.delay_minutes)
    return {"reminder": args.note}


def script(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role == "tool":
        return reply("Setting that up.")
    if last.text.startswith("[background task"):
        return reply(f"(from the task) {last.text.split('] ', 1)[1]}")
    return call_tool(
        "remind_with_progress", {"note": "stand-up", "delay_minutes": 30}, id="remind-1"
    )


class Stream:
    """What a UI would receive as progress (last write wins per call)."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}

    def __call__(self, task_id: str, value: Any) -> None:
        self.last[task_id] = value


def build() -> Agent:
    tool = define_workflow_tool(
        "remind_with_progress",
        "Schedule a reminder and report progress before waiting",
        RemindArgs,
        remind_with_progress,
        lifetime="task",
    )
    agent = Agent(ScriptedProvider(script), ToolRegistry([tool]))
    install(agent)
    return agent


async def scenario(world: World) -> dict[str, Any]:
    agent = world.services.setdefault("agent", build())
    stream = world.services.setdefault("stream", Stream())
    h = await world.process(agent.task_kinds())
    h.services["workflow_progress"] = stream
    conv = Conversations(h, agent)
    cid = await conv.create("main")
    await conv.submit(cid, "Remind me about stand-up in 30 minutes", request_id="r1")
    await h.run_until_parked()
    for task_id, value in stream.last.items():
        world.say(f"   progress on the stream for {task_id[:8]}...: {value}")
    world.at(30 * MINUTE)
    await h.run_until_parked()
    for entry in conv.entries(cid):
        source = f"  [{entry['source'][:12]}...]" if entry.get("source", "user") != "user" else ""
        world.say(f"   {entry['type']:>11}: {entry['text']}{source}")
    texts = [e["text"] for e in conv.entries(cid)]
    return {"texts": texts, "progress": list(stream.last.values())}


def check(result: dict[str, Any], world: World) -> None:
    """Progress never reached the transcript; the message and the completion did, once."""
    texts = result["texts"]
    assert result["progress"] == [{"status": "preparing reminder"}]
    assert not any("preparing" in t for t in texts)
    assert sum("Reminder scheduled for 30 minutes" in t for t in texts) == 2  # message, relay
    assert texts[-1] == '(from the task) finished: {"reminder": "stand-up"}'


if __name__ == "__main__":
    world = World()
    world.say("A background reminder reports progress and posts one message:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: progress stayed on the stream; the message and the result woke the agent")
