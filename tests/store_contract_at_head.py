"""The Store contract's part on reading a task and a document with the head
(:meth:`bide.engine.store.Store.task_and_doc_at_head`: what the IAM signal routes read, the
session's owner document with the head and the task), and several tasks with the head
(:meth:`~bide.engine.store.Store.tasks_at_head`: a targeted worker pass), with documents too
(:meth:`~bide.engine.store.Store.tasks_at_head`: its task's sealed pages): mixed into
:class:`store_contract.StoreContract`, so every store runs it (SQLite, DynamoDB on moto and
on DynamoDB Local)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from bide.engine.records import TaskRecord
from bide.engine.state import Completed, Pending, Terminal
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


def run_together(*targets: Callable[[], None]) -> None:
    """Run ``targets`` in threads at once; fail with what any raised, or if one hangs."""
    failed: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # reported below
            failed.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failed and not any(t.is_alive() for t in threads), failed


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

        def writer() -> None:
            for n in range(1, commits + 1):
                store.commit(sid, n, [_task("a", sid, n)], [Doc("d", n)])

        def reader() -> None:
            for _ in range(3 * commits):
                seq, record, doc = other_store.task_and_doc_at_head(sid, "a", "d")
                assert record is not None and doc is not None
                seen.append((seq, record.memos["n"], doc.body))

        run_together(writer, reader)
        assert seen and all(n == body == seq - 1 for seq, n, body in seen), seen

    def test_tasks_at_head_reads_the_seq_and_several_tasks_together(self, store: Store) -> None:
        # What a targeted worker pass reads (bide.engine.partial): the head, the task and its
        # owner in one read; a task the session does not have is left out.
        sid = _sid()
        assert store.tasks_at_head(sid, ["a", "b"]) == (0, {}, {})
        a, b = _task("a", sid), _task("b", sid, 1)
        store.commit(sid, 0, [a, b])
        store.commit(sid, 1, [], [Doc("other", 1)])
        assert store.tasks_at_head(sid, ["a", "b"]) == (2, {"a": a, "b": b}, {})
        assert store.tasks_at_head(sid, ["b", "missing"]) == (2, {"b": b}, {})
        assert store.tasks_at_head(sid, ["a", "a"]) == (2, {"a": a}, {})  # an id twice: read once
        assert store.tasks_at_head(sid, []) == (2, {}, {})
        ended = a.replace(state=Terminal(outcome=Completed(result=None)), rev=a.rev + 1)
        store.commit(sid, 2, [ended])
        assert store.tasks_at_head(sid, ["a"]) == (3, {"a": ended}, {})  # live or ended
        with pytest.raises(ValueError, match="at most 99 tasks"):
            store.tasks_at_head(sid, [f"t{n}" for n in range(100)])

    def test_tasks_at_head_never_mixes_two_commits(self, store: Store, other_store: Store) -> None:
        # Commit n writes both tasks with n: a read at seq s sees s - 1 in both.
        sid = _sid()
        store.commit(sid, 0, [_task("a", sid, 0), _task("b", sid, 0)])
        commits = 12
        seen: list[tuple[int, int, int]] = []

        def writer() -> None:
            for n in range(1, commits + 1):
                store.commit(sid, n, [_task("a", sid, n), _task("b", sid, n)])

        def reader() -> None:
            for _ in range(3 * commits):
                seq, found, _ = other_store.tasks_at_head(sid, ["a", "b"])
                seen.append((seq, found["a"].memos["n"], found["b"].memos["n"]))

        run_together(writer, reader)
        assert seen and all(a == b == seq - 1 for seq, a, b in seen), seen

    def test_tasks_at_head_reads_tasks_and_documents_together(self, store: Store) -> None:
        # A targeted worker pass reads its task's sealed memo pages with the head and the task
        # (bide.engine.partial): documents found by key, one missing left out.
        sid = _sid()
        assert store.tasks_at_head(sid, ["a"], ["p/0"]) == (0, {}, {})
        a = _task("a", sid)
        store.commit(sid, 0, [a], [Doc("p/0", {"memos": {"x": 1}}), Doc("p/1", [2, "y"])])
        assert store.tasks_at_head(sid, ["a", "b"], ["p/0", "p/1", "p/2"]) == (
            1,
            {"a": a},
            {"p/0": Doc("p/0", {"memos": {"x": 1}}), "p/1": Doc("p/1", [2, "y"])},
        )
        assert store.tasks_at_head(sid, ["a"], ["p/1", "p/1"]) == (
            1,
            {"a": a},
            {"p/1": Doc("p/1", [2, "y"])},  # a key twice: read once
        )
        assert store.tasks_at_head(sid, ["a"], []) == (1, {"a": a}, {})
        assert store.tasks_at_head(sid, [], ["p/0", "k" * 2000])[2] == {
            "p/0": Doc("p/0", {"memos": {"x": 1}})  # a key too long for any store: absent
        }
        # The head and tasks part is the answer without documents.
        assert store.tasks_at_head(sid, ["a"], ["p/0"])[:2] == store.tasks_at_head(sid, ["a"])[:2]
        # Tasks and documents together: at most 99 (one TransactGetItems holds 100 items).
        with pytest.raises(ValueError, match="at most 99 tasks and documents"):
            store.tasks_at_head(sid, ["a"], [f"p/{n}" for n in range(99)])
        store.tasks_at_head(sid, ["a"], [f"p/{n}" for n in range(98)])

    def test_tasks_at_head_never_mixes_two_commits_with_documents(
        self, store: Store, other_store: Store
    ) -> None:
        # Commit n writes the task and the document with n: a read at seq s sees s - 1 in both.
        sid = _sid()
        store.commit(sid, 0, [_task("a", sid, 0)], [Doc("d", 0)])
        commits = 12
        seen: list[tuple[int, int, Any]] = []

        def writer() -> None:
            for n in range(1, commits + 1):
                store.commit(sid, n, [_task("a", sid, n)], [Doc("d", n)])

        def reader() -> None:
            for _ in range(3 * commits):
                seq, found, docs = other_store.tasks_at_head(sid, ["a"], ["d"])
                seen.append((seq, found["a"].memos["n"], docs["d"].body))

        run_together(writer, reader)
        assert seen and all(a == body == seq - 1 for seq, a, body in seen), seen
