"""A subagent tool parked on SubmissionSettled while its child waits for a person
(design 001 ch. VII).

The parent agent delegates; the subagent asks a person; both park. The whole session is
parked on signals only: ``wake()`` is neither active nor has an ``at``. The person answers,
the child's answer settles its submission and delivers the signal in the same commit, and the
parent continues.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import SignalValue, define_signal
from bide.agent import Agent, Conversations, subagent_tool
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import Sleep, ToolRegistry, define_tool


class Question(BaseModel):
    question: str


class Reply(BaseModel):
    text: str


PERSON = define_signal("app.person-reply", 1, Reply)


async def ask_person(args: Question, api: Any) -> Any:  # reads a signal: safe to replay
    state = await api.read_signal(PERSON, "reply")
    if isinstance(state, SignalValue):
        return state.value.text
    return Sleep(signals=[PERSON.key("reply")])


def script(request: ModelRequest) -> ModelResponse:
    """Parent: delegate, then report. Child: ask the person, then answer."""
    last = request.messages[-1]
    if last.role == "user" and last.text.startswith("Pick"):
        return call_tool("subagent", {"task": "Ask the designer which colour to use"}, id="d1")
    if last.role == "user" and last.text.startswith("Ask the designer"):
        return call_tool("ask_person", {"question": "Which colour?"}, id="q1")
    if last.role == "tool" and last.call_id == "q1":
        return reply(f"The designer chose {last.text}.")
    if last.role == "tool" and last.call_id == "d1":
        return reply(f"Done: {last.text}")
    return reply("I am not sure what to do.")


def build() -> Agent:
    tools = ToolRegistry(
        [define_tool("ask_person", "Ask a person", Question, ask_person, replay="safe")]
    )
    agent = Agent(ScriptedProvider(script), tools, system="You coordinate a design team.")
    tools.add(subagent_tool(agent))
    return agent


async def scenario(world: World) -> dict[str, Any]:
    agent = world.services.setdefault("agent", build())
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    cid = await conv.create("main")
    await conv.submit(cid, "Pick a colour for the logo", request_id="r1")
    wake = await h.run_until_parked()
    calls = {r.input["name"]: r for r in h.live_tasks.values() if r.kind == "bide.tool"}
    if calls:
        world.say(f"   subagent call: {calls['subagent'].state.status}")
        world.say(f"   child's ask_person call: {calls['ask_person'].state.status}")
        world.say(f"   wake(): active={wake.active}, at={wake.at}  (no alarm: parked on signals)")
        result = await h.signal(calls["ask_person"].id, PERSON, "reply", {"text": "teal"})
        world.say(f"   the designer answers 'teal' -> {result}")
        await h.run_until_parked()
    sub = conv.submission(cid, "r1")
    assert sub is not None
    world.say(f"   parent's answer: {sub.answer!r} ({sub.status})")
    return {"answer": sub.answer, "live": len(h.live_tasks)}


def check(result: dict[str, Any], world: World) -> None:
    """The child's answer reached the parent; nothing is left running."""
    assert result["answer"] == "Done: The designer chose teal."
    assert result["live"] == 0


if __name__ == "__main__":
    world = World()
    world.say("The parent agent delegates to a subagent, which asks a person:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: subagent parked on SubmissionSettled; the answer came back")
