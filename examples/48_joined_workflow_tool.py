"""A joined workflow tool whose receiver replies later (design 002, workflow-tool bindings).

``ask_legal`` is bound, by a trusted declaration, to the session's legal-desk receiver with
push delivery, joined completion, a 2-hour hard deadline and a reply schema. The agent calls it;
the call records the invocation, pushes a request envelope to the desk and parks on a durable
promise. Nothing runs. Half an hour later a forged reply (wrong correlation) is rejected and
changes nothing; then the desk's correlated reply resolves the promise and the agent continues.
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
from bide.bindings import (
    BindingSet,
    Push,
    ReplyRejected,
    WorkflowBinding,
    read_invocation,
    task_receiver,
)
from bide.tools import ToolRegistry


class Question(BaseModel):
    question: str


class Verdict(BaseModel):
    approved: bool
    note: str


def file_ticket(tx: Any, envelope: dict[str, Any]) -> None:
    """The desk's own state: one ticket per request (and a mark when one is cancelled)."""
    tickets = tx.get_doc("legal/tickets") or []
    tx.put_doc("legal/tickets", [*tickets, envelope])


DESK = task_receiver("legal-desk", file_ticket)
BINDINGS = BindingSet(
    [
        WorkflowBinding(
            "ask_legal",
            "Ask the legal desk a question and wait for its verdict",
            Question,
            Push(DESK),
            "joined",
            hard_deadline=2 * HOUR,
            reply_schema=Verdict,
        )
    ]
)


def script(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role == "user":
        question = "May we ship the MIT-licensed font in the app?"
        return call_tool("ask_legal", {"question": question}, id="legal-1")
    return reply(f"Legal says: {last.text}")


async def scenario(world: World) -> dict[str, Any]:
    say = world.say
    agent = world.services.setdefault(
        "agent", Agent(ScriptedProvider(script), ToolRegistry(BINDINGS.tools))
    )
    h = await world.process([*agent.task_kinds(), *BINDINGS.task_kinds()])
    conv = Conversations(h, agent)
    await conv.create("main")
    say("1. The user asks; the agent calls ask_legal (push, joined, hard deadline 2h).")
    await conv.submit("main", "Can we ship the new font?", request_id="r1")
    wake = await h.run_until_parked()
    [ticket] = h.get_doc("legal/tickets")
    invocation = read_invocation(h, ticket["invocation"])
    assert invocation is not None
    ref = ticket["keys"]["result"]
    call = h.task(invocation.call_task)
    say(f"   the call is {call.status if call else '?'}; the desk got a {ticket['type']} envelope")
    say(f"   invocation {invocation.id[:12]}..., producer: the desk's task {invocation.producer}")
    say(
        f"   wake(): active={wake.active}, at=+{((wake.at or 0) - world.clock.now()) / HOUR:.0f}h "
        "(the promise's hard deadline)"
    )

    world.at(30 * 60)
    say("2. Thirty minutes later a reply arrives with a forged correlation id.")
    seq = h.seq
    try:
        await BINDINGS.reply(
            h,
            invocation.id,
            "result",
            producer=invocation.producer,
            correlation="corr-forged",
            value={"approved": True, "note": "sure"},
        )
    except ReplyRejected as exc:
        say(f"   {exc}")
    say(f"   session unchanged: {h.seq == seq}")

    say("3. The desk answers with the stored producer identity and correlation.")
    verdict = {"approved": True, "note": "OFL fonts are fine; keep the licence file"}
    result = await BINDINGS.reply(
        h,
        invocation.id,
        "result",
        producer=invocation.producer,
        correlation=ref["correlation"],
        value=verdict,
    )
    say(f"   reply -> {result}")
    await h.run_until_parked()
    sub = conv.submission("main", "r1")
    assert sub is not None
    say(f"   the agent continued: {sub.answer!r}")
    return {"answer": sub.answer, "tickets": len(h.get_doc("legal/tickets"))}


def check(result: dict[str, Any], world: World) -> None:
    """The correlated reply reached the agent; the forged one changed nothing."""
    assert result["answer"].startswith('Legal says: {"approved": true')
    assert result["tickets"] == 1


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: joined call parked on its promise; the forged reply was rejected")
