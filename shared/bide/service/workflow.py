"""The workflow's service functions: answer a question, complete a sign-in, cancel a
background task, end a session, and the session's workflow view, for one request each.

Each takes :class:`~bide.service.deps.Deps`, attaches a harness, wakes the session's queue
before it writes (arm before signal: a crash in between never strands the session) and again
after a delivery landed (no lost wakeup: a worker may have parked in between). The work on
the attached harness is done by the ``*_in`` functions of :mod:`bide.workflow`.

HTTP routes they are meant for (wired by ``bide.service.http``):

* ``POST /sessions/{id}/asks/{ask_id}/answer`` ``{option_id?, text?}`` -> :func:`answer`
* ``POST /sessions/{id}/authorizations/{request_id}/complete`` ``{token}`` (the provider's
  OAuth callback, after exchanging its code) -> :func:`complete_authorization`
* ``POST /sessions/{id}/tasks/{task_id}/cancel`` -> :func:`cancel_background`
* ``POST /sessions/{id}/end`` -> :func:`end_session`
* ``GET /sessions/{id}/workflow`` -> :func:`view` (questions, sign-ins, the task index and
  pending approvals)
* ``POST /sessions/{id}/approvals/{approval_id}/decide`` ``{approved, by?, note?}`` ->
  :func:`decide_approval` (approvals of :func:`bide.approvals.approval_required` tools)
* webhook requests keep using ``POST /hooks/{token}`` (stream keys: :mod:`bide.engine.delivery`)
"""

from __future__ import annotations

from typing import Any

from ..approvals import Approvals, DecideResult
from ..engine.harness import Harness
from ..engine.signals import SignalResult
from ..workflow.host import complete_authorization_in, view_in
from ..workflow.index import cancel_background_in, end_session_in
from ..workflow.requests import answer_in
from .deps import Deps


async def _attach(deps: Deps, session_id: str) -> Harness:
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        services=deps.harness_services(),
    )
    await harness.attach()
    return harness


def _woken(deps: Deps, session_id: str, result: SignalResult, why: str) -> SignalResult:
    if result is SignalResult.DELIVERED:
        deps.queue.wake(session_id, why)
    return result


async def answer(
    deps: Deps,
    session_id: str,
    ask_id: str,
    option_id: str | None = None,
    text: str | None = None,
) -> SignalResult:
    """Answer a question: ``delivered``, ``duplicate`` (answered before; the first answer
    stands), ``closed`` (its run ended), ``invalid`` or ``not_found``. Never steers."""
    deps.queue.wake(session_id, "answer")
    harness = await _attach(deps, session_id)
    result = answer_in(harness, ask_id, option_id=option_id, text=text)
    return _woken(deps, session_id, result, "answer-stored")


async def complete_authorization(
    deps: Deps, session_id: str, request_id: str, token: str
) -> SignalResult:
    """:func:`~bide.workflow.complete_authorization_in` as a service (the port is
    ``Deps.services``)."""
    deps.queue.wake(session_id, "authorization")
    harness = await _attach(deps, session_id)
    result = await complete_authorization_in(harness, request_id, token)
    return _woken(deps, session_id, result, "authorization-stored")


async def cancel_background(deps: Deps, session_id: str, task_id: str) -> str:
    """Cancel a background task: ``cancelled``, ``ended`` or ``not_found``."""
    deps.queue.wake(session_id, "cancel-task")
    harness = await _attach(deps, session_id)
    result = await cancel_background_in(harness, task_id)
    if result == "cancelled":
        deps.queue.wake(session_id, "cancel-task-stored")
    return result


async def end_session(deps: Deps, session_id: str) -> list[str]:
    """End the session: every working background task is cancelled, no new one starts, and
    in a store that expires ended sessions the retention clock starts
    (:mod:`bide.service.retention`). The ids cancelled."""
    deps.queue.wake(session_id, "end")
    harness = await _attach(deps, session_id)
    cancelled = await end_session_in(harness)
    # The worker this wakes also stamps the session's older items with its expiry
    # (bide.service.retention): too many for this request's time, and retried with the wake.
    deps.queue.wake(session_id, "end-stored")
    return cancelled


async def decide_approval(
    deps: Deps,
    session_id: str,
    approval_id: str,
    approved: bool,
    *,
    by: str | None = None,
    note: str | None = None,
) -> DecideResult:
    """Record a pending approval's one decision and wake its call: ``decided``,
    ``already_decided`` (the first decision stands), ``closed`` or ``not_found``."""
    deps.queue.wake(session_id, "approval")
    harness = await _attach(deps, session_id)
    result = await Approvals(harness).decide(approval_id, approved, by=by, note=note)
    if result is DecideResult.DECIDED:
        deps.queue.wake(session_id, "approval-stored")
    return result


def pending_approvals(harness: Harness) -> list[dict[str, Any]]:
    """The approvals waiting for a decision, oldest first, each with the arguments of the
    call it would let run (what a person decides on)."""
    found = []
    for approval in sorted(Approvals(harness).pending(), key=lambda a: (a.requested_at, a.id)):
        bound = harness.get_doc(approval.arguments_ref)
        arguments = bound.get("arguments") if isinstance(bound, dict) else None
        found.append({**approval.model_dump(mode="json"), "arguments": arguments})
    return found


async def view(deps: Deps, session_id: str) -> dict[str, Any]:
    """:func:`~bide.workflow.view_in` as a service, with the pending approvals."""
    harness = await _attach(deps, session_id)
    return {**view_in(harness), "approvals": pending_approvals(harness)}
