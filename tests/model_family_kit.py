"""The task kinds and the reference of the model-based test of waits, children and tools
(tests/test_model_based_tools.py).

A *family* task runs a plan of steps. Each step creates child tasks in one commit and waits
for all of them to end (``Waiting``, policy ``all_settled``); on the wake it reads each
child's outcome into its log, then creates the next step's children, or ends with the log.
A child is either a *kid* (sleeps ``dt`` seconds, or none, and returns its value) or a call
of ``pay``, a replay-unsafe tool (the default policy) whose effect increments an external
counter, one per call: design 001 ch. V says such a call runs at most once and a run that was
cut off after its intent was stored ends ``interrupted`` instead of running again. So a
completed call counted exactly one payment (exactly once means one, not at most one), an
interrupted call at most one, and no call ever two.

The fault-free reference log of a plan is :func:`reference_log`; the only deviations the
state machine allows are the ones its own faults explain (a ``pay`` call cut in flight, a task
recovered past the restart limit).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from model_kit import Trap
from pydantic import BaseModel, ConfigDict

from bide import (
    Completed,
    Sleeping,
    Terminal,
    Waiting,
    define_task,
)
from bide.tools import ToolRegistry, ToolResult, define_tool

FAMILY = "mb.family"
KID = "mb.kid"
TOOL = "bide.tool"
# Where a ``pay`` run can be stopped: in its execute() before the payment, or after it (the
# payment made, its result not yet committed). The intent is stored before either.
PAY_STOPS = ("before", "after")


class PayArgs(BaseModel):
    """``pay``'s arguments: which call this is (the counter's key)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    ref: str


def kid_ref(parent: str, step: int, j: int) -> str:
    """The key of child ``j`` of step ``step`` (also the ``pay`` counter's key)."""
    return f"{parent}/{step}.{j}"


def make_family(trap: Trap, paid: Counter[str]) -> tuple[Any, Any, ToolRegistry]:
    """The family kind, the kid kind and the registry of ``pay`` (counting into ``paid``),
    wired to ``trap`` (a kid's phase and a family's first stop at ``start``; a family's
    ``woke`` phase at its start, ``woke``, or after reading its children, ``read``; a ``pay``
    run ``before`` or ``after`` its payment)."""

    async def pay(args: PayArgs, api: Any) -> Any:
        await trap.check(args.ref, "before")
        paid[args.ref] += 1
        await trap.check(args.ref, "after")
        return ToolResult.of_text("paid")

    registry = ToolRegistry([define_tool("pay", "Pay once (replay-unsafe)", PayArgs, pay)])

    # A child is trapped by its ref (known before the run creates it), a family by its id.
    async def kid_start(task: Any, rt: Any) -> None:
        await trap.check(task.input["value"])
        dt = task.input["dt"]
        if dt:
            await rt.commit(Sleeping(checkpoint={"phase": "done"}, until=rt.now() + dt))
        else:
            await rt.commit(Terminal(outcome=Completed(result={"kid": task.input["value"]})))

    async def kid_done(task: Any, rt: Any) -> None:
        await trap.check(task.input["value"])
        await rt.commit(Terminal(outcome=Completed(result={"kid": task.input["value"]})))

    kid = define_task(KID, 1, lambda _: "start", {"start": kid_start, "done": kid_done})

    def park(task: Any, step: int, log: list[Any]) -> Any:
        plan = task.input["plan"]
        if step == len(plan):
            return Terminal(outcome=Completed(result={"log": log}))

        def build(tx: Any) -> Any:
            kids = []
            for j, child in enumerate(plan[step]):
                ref = kid_ref(task.id, step, j)
                if child["op"] == "pay":
                    call = registry.call("pay", {"ref": ref})
                    kids.append(tx.create_task(registry.task, call, key=ref))
                else:
                    kids.append(tx.create_task(kid, {"dt": child["dt"], "value": ref}, key=ref))
            cp = {"phase": "woke", "step": step, "kids": kids, "log": log}
            return Waiting(checkpoint=cp, on=tuple(kids))

        return build

    async def start(task: Any, rt: Any) -> None:
        await trap.check(task.id)
        await rt.commit(park(task, 0, []))

    async def woke(task: Any, rt: Any) -> None:
        await trap.check(task.id, "woke")
        cp = task.checkpoint
        entries = [summary(await rt.outcome(k)) for k in cp["kids"]]
        await trap.check(task.id, "read")
        await rt.commit(park(task, cp["step"] + 1, [*cp["log"], entries]))

    family = define_task(FAMILY, 1, lambda _: "start", {"start": start, "woke": woke})
    return family, kid, registry


def summary(outcome: Any) -> Any:
    """A child's outcome as the family logs it: a kid's result, ``paid`` or
    ``interrupted`` for a call, else the status (and error)."""
    if outcome is None:
        return "not ended"
    if outcome.status != "completed":
        return [outcome.status, getattr(outcome, "error", None)]
    result = outcome.result
    if isinstance(result, dict) and "content" in result:
        return result.get("code") or result["content"][0]["text"]
    return result


def reference_log(parent: str, plan: list[list[dict[str, Any]]]) -> list[Any]:
    """The family's log in a fault-free run: every kid's value, every call ``paid``."""
    return [
        ["paid" if c["op"] == "pay" else {"kid": kid_ref(parent, step, j)} for j, c in enumerate(s)]
        for step, s in enumerate(plan)
    ]
