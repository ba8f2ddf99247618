"""Where a key's slot lives once it is final: a document of its own, not the task record.

A slot is *final* once it can never change again: consumed (its value woke the task) or
expired (a deadline passed before any value). Design 001 keeps both: a second sleep on the
key is refused, a later value gets ``duplicate`` or ``closed``, and ``read_signal`` still
returns the value until the task ends. Kept on the record, they made a task that waited
N times carry N slots, rewritten by every commit of the task and read by every resume.

So the reservation that makes a slot final (or a later one, when a commit has no room left)
moves it off the record into the document ``bide.signal/<task>/<signal>/<key>``, in the same
commit. The record keeps only open slots: values not consumed yet (bounded by
:data:`~bide.engine.limits.MAX_TASK_PENDING_SIGNALS`) and the keys a wake is about to settle.
Whoever needs a key that is not on the record reads that one document (a point read): a
sleep listing the key, a delivery to it, ``read_signal``. A delivery to a key the task sleeps
on needs no read: the sleep was checked against the documents when it was committed, and only
that sleep's own wake can make its keys final.

The document's body holds the value (and a failure delivered instead, ``failure_json``) as
JSON text, so the document is exactly as deep as the
slot's own fields (a value at the depth limit fits, as it did on the record).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .records import SignalSlot, TaskRecord
from .store.base import MAX_DOC_KEY_BYTES, Doc

SlotLookup = Callable[[str], SignalSlot | None]
"""A task's final slot by slot name (``<signal>/<key>``), read from its document; None when
the key has none."""

PREFIX = "bide.signal/"
"""Every moved slot's document key starts with this, then ``<task id>/``."""

MOVE_BUDGET = 16
"""At most this many slots move in one reservation (a sleep listing many keys that expire);
the rest stay on the record, equally final, and move with a later wake."""


def nothing_moved(_slot: str) -> SignalSlot | None:
    """The lookup for a task that has no moved slot (a record built in a test)."""
    return None


def task_prefix(task_id: str) -> str:
    """The prefix of every moved slot of ``task_id``."""
    return f"{PREFIX}{task_id}/"


def doc_key(task_id: str, slot: str) -> str:
    """The document of ``task_id``'s slot ``slot``. A key too long for a document key is
    replaced by its SHA-256 (the body names the slot, so nothing is ambiguous)."""
    key = task_prefix(task_id) + slot
    if len(key.encode()) <= MAX_DOC_KEY_BYTES:
        return key
    return task_prefix(task_id) + "#" + hashlib.sha256(slot.encode()).hexdigest()


def is_final(slot: SignalSlot) -> bool:
    """Consumed or expired: nothing can change the slot any more."""
    return slot.consumed or slot.expired


def split_final(
    signals: Mapping[str, SignalSlot], room: int
) -> tuple[dict[str, SignalSlot], dict[str, SignalSlot]]:
    """``(kept, moved)``: at most ``room`` final slots to move, and everything else."""
    kept: dict[str, SignalSlot] = {}
    moved: dict[str, SignalSlot] = {}
    for name, slot in signals.items():
        if is_final(slot) and len(moved) < room:
            moved[name] = slot
        else:
            kept[name] = slot
    return kept, moved


def to_body(slot_name: str, slot: SignalSlot) -> dict[str, Any]:
    """The document body of a final slot."""
    value = json.dumps(slot.value, separators=(",", ":")) if slot.has_value else None
    body = {
        "slot": slot_name,
        "version": slot.version,
        "value_json": value,
        "consumed": slot.consumed,
        "expired": slot.expired,
    }
    if slot.failure is not None:  # only then: bodies written before failures stay the same
        body["failure_json"] = json.dumps(slot.failure, separators=(",", ":"))
    return body


def from_body(body: Any) -> SignalSlot | None:
    """The slot a document body holds (None for no document)."""
    if body is None:
        return None
    text = body["value_json"]
    failure = body.get("failure_json")
    return SignalSlot(
        version=body["version"],
        value=None if text is None else json.loads(text),
        has_value=text is not None,
        consumed=body["consumed"],
        expired=body["expired"],
        failure=None if failure is None else json.loads(failure),
    )


def lookup(get_doc: Callable[[str], Any], task_id: str) -> SlotLookup:
    """A :data:`SlotLookup` for ``task_id`` reading documents with ``get_doc(key)`` (a body or
    None)."""

    def find(slot: str) -> SignalSlot | None:
        return from_body(get_doc(doc_key(task_id, slot)))

    return find


def task_slots(record: TaskRecord, docs: Iterable[Doc]) -> dict[str, SignalSlot]:
    """Every slot of ``record``'s task by name: the open ones on the record and the moved
    ones in ``docs`` (the documents under :func:`task_prefix` of the task, e.g.
    ``harness.list_docs(task_prefix(task_id))``). For inspection and tests; the engine itself
    reads one key at a time."""
    found: dict[str, SignalSlot] = {}
    for doc in docs:
        slot = from_body(doc.body)
        if slot is not None:
            found[doc.body["slot"]] = slot
    return {**found, **record.signals}
