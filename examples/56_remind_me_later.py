"""56: remind me later (design 003, "Remind me later").

A background workflow tool whose body is one durable sleep. The model gets the receipt and
the turn ends; between the receipt and the wake the session is parked with one alarm, at the
reminder's time, and nothing runs (a new process takes over the session unharmed). At that
time the body returns, and its return value wakes the agent, which relays the reminder.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import HOUR
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool, install


class RemindArgs(BaseModel):
    note: str
    delay_minutes: float


async def remind(args: RemindArgs, ctx: Any, task: Any) -> dict[str, str]:
    await ctx.sleep(minutes=args.delay_minutes)
    return {"reminder": args.note}


def script(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role == "tool":
        return reply("OK, I will remind you.")
    if last.text.startswith("[background task"):
        return reply(f"Reminder: {last.text.split('finished: ', 1)[1]}")
    return call_tool("remind", {"note": "call Bob", "delay_minutes": 120}, id="remind-1")


def build() -> Agent:
    tool = define_workflow_tool(
        "remind", "Remind the user after a delay", RemindArgs, remind, lifetime="task"
    )
    agent = Agent(ScriptedProvider(script), ToolRegistry([tool]))
    install(agent)
    return agent


async def scenario(world: World) -> dict[str, Any]:
    agent = world.services.setdefault("agent", build())
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    cid = await conv.create("main")
    await conv.submit(cid, "Remind me to call Bob in two hours", request_id="r1")
    wake = await h.run_until_parked()
    if wake.at is not None:
        world.say(f"   the turn ended: {conv.entries(cid)[-1]['text']!r}")
        world.say(
            f"   parked; wake(): active={wake.active}, at=+{wake.at - world.clock.now():.0f}s"
        )
    world.at(HOUR)
    h = await world.process(agent.task_kinds())  # another process, an hour later: nothing to do
    conv = Conversations(h, agent)
    world.say(f"   an hour later a new process opens the session: active={h.wake().active}")
    world.at(2 * HOUR)
    await h.run_until_parked()
    answer = conv.entries(cid)[-1]["text"]
    world.say(f"   two hours later the agent says: {answer!r}")
    return {"answer": answer, "live": len(h.live_tasks)}


def check(result: dict[str, Any], world: World) -> None:
    """The reminder arrived at its time, through the agent; nothing is left running."""
    assert result["answer"] == 'Reminder: {"reminder": "call Bob"}'
    assert result["live"] == 0


if __name__ == "__main__":
    world = World()
    world.say("The user asks for a reminder:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: one alarm, no process in between, the reminder relayed")
