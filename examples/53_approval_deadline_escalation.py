"""53: an approval with a deadline and an escalation (design 003, "Approve with a deadline").

One question stays open the whole time. ``ctx.race(pending, timeout=4h)`` gives the person
four hours; when the deadline wins, a step pages the on-call engineer and the body races the
*same* question again for twenty more hours. The first call is approved after six hours; the
second is never answered, times out, and returning withdraws its question (a late answer is
``closed``). Between the waits nothing runs: the session's only alarm is the next deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import HOUR
from bide.tools import ToolRegistry, result_of
from bide.workflow import answer_in, define_workflow_tool, pending_asks

APPROVE_OR_CANCEL = [
    {"id": "approve", "label": "Deploy", "style": "primary"},
    {"id": "cancel", "label": "Cancel"},
]


class DeployArgs(BaseModel):
    service: str


class OnCall:
    """The paging service (idempotent by key) and the deployer."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.deploys: dict[str, str] = {}

    def page(self, service: str, key: str) -> str:
        return self.pages.setdefault(key, f"paged on-call about {service}")

    def apply(self, service: str, key: str) -> str:
        return self.deploys.setdefault(key, f"https://{service}.example/live")


def tools(oncall: OnCall) -> ToolRegistry:
    async def deploy(args: DeployArgs, ctx: Any) -> dict[str, Any]:
        pending = ctx.ask(
            f"Deploy {args.service}?", display="confirmation", options=APPROVE_OR_CANCEL
        )
        answer = await ctx.race(pending, timeout=4 * HOUR)
        if answer is None:
            await ctx.step(lambda s: oncall.page(args.service, s.idempotency_key), name="page")
            answer = await ctx.race(pending, timeout=20 * HOUR)
        if answer is None:
            return {"deployed": False, "reason": "timed out"}
        if answer.option_id != "approve":
            return {"deployed": False, "reason": "rejected"}
        url = await ctx.step(lambda s: oncall.apply(args.service, s.idempotency_key), name="apply")
        return {"deployed": True, "url": url}

    return ToolRegistry(
        [define_workflow_tool("deploy", "Deploy after approval", DeployArgs, deploy)]
    )


def question_of(h: Any, task_id: str) -> dict[str, Any] | None:
    """The question a call published, open or not."""
    found = [d.body for d in h.list_docs("ask/") if d.body["task_id"] == task_id]
    return found[0] if found else None


async def scenario(world: World) -> dict[str, Any]:
    oncall = world.services.setdefault("oncall", OnCall())
    registry = tools(oncall)
    h = await world.process([registry.task])
    say = world.say

    say("1. 00:00 deploy(api) asks; the person has four hours.")
    first = await h.create_task(registry.task, registry.call("deploy", {"service": "api"}), key="a")
    wake = await h.run_until_parked()
    alarm = (wake.at or 0) - world.clock.now()
    say(f"   the call is {h.task(first).state.status}; alarm at +{alarm:.0f}s")
    world.at(4 * HOUR)
    await h.run_until_parked()
    open_now = len(pending_asks(h))
    say(f"   04:00 nobody answered: {sorted(oncall.pages.values())}; still open: {open_now}")
    world.at(6 * HOUR)
    asked = question_of(h, first)
    if asked is not None and asked["status"] == "open":
        approved = answer_in(h, asked["id"], option_id="approve")
        say(f"   06:00 the person approves the same question -> {approved}")
    await h.run_until_parked()
    one = result_of(h.outcome(first))
    say(f"   result: {one.text}")

    say("2. 06:00 deploy(web) asks; nobody ever answers.")
    second = await h.create_task(
        registry.task, registry.call("deploy", {"service": "web"}), key="b"
    )
    await h.run_until_parked()
    for at in (10 * HOUR, 30 * HOUR):
        world.at(at)
        await h.run_until_parked()
    two = result_of(h.outcome(second))
    say(f"   30:00 result: {two.text}")
    question = question_of(h, second)
    assert question is not None
    late = answer_in(h, question["id"], option_id="approve")
    say(f"   the question is {question['status']}; a late answer -> {late}")
    return {
        "first": one.details,
        "second": two.details,
        "pages": len(oncall.pages),
        "deploys": len(oncall.deploys),
        "late": str(late),
    }


def check(result: dict[str, Any], world: World) -> None:
    """Approved after the escalation; the other timed out; each external effect once."""
    assert result["first"] == {"deployed": True, "url": "https://api.example/live"}
    assert result["second"] == {"deployed": False, "reason": "timed out"}
    assert result["pages"] == 2 and result["deploys"] == 1
    assert result["late"] == "closed"


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: one question, a deadline, an escalation, then approved; the other timed out")
