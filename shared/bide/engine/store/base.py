"""The Store port: what the engine needs from durable storage.

A session is one sequence of commits. Every commit is atomic and conditioned on the
session's sequence number: a writer whose view is stale gets :class:`ConflictError` and
nothing of its commit is written (never merged). Loading reads the session head and its
*live* tasks only, so the cost of a resume does not grow with the session's history;
ended tasks are read one at a time with :meth:`Store.get_task`.

Besides task records, a commit may write *documents*: JSON values under string keys
(conversation entries, submissions, webhook bindings). They are never loaded with the
snapshot; they are read by key or by key prefix, in key order.

A commit may also require documents to be *absent* (``absent``): a writer that would
otherwise read a key only to learn that nothing is there (a sleep on a fresh key, whose
consumed or expired slot would be a document) states the absence as a condition of its
commit instead. One request where a read and a commit take two; when a document is there after
all, nothing is written and :class:`~bide.engine.errors.DocumentExists` hands its body back.

A commit holds at most :data:`MAX_COMMIT_ITEMS` records, documents and absent keys together
(the DynamoDB store's transaction limit, enforced by every store so the engine cannot build a
commit that only the embedded store accepts).

**Ending a session.** A commit that writes the document :data:`SESSION_ENDED_KEY` (body
``{"at": <epoch seconds>}``) ends the session at that time: the one commit that records the
end. A store may keep an ended session only for a while (the DynamoDB store, with a retention
configured, lets DynamoDB's TTL delete it, see ``docs/deploy.md``); once expired, a session
reads as never written (seq 0, no tasks, no documents). Until then it stays readable and
writable like any other; the end is never undone.

Every store implementation must pass ``tests/store_contract.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..records import TaskRecord
from ..values import FrozenValue, value_class

_set = object.__setattr__  # a frozen value's fields, at build

MAX_COMMIT_ITEMS = 99  # records, documents and absent keys together, counted as passed in
#: Tasks :meth:`Store.tasks_at_head` reads at once (a ``TransactGetItems`` reads at most 100
#: items: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html).
MAX_AT_HEAD_TASKS = 99
MAX_DOC_KEY_BYTES = 1022  # UTF-8 bytes; longer keys are refused (DynamoDB's sort key limit)
#: The document whose commit ends the session (see the module). Its key predates the notion
#: (only workflows knew it), so sessions ended before keep their end.
SESSION_ENDED_KEY = "wf/session-ended"


def ended_at(body: Any) -> float | None:
    """The end time an ended-session document holds, or None when it holds none."""
    at = body.get("at") if isinstance(body, dict) else None
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None


def check_at_head(task_ids: Sequence[str], keys: Sequence[str] = ()) -> None:
    """Raise ValueError when :meth:`Store.tasks_at_head` is asked for too many tasks and
    documents."""
    if len(task_ids) + len(keys) > MAX_AT_HEAD_TASKS:
        raise ValueError(
            f"tasks_at_head reads at most {MAX_AT_HEAD_TASKS} tasks and documents at once, not "
            f"{len(task_ids)} tasks and {len(keys)} documents; nothing was read: load the "
            "session (or read the documents) instead"
        )


def check_absent(docs: Sequence[Doc], absent: Sequence[str]) -> None:
    """Raise ValueError when a key is both written (in ``docs``) and required absent: every
    store refuses that commit, since DynamoDB cannot check and write one item in one
    transaction."""
    both = {d.key for d in docs}.intersection(absent)
    if both:
        raise ValueError(
            f"documents {sorted(both)!r} are both written and required absent in one commit; "
            "nothing was written: check a key that the commit does not write"
        )


@value_class
class Doc(FrozenValue):
    """A document: a JSON value under a key (keys sort; use zero-padded numbers)."""

    __slots__ = ("body", "key")
    key: str
    body: Any

    def __init__(self, key: str, body: Any) -> None:
        _set(self, "key", key)
        _set(self, "body", body)


@value_class
class SessionSnapshot(FrozenValue):
    """A consistent view of a session: its sequence number and its live tasks by id."""

    __slots__ = ("seq", "session_id", "tasks")
    session_id: str
    seq: int
    tasks: dict[str, TaskRecord]

    def __init__(
        self, session_id: str, seq: int, tasks: dict[str, TaskRecord] | None = None
    ) -> None:
        _set(self, "session_id", session_id)
        _set(self, "seq", seq)
        _set(self, "tasks", {} if tasks is None else tasks)  # a fresh dict each, as before


class Store(Protocol):
    """Durable storage for sessions' task records."""

    def load(self, session_id: str) -> SessionSnapshot:
        """The session's head and live tasks. A session never written has seq 0 and no tasks."""
        ...

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """One task, live or ended, or None when the session has no such task."""
        ...

    def head(self, session_id: str) -> int:
        """The session's current sequence number (0 when never written)."""
        ...

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        """The session's sequence number and one task (live or ended, or None) as they
        stood together at that sequence number: one consistent read, for a writer that
        decides on that task alone and commits conditioned on that sequence number."""
        ...

    def task_and_doc_at_head(
        self, session_id: str, task_id: str, key: str
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        """:meth:`task_at_head` and one document (or None) of the same session, all three as
        they stood together at that sequence number: one consistent read, for a writer that
        also decides on that document (whether the caller owns the session) before it
        commits."""
        ...

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        """:meth:`task_at_head` for several tasks and documents: the sequence number, those of
        ``task_ids`` the session has (live or ended), by id, and the documents under ``keys``
        found, by key, all as they stood together at that sequence number (one consistent
        read). For a run that works on these tasks alone (the worker's targeted pass, which
        reads the focus task's sealed memo pages with it). Tasks and keys together: at most
        :data:`MAX_AT_HEAD_TASKS` (ValueError, nothing read). A store whose one read cannot
        hold the documents (DynamoDB refuses a ``TransactGetItems`` over 4 MB) may return
        them absent, never a document from another sequence number: the caller reads an
        absent one otherwise."""
        ...

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """Write every record in ``writes`` (insert or replace by id) and every document in
        ``docs`` (insert or replace by key), and advance the sequence from ``expected_seq`` to
        ``expected_seq + 1``, all or nothing, provided no document exists under any key in
        ``absent`` (checked atomically with the sequence).

        Raises :class:`~bide.engine.errors.ConflictError` when the stored sequence is not
        ``expected_seq`` (whatever the documents), then
        :class:`~bide.engine.errors.DocumentExists` when a key of ``absent`` has a document
        (naming at least one such key with its body), and
        :class:`~bide.engine.errors.CommitTooLarge` for more than :data:`MAX_COMMIT_ITEMS`
        items (``writes``, ``docs`` and ``absent`` together). Raises ValueError for a key both
        in ``docs`` and in ``absent`` (DynamoDB cannot check and write one item in one
        transaction). Nothing is written when it raises. Returns the new sequence number.
        """
        ...

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """One document, or None."""
        ...

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[Doc]:
        """Documents whose key starts with ``prefix``, in key order, after ``start_after``;
        at most ``limit`` of them (0 gives none; negative raises ValueError). Each document is
        read consistently; a listing that spans pages may see a commit land between pages."""
        ...

    def close(self) -> None:
        """Release connections. The store may not be used afterwards."""
        ...
