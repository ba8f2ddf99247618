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
* ``GET /sessions/{id}/workflow`` -> :func:`view` (the first page of the questions, sign-ins,
  the task index, pending approvals and non-determinism failures, each with the cursor that
  continues it)
* ``GET /sessions/{id}/workflow/{list}?cursor=&limit=`` -> :func:`workflow_page` (one of those
  lists by page; the pages and cursors of :mod:`bide.service.pages`)
* ``POST /sessions/{id}/approvals/{approval_id}/decide`` ``{approved, by?, note?}`` ->
  :func:`decide_approval` (approvals of :func:`bide.approvals.approval_required` tools)
* webhook requests keep using ``POST /hooks/{token}`` (stream keys: :mod:`bide.engine.delivery`)
"""

from __future__ import annotations

from typing import Any

from ..approvals import Approvals, DecideResult
from ..engine.failures import SignalFailure
from ..engine.harness import Harness
from ..engine.signals import SignalResult
from ..workflow.host import VIEW_LISTS, complete_authorization_in, view_lists
from ..workflow.index import cancel_background_in, end_session_in
from ..workflow.requests import answer_in
from .attach import attach as _attach
from .deps import Deps
from .pages import MAX_PAGE_BYTES, BadCursor, Page, build_page, decode_cursor

#: The lists of the workflow view, each served by page.
WORKFLOW_LISTS: tuple[str, ...] = (*VIEW_LISTS, "approvals")
#: How many items of each list the view holds, and its byte bound per list: five lists of
#: 1 MiB stay well under Lambda's 6 MB response payload limit
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
VIEW_LIMIT = 50
VIEW_BYTES = MAX_PAGE_BYTES


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
    failure: SignalFailure | None = None,
) -> SignalResult:
    """Answer a question: ``delivered``, ``duplicate`` (answered before; the first answer
    stands), ``closed`` (its run ended), ``invalid`` or ``not_found``. Never steers. A
    ``failure`` instead of an answer makes the waiting ``ctx.ask`` raise it."""
    deps.queue.wake(session_id, "answer")
    harness = await _attach(deps, session_id)
    result = answer_in(harness, ask_id, option_id=option_id, text=text, failure=failure)
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
    return [item for _, item in _approvals(harness)]


def _approvals(harness: Harness) -> list[tuple[list[Any], dict[str, Any]]]:
    found = []
    for approval in sorted(Approvals(harness).pending(), key=lambda a: (a.requested_at, a.id)):
        bound = harness.get_doc(approval.arguments_ref)
        arguments = bound.get("arguments") if isinstance(bound, dict) else None
        item = {**approval.model_dump(mode="json"), "arguments": arguments}
        found.append(([approval.requested_at, approval.id], item))
    return found


def _lists(harness: Harness) -> dict[str, list[tuple[list[Any], dict[str, Any]]]]:
    return {**view_lists(harness), "approvals": _approvals(harness)}


def _page(
    pairs: list[tuple[list[Any], dict[str, Any]]],
    session_id: str,
    name: str,
    cursor: str | None,
    limit: int,
    bound: int,
) -> Page:
    # The cursor holds the last item's [time, id]; items sort by it (oldest first), and a
    # later item never sorts before an earlier one, so each item is read once.
    after = decode_cursor(cursor, session=session_id, kind=f"workflow.{name}")
    if after is not None and not (
        isinstance(after, list)
        and len(after) == 2
        and isinstance(after[0], int | float)
        and not isinstance(after[0], bool)
        and isinstance(after[1], str)
    ):
        raise BadCursor("cursor", f"not a position in the {name} list")
    start = (float(after[0]), after[1]) if after is not None else None
    chosen = [p for p in pairs if start is None or (float(p[0][0]), p[0][1]) > start]
    return build_page(
        chosen[: limit + 1],
        limit=limit,
        session=session_id,
        kind=f"workflow.{name}",
        start=after,
        byte_bound=bound,
    )


async def workflow_page(
    deps: Deps,
    session_id: str,
    name: str,
    *,
    cursor: str | None,
    limit: int,
    bound: int = MAX_PAGE_BYTES,
) -> Page:
    """One page of the workflow view's list ``name`` (one of :data:`WORKFLOW_LISTS`), oldest
    first, after ``cursor``. Raises :class:`~bide.service.pages.BadCursor` (field ``list``)
    for another name."""
    if name not in WORKFLOW_LISTS:
        raise BadCursor("list", f"not one of {', '.join(WORKFLOW_LISTS)}")
    harness = await _attach(deps, session_id)
    return _page(_lists(harness)[name], session_id, name, cursor, limit, bound)


async def view(deps: Deps, session_id: str) -> dict[str, Any]:
    """The workflow view, bounded: the first page of each of :data:`WORKFLOW_LISTS`, each
    with ``<list>_next`` (the cursor that continues it on ``GET .../workflow/<list>``) and
    ``<list>_more``, as the session view serves its lists."""
    harness = await _attach(deps, session_id)
    found: dict[str, Any] = {"session_id": session_id}
    for name, pairs in _lists(harness).items():
        page = _page(pairs, session_id, name, None, VIEW_LIMIT, VIEW_BYTES)
        found[name] = page.items
        found[f"{name}_next"] = page.next
        found[f"{name}_more"] = page.more
    return found
