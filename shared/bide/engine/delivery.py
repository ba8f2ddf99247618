"""Signal delivery without loading a session: what a webhook or signal handler calls.

It reads the session's sequence number and the target task together
(:meth:`~bide.engine.store.base.Store.task_at_head`: one consistent read), decides with the
same pure rule the harness uses, and commits conditioned on that sequence number. A commit
landing in between makes the store refuse; the delivery then reads again and decides afresh,
so the design's check order holds against any concurrent worker.

Keys mean what they mean for :meth:`~bide.Harness.signal`, because both decide with
:func:`~bide.engine.rules.decide_signal`: a key ending in ``.*`` names a stream
(:func:`~bide.engine.rules.stream_key`), and each value goes to the first ``<prefix>.<n>``
still open for one, chosen against the same read as the decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import slots
from .budgets import check_commit
from .clock import Clock
from .errors import ConflictError
from .heartbeats import decide_beat
from .records import TaskRecord
from .rules import STREAM_SUFFIX, SignalDecision, decide_signal, stream_key
from .signals import SignalToken
from .slots import SlotLookup
from .store.base import Doc, Store

_ATTEMPTS = 16
#: A session's sequence number and one of its tasks (or None), read together.
AtHead = tuple[int, TaskRecord | None]

__all__ = [
    "STREAM_SUFFIX",
    "AtHead",
    "deliver_beat",
    "deliver_signal",
    "stream_key",
]  # the stream helpers moved to rules


def _body(doc: Doc | None) -> Any:
    return None if doc is None else doc.body


def deliver_signal(
    store: Store,
    session_id: str,
    task_id: str,
    token: SignalToken[Any],
    key: str,
    value: Any,
    clock: Clock,
    *,
    at_head: AtHead | None = None,
) -> SignalDecision:
    """Deliver one signal value to one task, reading only that task.

    A key whose slot left the task's record (consumed or expired) costs one document read,
    made after the sequence number was read, so the commit's condition covers it too.
    ``at_head``: the sequence number and the task as the caller already read them together
    (:meth:`~bide.engine.store.base.Store.task_and_doc_at_head`); the first attempt decides
    on them instead of reading again, and a conflict reads afresh as always.

    Returns the decision (result, and which fields failed for ``invalid``). Raises
    :class:`~bide.engine.limits.ValueRefused` for a value over the limits (too deep, too
    large, over the task's budget) and :class:`ConflictError` if the session stayed too busy
    to write for every attempt; nothing is written for either.
    """

    def decide(record: TaskRecord | None, moved: SlotLookup) -> SignalDecision:
        return decide_signal(record, token, key, value, clock.now(), moved=moved)

    return _deliver(store, session_id, task_id, decide, at_head)


def deliver_beat(
    store: Store,
    session_id: str,
    task_id: str,
    signal: str,
    key: str,
    clock: Clock,
    *,
    at_head: AtHead | None = None,
) -> SignalDecision:
    """Deliver one heartbeat to one task, reading only that task
    (:func:`~bide.engine.heartbeats.decide_beat`): at most one write, conditioned on the
    session's sequence number like :func:`deliver_signal`, and nothing else (``at_head`` as
    there). Raises :class:`ConflictError` if the session stayed too busy to write for every
    attempt."""

    def decide(record: TaskRecord | None, moved: SlotLookup) -> SignalDecision:
        return decide_beat(record, signal, key, clock.now(), moved=moved)

    return _deliver(store, session_id, task_id, decide, at_head)


def _deliver(
    store: Store,
    session_id: str,
    task_id: str,
    decide: Callable[[TaskRecord | None, SlotLookup], SignalDecision],
    at_head: AtHead | None,
) -> SignalDecision:
    """Read the task at the head (``at_head`` on the first attempt, when given), ``decide``,
    and commit the record it returns conditioned on that head; a conflict reads afresh."""
    for _ in range(_ATTEMPTS):
        # One consistent read (none on a first attempt given one).
        seq, record = at_head if at_head is not None else store.task_at_head(session_id, task_id)
        at_head = None
        moved = slots.lookup(lambda doc: _body(store.get_doc(session_id, doc)), task_id)
        decision = decide(record, moved)
        if decision.record is None:
            return decision
        # The same guard every harness commit passes, so nothing reaches the store unchecked
        # (decide_signal checked the value and the task's budget; a beat's write, which moves
        # beat_by or marks a key expired, changes nothing it checks).
        check_commit({task_id: record} if record is not None else {}, [decision.record], {})
        try:
            store.commit(session_id, seq, [decision.record])
        except ConflictError:
            continue
        return decision
    raise ConflictError(session_id, seq, None)
