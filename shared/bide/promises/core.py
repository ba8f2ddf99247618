"""Creating, resolving and cancelling promises inside commits; the deadline keeper task."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..engine.events import emit_in
from ..engine.failures import SignalFailure, parse_failure
from ..engine.host import WriteTx, read_docs
from ..engine.limits import check_value
from ..engine.mailbox import post
from ..engine.state import Aborted, Completed, Sleeping, Terminal
from ..engine.tasks import TaskView, define_task
from .model import (
    DEFAULT_REJECTION,
    PROMISE,
    PROMISE_CANCELLED,
    CancelNotice,
    NoticeRoute,
    PromiseDoc,
    PromiseError,
    PromiseSettled,
    Waiter,
)
from .rules import ResolveResult, decide_resolution, group_terminal

KEEPER_TASK = "bide.promise-keeper"
_SETTLED_KEY = "settled"  # the keeper's own key: it ends as soon as the promise does


def promise_doc_key(promise_id: str) -> str:
    """The document holding a promise."""
    return f"promise/{promise_id}"


def read_promise(reader: Any, promise_id: str) -> PromiseDoc | None:
    """A promise as ``reader`` (a harness, runtime or tx) sees it; None when unknown."""
    body = reader.get_doc(promise_doc_key(promise_id))
    return None if body is None else PromiseDoc.model_validate(body)


def list_promises(reader: Any) -> list[PromiseDoc]:
    """Every promise of the session, in id order."""
    return [PromiseDoc.model_validate(body) for _key, body in read_docs(reader, "promise/")]


def _put(tx: WriteTx, doc: PromiseDoc) -> None:
    tx.put_doc(promise_doc_key(doc.id), doc.model_dump(mode="json"))


def create_promise(
    tx: WriteTx,
    promise_id: str,
    *,
    deadline: float | None = None,
    scope: str | None = None,
    producer: str | None = None,
    correlation: str | None = None,
    key: str = "result",
    invocation: str | None = None,
    group: list[str] | None = None,
    close_task: str | None = None,
    notice: NoticeRoute | None = None,
    label: str | None = None,
) -> PromiseDoc:
    """Record an open promise and start its keeper, in ``tx``'s commit. Idempotent by id: a
    promise that exists is returned unchanged, so a rerun of the creating code converges.

    ``deadline`` (a clock time) is the hard deadline: the keeper ends the promise ``expired``
    then, through :func:`resolve_promise` like any other outcome. ``scope`` names a task whose
    end cancels the promise (the keeper is owned by it); None keeps it for the session.
    """
    existing = read_promise(tx, promise_id)
    if existing is not None:
        return existing
    if deadline is not None and deadline <= tx.now():
        raise PromiseError(f"promise {promise_id!r}: the hard deadline must be in the future")
    keeper = tx.create_task(
        DEADLINE_KEEPER, {"promise": promise_id}, key=f"promise:{promise_id}", owner=scope
    )
    doc = PromiseDoc(
        id=promise_id,
        owner=tx.task_id,
        scope=scope,
        label=label,
        producer=producer,
        correlation=correlation,
        key=key,
        invocation=invocation,
        group=list(group) if group else [promise_id],
        close_task=close_task,
        notice=notice,
        deadline=deadline,
        keeper=keeper,
        created_at=tx.now(),
    )
    _put(tx, doc)
    return doc


def resolve_promise(
    tx: WriteTx,
    promise_id: str,
    status: str,
    value: Any = None,
    error: str | None = None,
    *,
    failure: SignalFailure | None = None,
) -> ResolveResult:
    """One terminal write (``resolved``, ``rejected``, ``cancelled`` or ``expired``), in
    ``tx``'s commit. See :func:`~.rules.decide_resolution` for who wins.

    When this write ends the promise, the same commit delivers :data:`PROMISE` to every open
    await key and to the keeper, sends a cancellation notice to the producer (cancelled or
    expired), and aborts ``close_task`` once every promise of the group is terminal.

    A rejection carries a type: ``failure`` (a :class:`~bide.engine.failures.SignalFailure`:
    type, message, data) gives all three; a bare ``error`` is typed
    :data:`~bide.promises.model.DEFAULT_REJECTION`.

    Raises :class:`~bide.engine.limits.ValueRefused` (nothing written) for a ``value`` or
    ``error`` over the limits of :mod:`bide.engine.limits`, and
    :class:`~bide.engine.failures.MalformedFailure` for a malformed ``failure``.
    """
    check_value(value, f"the value of promise {promise_id!r}")
    if failure is not None:
        failure = parse_failure(failure.to_json())  # names the bad field, writes nothing
        check_value(failure.data, f"the error data of promise {promise_id!r}")
        error = failure.message
    if error is not None:
        check_value(error, f"the error of promise {promise_id!r}")
    typed = None
    if status == "rejected":
        typed = failure or SignalFailure(DEFAULT_REJECTION, error or "rejected")
    decision = decide_resolution(
        read_promise(tx, promise_id), status, value, error, tx.now(), tx.task_id or "host"
    )
    if decision.doc is not None and typed is not None and decision.doc.status == "rejected":
        update = {"error_type": typed.type, "error_data": typed.data}
        decision = replace(decision, doc=decision.doc.model_copy(update=update))
    if decision.doc is not None:
        _ended(tx, decision.doc)
    return decision.result


def cancel_promise(tx: WriteTx, promise_id: str, reason: str | None = None) -> ResolveResult:
    """Cancel: the caller no longer needs the result. A later success is ignored."""
    return resolve_promise(tx, promise_id, "cancelled", error=reason or "cancelled")


def _ended(tx: WriteTx, doc: PromiseDoc) -> None:
    _put(tx, doc)
    # Reported in the commit that ends it: a host's event stream shows every promise that
    # ended, and only those (bide.engine.events).
    emit_in(
        tx,
        "promise_settled",
        {
            "promise": doc.id,
            "status": doc.status,
            "value": doc.value,
            "error": doc.error,
            **({"error_type": doc.error_type} if doc.error_type else {}),
        },
    )
    settled = PromiseSettled.of(doc).model_dump(mode="json")
    # Delivery never fails the commit: a waiter that ended, or whose await interval already
    # timed out, answers "closed" and simply does not get the value (the document has it).
    for waiter in doc.waiters:
        tx.signal(waiter.task, PROMISE, waiter.key, settled)
    if doc.keeper is not None:
        tx.signal(doc.keeper, PROMISE, _SETTLED_KEY, settled)
    if doc.status in ("cancelled", "expired") and doc.notice is not None:
        _notify_producer(tx, doc, doc.notice)
    if doc.close_task is not None and doc.close_task != tx.task_id:
        # A task cannot abort-mark itself inside its own commit; a producer that resolves its
        # last promise itself is expected to end in that commit.
        members = [doc if m == doc.id else read_promise(tx, m) for m in doc.group]
        if group_terminal(members):
            tx.abort(doc.close_task, "all its promises are terminal")


def _notify_producer(tx: WriteTx, doc: PromiseDoc, route: NoticeRoute) -> None:
    notice = CancelNotice(
        promise_id=doc.id,
        key=doc.key,
        status="expired" if doc.status == "expired" else "cancelled",
        reason=doc.error,
        invocation=doc.invocation,
        correlation=doc.correlation,
    ).model_dump(mode="json")
    if route.mailbox is not None:
        post(tx, route.mailbox, {"type": "cancel", **notice}, ping=route.task)
    else:
        tx.signal(route.task, PROMISE_CANCELLED, route.key or doc.key, notice)


def register_waiter(tx: WriteTx, promise_id: str, task_id: str, key: str) -> PromiseDoc:
    """Make ``key`` of ``task_id`` an open await key of the promise, in ``tx``'s commit, and
    return the promise as the commit sees it. A terminal promise is returned unchanged (its
    outcome is in the document; there is nothing to wait for)."""
    doc = read_promise(tx, promise_id)
    if doc is None:
        raise PromiseError(f"no promise {promise_id!r} in this session")
    if doc.terminal or any(w.task == task_id and w.key == key for w in doc.waiters):
        return doc
    doc = doc.model_copy(update={"waiters": [*doc.waiters, Waiter(task=task_id, key=key)]})
    _put(tx, doc)
    return doc


# --- the deadline keeper ----------------------------------------------------------------------


async def _keep(task: TaskView, rt: Any) -> None:
    promise_id = task.input["promise"]
    doc = read_promise(rt, promise_id)
    if doc is None or doc.terminal:
        await rt.commit(Terminal(outcome=Completed(result={"status": doc and doc.status})))
        return

    def build(tx: Any) -> Any:
        current = read_promise(tx, promise_id)
        assert current is not None
        if current.terminal:
            return Terminal(outcome=Completed(result={"status": current.status}))
        if current.deadline is not None and tx.now() >= current.deadline:
            # The hard deadline ends the promise through the ordinary resolution path, so
            # waiters, the producer and the group see it like any other outcome.
            resolve_promise(tx, promise_id, "expired", error="the hard deadline was reached")
            return Terminal(outcome=Completed(result={"status": "expired"}))
        # Open: sleep until the deadline or the promise's end, whichever comes first. A
        # keeper without a deadline only keeps the promise's scope.
        return Sleeping(
            checkpoint={"phase": "keep", "round": int(task.checkpoint.get("round", 0)) + 1},
            signals=(PROMISE.key(_SETTLED_KEY),),
            until=current.deadline,
        )

    await rt.commit(build)


async def _scope_ended(task: TaskView, rt: Any) -> None:
    promise_id = task.input["promise"]
    reason = task.abort_reason or "the promise's scope ended"

    def build(tx: Any) -> Terminal:
        cancel_promise(tx, promise_id, reason)
        return Terminal(outcome=Aborted(reason=reason))

    await rt.commit(build)


DEADLINE_KEEPER = define_task(
    KEEPER_TASK,
    1,
    lambda _input: {"phase": "keep", "round": 0},
    {"keep": _keep},
    abort=_scope_ended,
)
"""One per promise: ends it ``expired`` at its hard deadline, or ``cancelled`` when its scope
ends; ends itself as soon as the promise is terminal."""
