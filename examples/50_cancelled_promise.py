"""A cancelled promise ignores a late success (design 002, durable promises).

``request_quote`` pushes a request to the session's pricing receiver and returns a promise
handle. An agent awaits the handle, then cancels it: the awaiting call wakes with
``cancelled``, and the receiver gets a per-key cancellation notice in its mailbox (the receiver
itself is shared and keeps running). The pricing backend, not having noticed, replies with a
valid, correctly correlated quote: the reply is accepted as a terminal write, and ignored,
because the first terminal write wins.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import DAY
from bide.bindings import BindingSet, Push, WorkflowBinding, task_receiver
from bide.promises import Promises, decide_resolution, promise_tools
from bide.tools import ToolRegistry, result_of


class QuoteRequest(BaseModel):
    item: str
    quantity: int


class Quote(BaseModel):
    price_eur: float


def remember(tx: Any, envelope: dict[str, Any]) -> None:
    """The pricing desk keeps every envelope it was sent (requests and cancel notices)."""
    inbox = tx.get_doc("pricing/inbox") or []
    tx.put_doc("pricing/inbox", [*inbox, envelope])


PRICING = task_receiver("pricing", remember)
BINDINGS = BindingSet(
    [
        WorkflowBinding(
            "request_quote",
            "Ask pricing for a quote; returns a promise handle",
            QuoteRequest,
            Push(PRICING),
            "promises",
            hard_deadline=DAY,
            reply_schema=Quote,
        )
    ]
)


async def scenario(world: World) -> dict[str, Any]:
    say = world.say
    registry = ToolRegistry([*BINDINGS.tools, *promise_tools()])
    h = await world.process([registry.task, *BINDINGS.task_kinds()])

    async def call(name: str, arguments: dict[str, Any], key: str) -> str:
        t = await h.create_task(registry.task, registry.call(name, arguments), key=key)
        await h.run_until_parked()
        return t

    say("1. The agent asks for a quote and gets a promise handle.")
    asked = await call("request_quote", {"item": "GPU hours", "quantity": 500}, "q1")
    handle = result_of(h.outcome(asked)).details["promises"]["result"]
    say(f"   handle: {handle[:14]}...")
    waiter = await call("promise_await", {"promise_id": handle, "timeout_seconds": 3600}, "w1")
    say(f"   promise_await is {h.task(waiter).status}")

    world.at(10 * 60)
    say("2. The plan changes: the agent cancels the promise.")
    cancelled = await call("promise_cancel", {"promise_id": handle, "reason": "plan changed"}, "x1")
    say(f"   promise_cancel -> {result_of(h.outcome(cancelled)).text}")
    say(f"   the waiting call woke -> {result_of(h.outcome(waiter)).text}")
    inbox = h.get_doc("pricing/inbox")
    say(f"   pricing's mailbox: {[(e['type'], e.get('status')) for e in inbox]}")

    world.at(25 * 60)
    say("3. Fifteen minutes later the pricing backend replies with a valid quote.")
    request = inbox[0]
    late = await BINDINGS.reply(
        h,
        request["invocation"],
        "result",
        producer=_producer(h, handle),  # the receiver's task, as the invocation stored it
        correlation=request["keys"]["result"]["correlation"],
        value={"price_eur": 1234.5},
    )
    promise = Promises(h).get(handle)
    assert promise is not None
    say(f"   reply -> {late}; the promise stays {promise.status}, value={promise.value}")
    rule = decide_resolution(promise, "resolved", {"price_eur": 1}, None, world.clock.now(), "x")
    say(
        f"   the rule, as a pure function: {rule.result} (no document to write: {rule.doc is None})"
    )
    again = await call("promise_await", {"promise_id": handle}, "w2")
    say(f"   awaiting it again -> {result_of(h.outcome(again)).text}")
    return {"reply": str(late), "status": promise.status, "value": promise.value}


def _producer(h: Any, promise_id: str) -> str:
    promise = Promises(h).get(promise_id)
    assert promise is not None and promise.producer is not None
    return promise.producer


def check(result: dict[str, Any], world: World) -> None:
    """The late success changed nothing."""
    assert result == {"reply": "ignored", "status": "cancelled", "value": None}


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: first terminal write wins; the cancelled promise ignored the late success")
