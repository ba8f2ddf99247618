"""Signal delivery without loading a session: what a webhook or signal handler calls.

It reads the session's sequence number first and the target task second, decides with the
same pure rule the harness uses, and commits conditioned on that sequence number. A commit
landing in between makes the store refuse; the delivery then reads again and decides afresh,
so the design's check order holds against any concurrent worker.

A key ending in ``.*`` names a stream (:func:`stream_key`): each value goes to the first
``<prefix>.<n>`` that holds no value, has not expired and whose wait's deadline has not
passed, chosen against the same read as the decision. One capability URL can so deliver many
requests (a workflow webhook iterated with ``async for``) and none is answered ``duplicate``.
"""

from __future__ import annotations

from typing import Any

from .clock import Clock
from .errors import ConflictError
from .records import TaskRecord
from .rules import SignalDecision, deadline_passed_for, decide_signal
from .signals import SignalToken, slot_name
from .store.base import Store

_ATTEMPTS = 16
STREAM_SUFFIX = ".*"


def stream_key(record: TaskRecord | None, signal: str, key: str, now: float) -> str:
    """The key a value for ``key`` goes to: ``key`` itself, or for a stream (``<prefix>.*``)
    the first ``<prefix>.<n>`` of ``record`` still open for a value at ``now``."""
    if not key.endswith(STREAM_SUFFIX) or record is None:
        return key
    prefix = key[: -len(STREAM_SUFFIX)]
    n = 0
    while True:
        candidate = f"{prefix}.{n}"
        name = slot_name(signal, candidate)
        slot = record.signals.get(name)
        taken = slot is not None and (slot.has_value or slot.expired)
        # A slot whose wait just timed out is about to expire: a value there would be refused.
        if not taken and not deadline_passed_for(record, name, now):
            return candidate
        n += 1


def deliver_signal(
    store: Store,
    session_id: str,
    task_id: str,
    token: SignalToken[Any],
    key: str,
    value: Any,
    clock: Clock,
) -> SignalDecision:
    """Deliver one signal value to one task, reading only that task.

    Returns the decision (result, and which fields failed for ``invalid``). Raises
    :class:`ConflictError` only if the session stayed too busy to write for every attempt;
    nothing is written then and the caller may try again.
    """
    for _ in range(_ATTEMPTS):
        seq = store.head(session_id)  # first: a task read after it is at least this new
        record = store.get_task(session_id, task_id)
        now = clock.now()
        decision = decide_signal(
            record, token, stream_key(record, token.name, key, now), value, now
        )
        if decision.record is None:
            return decision
        try:
            store.commit(session_id, seq, [decision.record])
        except ConflictError:
            continue
        return decision
    raise ConflictError(session_id, seq, None)
