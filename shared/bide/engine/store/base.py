"""The Store port: what the engine needs from durable storage.

A session is one sequence of commits. Every commit is atomic and conditioned on the
session's sequence number: a writer whose view is stale gets :class:`ConflictError` and
nothing of its commit is written (never merged). Loading reads the session head and its
*live* tasks only, so the cost of a resume does not grow with the session's history;
ended tasks are read one at a time with :meth:`Store.get_task`.

Besides task records, a commit may write *documents*: JSON values under string keys
(conversation entries, submissions, webhook bindings). They are never loaded with the
snapshot; they are read by key or by key prefix, in key order.

A commit holds at most :data:`MAX_COMMIT_ITEMS` records and documents together (the
DynamoDB store's transaction limit, enforced by every store so the engine cannot build a
commit that only the embedded store accepts).

Every store implementation must pass ``tests/store_contract.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..records import TaskRecord

MAX_COMMIT_ITEMS = 99  # records and documents together, counted as passed in
MAX_DOC_KEY_BYTES = 1022  # UTF-8 bytes; longer keys are refused (DynamoDB's sort key limit)


@dataclass(frozen=True)
class Doc:
    """A document: a JSON value under a key (keys sort; use zero-padded numbers)."""

    key: str
    body: Any


@dataclass(frozen=True)
class SessionSnapshot:
    """A consistent view of a session: its sequence number and its live tasks by id."""

    session_id: str
    seq: int
    tasks: dict[str, TaskRecord] = field(default_factory=dict)


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

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
    ) -> int:
        """Write every record in ``writes`` (insert or replace by id) and every document in
        ``docs`` (insert or replace by key), and advance the sequence from ``expected_seq`` to
        ``expected_seq + 1``, all or nothing.

        Raises :class:`~bide.engine.errors.ConflictError` when the stored sequence is not
        ``expected_seq``, and :class:`~bide.engine.errors.CommitTooLarge` for more than
        :data:`MAX_COMMIT_ITEMS` items. Returns the new sequence number.
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
