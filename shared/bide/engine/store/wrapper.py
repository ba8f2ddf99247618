"""A base for stores that wrap another store (to count, log or inject faults).

:class:`StoreWrapper` passes every method of the :class:`~bide.engine.store.base.Store`
protocol through to the wrapped store unchanged, so a wrapper overrides only the methods whose
behaviour it changes and cannot silently miss one when the protocol grows.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records import TaskRecord
from .base import Doc, SessionSnapshot, Store


class StoreWrapper:
    """A :class:`~bide.engine.store.base.Store` that passes every call through to
    :attr:`inner`. Subclass it and override only what the wrapper changes."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def load(self, session_id: str) -> SessionSnapshot:
        """See :meth:`bide.engine.store.Store.load`."""
        return self.inner.load(session_id)

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """See :meth:`bide.engine.store.Store.get_task`."""
        return self.inner.get_task(session_id, task_id)

    def head(self, session_id: str) -> int:
        """See :meth:`bide.engine.store.Store.head`."""
        return self.inner.head(session_id)

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        """See :meth:`bide.engine.store.Store.task_at_head`."""
        return self.inner.task_at_head(session_id, task_id)

    def task_and_doc_at_head(
        self, session_id: str, task_id: str, key: str
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        """See :meth:`bide.engine.store.Store.task_and_doc_at_head`."""
        return self.inner.task_and_doc_at_head(session_id, task_id, key)

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        """See :meth:`bide.engine.store.Store.tasks_at_head`."""
        return self.inner.tasks_at_head(session_id, task_ids, keys)

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """See :meth:`bide.engine.store.Store.commit`."""
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """See :meth:`bide.engine.store.Store.get_doc`."""
        return self.inner.get_doc(session_id, key)

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[Doc]:
        """See :meth:`bide.engine.store.Store.list_docs`."""
        return self.inner.list_docs(session_id, prefix, start_after=start_after, limit=limit)

    def close(self) -> None:
        """See :meth:`bide.engine.store.Store.close`."""
        self.inner.close()
