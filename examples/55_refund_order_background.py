"""55: refund_order asks for approval in the background (design 003, "Ask now, act when
answered").

``refund_order`` has ``lifetime="task"``: the model gets ``{"status": "working", "task_id"}``
at once and the conversation goes on while the approval card waits. The question belongs to
the background task, not to the turn. When the person approves, the body issues the refund
(a step) and its return value arrives as a notification that wakes the agent, which relays it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import HOUR
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import ToolRegistry
from bide.workflow import answer_in, background_tasks, define_workflow_tool, install, pending_asks


class RefundArgs(BaseModel):
    order_id: str
    amount: float


class Payments:
    """Refunds are idempotent by key."""

    def __init__(self) -> None:
        self.refunds: dict[str, str] = {}

    def refund(self, order: str, amount: float, key: str) -> str:
        return self.refunds.setdefault(key, f"rf-{order}-{amount:.0f}")


def build(payments: Payments) -> Agent:
    async def refund_order(args: RefundArgs, ctx: Any, task: Any) -> dict[str, Any]:
        decision = await ctx.ask(
            f"Refund ${args.amount:.2f} on order {args.order_id}?",
            display="confirmation",
            options=[
                {"id": "approve", "label": "Refund", "style": "primary"},
                {"id": "deny", "label": "Deny"},
            ],
        )
        if decision.option_id != "approve":
            return {"refunded": False}
        receipt = await ctx.step(
            lambda s: payments.refund(args.order_id, args.amount, s.idempotency_key),
            name="issue_refund",
        )
        return {"refunded": True, "receipt": receipt}

    def script(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "tool":
            task_id = json.loads(last.text)["task_id"]
            return reply(f"I asked for approval of the refund (task {task_id}).")
        if last.text.startswith("Refund"):
            return call_tool("refund_order", {"order_id": "A-17", "amount": 40}, id="refund-1")
        if last.text.startswith("[background task"):
            return reply(f"Update: {last.text.split('] ', 1)[1]}")
        return reply("Your other order ships tomorrow.")

    tool = define_workflow_tool(
        "refund_order",
        "Request approval to refund an order, then issue the refund once approved.",
        RefundArgs,
        refund_order,
        lifetime="task",
    )
    agent = Agent(ScriptedProvider(script), ToolRegistry([tool]))
    install(agent)
    return agent


async def scenario(world: World) -> dict[str, Any]:
    payments = world.services.setdefault("payments", Payments())
    agent = world.services.setdefault("agent", build(payments))
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    cid = await conv.create("main")

    await conv.submit(cid, "Refund order A-17, $40", request_id="r1")
    await h.run_until_parked()
    world.at(10 * 60)
    await conv.submit(cid, "And where is my other order?", request_id="r2")
    await h.run_until_parked()
    for ask in pending_asks(h):
        world.say(f"   the approval card waits in the session: {ask.prompt!r}")
    for task in background_tasks(h):
        world.say(f"   task index: {task.tool} {task.status}")
    world.at(2 * HOUR)
    for ask in pending_asks(h):
        approved = answer_in(h, ask.id, option_id="approve")
        world.say(f"   two hours later the manager approves -> {approved}")
    await h.run_until_parked()
    for entry in conv.entries(cid):
        world.say(f"   {entry['type']:>11}: {entry['text']}")
    [task] = background_tasks(h)
    world.say(f"   task index: {task.tool} {task.status}, result {task.result}")
    return {
        "texts": [e["text"] for e in conv.entries(cid)],
        "refunds": len(payments.refunds),
        "status": task.status,
    }


def check(result: dict[str, Any], world: World) -> None:
    """The turn ended with the receipt; the talk went on; the refund came later, once."""
    texts = result["texts"]
    assert texts[-1] == 'Update: finished: {"refunded": true, "receipt": "rf-A-17-40"}'
    assert "Your other order ships tomorrow." in texts
    assert sum(t.startswith("I asked for approval") for t in texts) == 1
    assert result["refunds"] == 1 and result["status"] == "completed"


if __name__ == "__main__":
    world = World()
    world.say("The user asks for a refund; approval happens in the background:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: receipt at once, the conversation went on, the refund arrived as a notification")
