"""The session event stream: what a host shows a person while a session works (a run ended,
an approval waits or was decided or closed, a promise settled, a workflow question was
asked, answered or closed, a run reported progress: :mod:`bide.engine.progress`).

Each event is the document ``event/<seq>`` (``seq`` zero-padded to :data:`SEQ_DIGITS`
digits, so key order is event order) in the session's own partition, written by
:func:`emit_in` **in the commit that does what it reports**: a crash never reports something
that did not happen, and never loses something that did. The document :data:`EVENT_HEAD_KEY`
holds the next number; commits of one session are serialised by the session's sequence
number, so numbers never repeat or skip.

Bounds: one event's body is at most :data:`MAX_EVENT_BYTES` as JSON; a larger field value is
replaced by :func:`summarised` (the reader fetches the full value from the page it belongs
to). An emitting commit adds the event documents and the head (one item, however many events) to
what it writes. Callers emit one event per operation: a run's end, an approval request or
decision, a promise's end (a commit ending several promises, such as a bound invocation found
undeliverable, adds one per promise, as it already writes one document per promise), so an
event at most doubles the items an operation adds and commits stay under the store's limit.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

EVENT_PREFIX = "event/"
EVENT_HEAD_KEY = "event-head"
SEQ_DIGITS = 12
#: One event's JSON, in bytes: far under a store item's limit and a page's byte bound.
MAX_EVENT_BYTES = 8 * 1024
#: A field value larger than this is summarised in the event (its size, not its content).
MAX_FIELD_BYTES = 2 * 1024

EVENT_TYPES = (
    "run_ended",
    "approval_requested",
    "approval_decided",
    "approval_closed",
    "promise_settled",
    "ask_opened",
    "ask_answered",
    "ask_closed",
    "progress",
)


class EventTx(Protocol):
    """What :func:`emit_in` needs of a commit (a task's ``tx`` or a host command's)."""

    def now(self) -> float: ...
    def get_doc(self, key: str) -> Any: ...
    def put_doc(self, key: str, body: Any) -> None: ...


def event_key(seq: int) -> str:
    """The document key of event number ``seq`` (1-based)."""
    return f"{EVENT_PREFIX}{seq:0{SEQ_DIGITS}d}"


def seq_of(key: str) -> int:
    """The number in an event document's key."""
    return int(key[len(EVENT_PREFIX) :])


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def summarised(value: Any) -> Any:
    """``value`` when it is small, else a stub naming its size (events stay bounded)."""
    size = _size(value)
    if size <= MAX_FIELD_BYTES:
        return value
    return {"omitted": True, "bytes": size}


def emit_in(tx: EventTx, type: str, fields: dict[str, Any]) -> int:
    """Append an event of ``type`` with ``fields`` in ``tx``'s commit; its number."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    head = tx.get_doc(EVENT_HEAD_KEY) or {"next": 1}
    seq = int(head["next"])
    body = {k: summarised(v) for k, v in fields.items()}
    event = {"seq": seq, "type": type, "at": tx.now(), **body}
    if _size(event) > MAX_EVENT_BYTES:
        event = {"seq": seq, "type": type, "at": tx.now(), "omitted": True}
    tx.put_doc(event_key(seq), event)
    tx.put_doc(EVENT_HEAD_KEY, {"next": seq + 1})
    return seq


class EventReader(Protocol):
    """A store's ranged read (:meth:`bide.engine.store.base.Store.list_docs`)."""

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> Any: ...


def read_events(
    store: EventReader, session_id: str, *, after: int = 0, limit: int = 100
) -> list[dict[str, Any]]:
    """Up to ``limit`` events numbered after ``after``, in order."""
    start = event_key(after) if after > 0 else None
    docs = store.list_docs(session_id, EVENT_PREFIX, start_after=start, limit=limit)
    return [dict(d.body) for d in docs]
