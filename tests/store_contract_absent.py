"""The Store contract's part on documents a commit requires absent (``absent`` of
:meth:`bide.engine.store.Store.commit`): mixed into :class:`store_contract.StoreContract`, so
every store runs it (SQLite, DynamoDB on moto and on DynamoDB Local)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from bide.engine.errors import CommitTooLarge, ConflictError, DocumentExists
from bide.engine.records import TaskRecord
from bide.engine.state import Pending
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc, Store


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def _task(task_id: str, session_id: str, phase: str = "a") -> TaskRecord:
    return TaskRecord(
        id=task_id,
        session_id=session_id,
        kind="k",
        version=1,
        state=Pending(checkpoint={"phase": phase}),
        created_at=0.0,
    )


def _observed(store: Store, sid: str) -> tuple[Any, ...]:
    return store.head(sid), store.load(sid), store.list_docs(sid, "")


class AbsentDocsContract:
    """A commit may require documents to be absent; when one exists, nothing is written and
    the error hands back its body."""

    def test_a_commit_requiring_absent_documents_lands_when_they_are(self, store: Store) -> None:
        s = _sid()
        seq = store.commit(s, 0, [_task("t", s)], [Doc("d/1", 1)], absent=["d/2", "x/3"])
        assert seq == 1 and store.get_doc(s, "d/1") == Doc("d/1", 1)
        assert store.get_doc(s, "d/2") is None  # checked, not written
        # A session never written, and one key listed twice: fine too.
        other = _sid()
        assert store.commit(other, 0, [_task("t", other)], absent=["d/9", "d/9"]) == 1

    def test_an_existing_document_refuses_the_commit_with_its_body(self, store: Store) -> None:
        s = _sid()
        body = {"slot": "sig/k", "consumed": True, "nested": [1, {"a": None}]}
        seq = store.commit(s, 0, [_task("t", s)], [Doc("bide.signal/t/sig/k", body)])
        before = _observed(store, s)
        with pytest.raises(DocumentExists) as refused:
            store.commit(
                s,
                seq,
                [_task("t", s, "b"), _task("u", s)],
                [Doc("d/new", 2)],
                absent=["d/fresh", "bide.signal/t/sig/k"],
            )
        assert refused.value.found == {"bide.signal/t/sig/k": body}
        assert refused.value.retryable is False
        assert _observed(store, s) == before  # nothing written: no seq, task or document
        # The same commit without the condition lands at the same seq.
        assert store.commit(s, seq, [_task("t", s, "b")], absent=["d/fresh"]) == seq + 1

    def test_every_existing_document_named_is_one_that_exists(self, store: Store) -> None:
        s = _sid()
        seq = store.commit(s, 0, [], [Doc("d/a", "A"), Doc("d/c", "C")])
        with pytest.raises(DocumentExists) as refused:
            store.commit(s, seq, [_task("t", s)], absent=["d/a", "d/b", "d/c"])
        found = refused.value.found
        assert found and set(found) <= {"d/a", "d/c"}
        assert all(found[k] == k[-1].upper() for k in found)
        assert store.head(s) == seq

    def test_a_stale_seq_is_a_conflict_whatever_the_documents(self, store: Store) -> None:
        s = _sid()
        seq = store.commit(s, 0, [_task("t", s)], [Doc("d/x", 1)])
        seq = store.commit(s, seq, [_task("t", s, "b")])
        with pytest.raises(ConflictError):
            store.commit(s, seq - 1, [_task("t", s, "c")], absent=["d/x"])
        with pytest.raises(ConflictError):
            store.commit(s, seq - 1, [_task("t", s, "c")], absent=["d/y"])
        assert store.head(s) == seq

    def test_a_key_both_written_and_required_absent_is_refused(self, store: Store) -> None:
        s = _sid()
        with pytest.raises(ValueError, match="both written and required absent"):
            store.commit(s, 0, [_task("t", s)], [Doc("d/1", 1)], absent=["d/1"])
        assert store.head(s) == 0 and store.get_doc(s, "d/1") is None

    def test_absent_keys_count_toward_the_item_limit(self, store: Store) -> None:
        s = _sid()
        tasks = [_task(f"t{i}", s) for i in range(40)]
        docs = [Doc(f"d/{i:03d}", i) for i in range(40)]
        absent = [f"a/{i:03d}" for i in range(MAX_COMMIT_ITEMS - 80 + 1)]
        with pytest.raises(CommitTooLarge):
            store.commit(s, 0, tasks, docs, absent=absent)
        assert store.head(s) == 0 and store.list_docs(s, "d/") == []
        assert store.commit(s, 0, tasks, docs, absent=absent[:-1]) == 1  # at the limit

    def test_a_key_too_long_to_be_a_document_is_absent(self, store: Store) -> None:
        s = _sid()
        assert store.commit(s, 0, [_task("t", s)], absent=["d/" + "x" * 1_100]) == 1
