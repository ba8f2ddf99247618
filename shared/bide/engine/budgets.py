"""The checks that need task records: a task's signal budget, and what a commit changes.

Kept apart from :mod:`bide.engine.limits` (which defines the limits and checks one value)
because records import signal tokens, which import the limits: this module sits above both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .limits import (
    ENVELOPE_BYTES,
    ENVELOPE_DEPTH,
    MAX_JSON_DEPTH,
    MAX_TASK_PENDING_SIGNALS,
    MAX_TASK_SIGNAL_BYTES,
    MAX_VALUE_BYTES,
    MAX_WRITTEN_ONCE_BYTES,
    TaskBudgetExceeded,
    check_value,
    value_bytes,
)
from .records import SignalSlot, TaskRecord


def check_signal_budget(record: TaskRecord, slot: str, size: int) -> None:
    """Refuse a value of ``size`` bytes for ``slot`` when the task's record already holds
    its budget of signal values (see :data:`MAX_TASK_SIGNAL_BYTES`,
    :data:`MAX_TASK_PENDING_SIGNALS`)."""
    held = [s for name, s in record.signals.items() if s.has_value and name != slot]
    pending = sum(1 for s in held if not s.consumed)
    if pending + 1 > MAX_TASK_PENDING_SIGNALS:
        raise TaskBudgetExceeded(
            f"a value for {slot!r}",
            f"would be signal value {pending + 1} waiting on task {record.id!r} unconsumed; "
            f"the limit is {MAX_TASK_PENDING_SIGNALS} (try again once the task has consumed "
            "some)",
            MAX_TASK_PENDING_SIGNALS,
        )
    total = size + sum(value_bytes(s.value, slot) for s in held)
    if total > MAX_TASK_SIGNAL_BYTES:
        raise TaskBudgetExceeded(
            f"a value for {slot!r}",
            f"would bring the signal values held on task {record.id!r} to {total} bytes; the "
            f"limit is {MAX_TASK_SIGNAL_BYTES} (a value leaves the record once a wake consumed it)",
            MAX_TASK_SIGNAL_BYTES,
        )


_MISSING: Any = object()


def _changed(before: Any, after: Any) -> bool:
    # Identity first: values carried over from the previous revision are the same objects,
    # so an unchanged record costs no comparison (and a legacy oversized value is left alone).
    return before is not after and before != after


def _check_record(record: TaskRecord, prior: TaskRecord | None) -> None:
    who = f"task {record.id!r}"
    if prior is None or _changed(prior.input, record.input):
        check_value(record.input, f"the input of {who}")
    before_memos = prior.memos if prior is not None else {}
    for name, value in record.memos.items():
        if _changed(before_memos.get(name, _MISSING), value):
            check_value(value, f"memo {name!r} of {who}")
    before_slots: Mapping[str, SignalSlot] = prior.signals if prior is not None else {}
    for name, slot in record.signals.items():
        old = before_slots.get(name)
        if slot.has_value and (old is None or _changed(old.value, slot.value)):
            check_value(
                slot.value,
                f"the value of {name!r} on {who}",
                depth=MAX_JSON_DEPTH + ENVELOPE_DEPTH,
                size=MAX_VALUE_BYTES + ENVELOPE_BYTES,
            )
    state, before = record.state, prior.state if prior is not None else None
    if state is before:
        return
    checkpoint = getattr(state, "checkpoint", None)
    if checkpoint is not None and _changed(getattr(before, "checkpoint", _MISSING), checkpoint):
        check_value(checkpoint, f"the checkpoint of {who}")
    outcome = getattr(state, "outcome", None)
    # A fault is the engine's own last word on a task (its message may quote a long exception):
    # refusing it would leave the task running forever, so it is never checked.
    if outcome is not None and outcome.status == "faulted":
        return
    if outcome is not None and _changed(getattr(before, "outcome", _MISSING), outcome):
        for part in ("result", "error"):
            if getattr(outcome, part, None) is not None:
                value = getattr(outcome, part)
                check_value(value, f"the {part} of {who}", size=MAX_WRITTEN_ONCE_BYTES)


def check_commit(
    live: Mapping[str, TaskRecord], writes: Iterable[TaskRecord], docs: Mapping[str, Any]
) -> None:
    """Refuse a commit that would store a value over the limits. Only what the commit changes
    against ``live`` (the view it was built on) is checked, so a record written before these
    limits existed can still move on. Raises :class:`ValueRefused`; the caller writes nothing.
    """
    for record in writes:
        _check_record(record, live.get(record.id))
    for key, body in docs.items():
        check_value(
            body,
            f"document {key!r}",
            depth=MAX_JSON_DEPTH + ENVELOPE_DEPTH,
            size=MAX_WRITTEN_ONCE_BYTES,
        )
