"""The Store contract's part on reading a task and a document with the head
(:meth:`bide.engine.store.Store.task_and_doc_at_head`: what the IAM signal routes read, the
session's owner document with the head and the task): mixed into
:class:`store_contract.StoreContract`, so every store runs it (SQLite, DynamoDB on moto and
on DynamoDB Local)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from bide.engine.records import TaskRecord
from bide.engine.state import Pending
from bide.engine.store.base import Doc, Store


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def _task(task_id: str, session_id: str, n: int = 0) -> TaskRecord:
    return TaskRecord(
        id=task_id,
        session_id=session_id,
        kind="k",
        version=1,
        state=Pending(checkpoint={"phase": "a"}),
        created_at=0.0,
        memos={"n": n},
    )


class AtHeadContract:
    """The sequence number, one task and one document, as they stood together."""

    def test_task_and_doc_at_head_reads_all_three_together(self, store: Store) -> None:
        sid = _sid()
        assert store.task_and_doc_at_head(sid, "a", "owner") == (0, None, None)
        a = _task("a", sid)
        store.commit(sid, 0, [a], [Doc("owner", {"principal": "p"})])
        store.commit(sid, 1, [], [Doc("other", 1)])
        assert store.task_and_doc_at_head(sid, "a", "owner") == (
            2,
            a,
            Doc("owner", {"principal": "p"}),
        )
        assert store.task_and_doc_at_head(sid, "missing", "owner") == (
            2,
            None,
            Doc("owner", {"principal": "p"}),
        )
        assert store.task_and_doc_at_head(sid, "a", "missing") == (2, a, None)
        # A key no document can have (over the key limit) reads as absent, as get_doc's does.
        assert store.task_and_doc_at_head(sid, "a", "k" * 2000) == (2, a, None)
        # The head and task part is task_at_head's answer.
        assert store.task_and_doc_at_head(sid, "a", "owner")[:2] == store.task_at_head(sid, "a")

    def test_task_and_doc_at_head_never_mixes_two_commits(
        self, store: Store, other_store: Store
    ) -> None:
        # Commit n (seq n -> n + 1) writes the task and the document with n: whatever the
        # interleaving, a read at seq s must see s - 1 in both.
        sid = _sid()
        store.commit(sid, 0, [_task("a", sid, 0)], [Doc("d", 0)])
        commits = 12
        seen: list[tuple[int, Any, Any]] = []
        failed: list[BaseException] = []

        def writer() -> None:
            for n in range(1, commits + 1):
                store.commit(sid, n, [_task("a", sid, n)], [Doc("d", n)])

        def reader() -> None:
            for _ in range(3 * commits):
                seq, record, doc = other_store.task_and_doc_at_head(sid, "a", "d")
                assert record is not None and doc is not None
                seen.append((seq, record.memos["n"], doc.body))

        def guarded(target: Any) -> None:
            try:
                target()
            except BaseException as exc:  # reported below
                failed.append(exc)

        threads = [threading.Thread(target=guarded, args=(t,)) for t in (writer, reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failed and not any(t.is_alive() for t in threads), failed
        assert seen and all(n == body == seq - 1 for seq, n, body in seen), seen
