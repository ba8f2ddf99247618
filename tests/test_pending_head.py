"""A commit of one small record onto the session head (:mod:`bide.aws.pending`): ONE conditional
``UpdateItem`` of the head instead of a transaction of the head and the task item; every read
sees the pending record; every later commit keeps it exact (folds it, or leaves it alone and
checks that); beliefs of what is pending are guesses that a refusal corrects. Run on moto and
on DynamoDB Local (``aws_bench``).

AWS semantics relied on, each modelled by both emulators: a failed condition of ``UpdateItem``
with ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` returns the item as it stands with the
``ConditionalCheckFailedException``
(https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html; the store
reads the head once where an emulator returns none); a Query is read-committed with respect
to transactions
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html,
"Isolation levels"), so the torn answers faked here are what it may return mid-commit.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from aws_fixtures import (
    AwsBench,
    FaultyClient,
    aws_bench,
    client_error,
    edit_result,
    fail_after,
    unique,
)
from botocore.exceptions import ReadTimeoutError
from dynamodb_checks import head_item, live_items, raw_item, record

from bide.aws import digest, pending
from bide.aws.dynamodb import DynamoDBStore
from bide.aws.retention import EXPIRES_AT
from bide.engine.errors import ConflictError
from bide.engine.records import TaskRecord
from bide.engine.store.base import SESSION_ENDED_KEY, Doc

__all__ = ["aws_bench"]  # a fixture, imported for pytest to find

ENDED = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86_400.0


@pytest.fixture
def bench(aws_bench: AwsBench) -> AwsBench:
    aws_bench.sleeps.clear()
    return aws_bench


def task_item(bench: AwsBench, sid: str, task_id: str) -> dict[str, Any]:
    item = raw_item(bench, sid, "T#" + task_id)
    assert item is not None
    return item


def ops(faulty: FaultyClient) -> list[str]:
    return [op for op, _ in faulty.calls]


def assert_digest_matches_items(bench: AwsBench, sid: str) -> None:
    live = live_items(bench, sid)
    assert digest.head_digest(head_item(bench, sid)) == digest.digest_of(live)


def pending_on_head(bench: AwsBench, sid: str) -> tuple[str, TaskRecord] | None:
    head = head_item(bench, sid)
    if pending.PENDING_TASK not in head:
        assert pending.PENDING_RECORD not in head and pending.PENDING_TOKEN not in head
        return None
    body = head[pending.PENDING_RECORD]["S"]
    return head[pending.PENDING_TASK]["S"], TaskRecord.from_json(body)


def started(bench: AwsBench, store: DynamoDBStore | None = None) -> tuple[str, DynamoDBStore]:
    """A session at seq 1 with live tasks a and b, written by ``store`` (which so knows them)."""
    sid = unique("s")
    store = store or bench.store()
    assert store.commit(sid, 0, [record("a", sid), record("b", sid)]) == 1
    return sid, store


def assert_reads(store: DynamoDBStore, sid: str, task_id: str, want: TaskRecord) -> None:
    """Every read of the store returns ``want`` for ``task_id``."""
    assert store.load(sid).tasks[task_id] == want
    assert store.get_task(sid, task_id) == want
    assert store.task_at_head(sid, task_id)[1] == want
    assert store.task_and_doc_at_head(sid, task_id, "d/none")[1] == want
    assert store.tasks_at_head(sid, ["b", task_id, "a"])[1][task_id] == want


class TestOntoTheHead:
    def test_one_record_is_one_update_item_of_the_head_alone(self, bench: AwsBench) -> None:
        sid, _ = started(bench)
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        store.load(sid)  # knows a live
        faulty.calls.clear()
        before = task_item(bench, sid, "a")
        a2 = record("a", sid, memos={"n": 2})
        assert store.commit(sid, 1, [a2]) == 2
        assert ops(faulty) == ["update_item"]  # one request, no transaction
        assert task_item(bench, sid, "a") == before  # the task item is not written
        assert pending_on_head(bench, sid) == ("a", a2)
        head = head_item(bench, sid)
        assert head["seq"] == {"N": "2"}
        assert_digest_matches_items(bench, sid)  # the digest is the items', unchanged
        # Small: one write unit (1 KB) with the record on it.
        assert len(str(head)) < 1024

    def test_every_read_of_every_store_returns_the_pending_record(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        assert_reads(store, sid, "a", a2)
        assert_reads(bench.store(), sid, "a", a2)  # a store that never saw it
        assert set(bench.store().load(sid).tasks) == {"a", "b"}
        # tasks_at_head without the pending task: its own items only.
        seq, found, _ = bench.store().tasks_at_head(sid, ["b"])
        assert seq == 2 and set(found) == {"b"}

    def test_the_next_commit_writing_the_task_folds_it(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        a3 = record("a", sid, memos={"n": 3})
        faulty = FaultyClient(bench.ddb)
        writer = bench.store(faulty)
        writer.load(sid)
        # With a document: a transaction, which must fold the pending record.
        assert writer.commit(sid, 2, [a3], [Doc("d/x", 1)]) == 3
        assert "transact_write_items" in ops(faulty) and "update_item" not in ops(faulty)
        assert pending_on_head(bench, sid) is None
        item = task_item(bench, sid, "a")
        assert item["wseq"] == {"N": "3"} and TaskRecord.from_json(item["body"]["S"]) == a3
        assert_digest_matches_items(bench, sid)
        assert_reads(bench.store(), sid, "a", a3)

    def test_an_ending_record_of_the_pending_task_folds_it(self, bench: AwsBench) -> None:
        faulty = FaultyClient(bench.ddb)
        sid, store = started(bench, bench.store(faulty))
        store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        faulty.calls.clear()
        done = record("a", sid, ended=True)
        assert store.commit(sid, 2, [done]) == 3  # not live: a transaction
        # One: the store still knows a's item at its old wseq (the pending commit did not
        # write it), so the task Put's guess holds the first time.
        assert ops(faulty) == ["transact_write_items"]
        assert pending_on_head(bench, sid) is None
        assert set(bench.store().load(sid).tasks) == {"b"}
        assert bench.store().get_task(sid, "a") == done
        assert_digest_matches_items(bench, sid)

    def test_a_second_signal_to_the_same_task_overwrites_it(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        a3 = record("a", sid, memos={"n": 3})
        faulty = FaultyClient(bench.ddb)
        other = bench.store(faulty)
        other.load(sid)
        faulty.calls.clear()
        assert other.commit(sid, 2, [a3]) == 3
        assert ops(faulty) == ["update_item"]
        assert pending_on_head(bench, sid) == ("a", a3)
        assert task_item(bench, sid, "a")["wseq"] == {"N": "1"}
        assert_reads(bench.store(), sid, "a", a3)

    def test_another_tasks_commit_takes_the_transaction_and_leaves_it(
        self, bench: AwsBench
    ) -> None:
        sid, store = started(bench)
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        b2 = record("b", sid, memos={"n": 2})
        faulty = FaultyClient(bench.ddb)
        knowing = bench.store(faulty)
        knowing.load(sid)  # sees a pending
        faulty.calls.clear()
        assert knowing.commit(sid, 2, [b2]) == 3
        assert ops(faulty) == ["transact_write_items"]  # straight to the transaction
        assert pending_on_head(bench, sid) == ("a", a2)  # a stays pending
        assert task_item(bench, sid, "b")["wseq"] == {"N": "3"}
        assert_reads(bench.store(), sid, "a", a2)
        assert bench.store().load(sid).tasks["b"] == b2
        assert_digest_matches_items(bench, sid)

    def test_a_store_that_believes_nothing_pending_learns_another_task_is(
        self, bench: AwsBench
    ) -> None:
        sid, store = started(bench)
        a2 = record("a", sid, memos={"n": 2})
        faulty = FaultyClient(bench.ddb)
        stale = bench.store(faulty)
        stale.load(sid)  # at seq 1: nothing pending
        store.commit(sid, 1, [a2])
        assert stale.head(sid) == 2  # told the seq, not what is pending
        faulty.calls.clear()
        b2 = record("b", sid, memos={"n": 2})
        assert stale.commit(sid, 2, [b2]) == 3
        # Refused at the expected seq (a is pending), learned from the head, a transaction.
        assert [op for op in ops(faulty) if op != "get_item"] == [
            "update_item",
            "transact_write_items",
        ]
        assert pending_on_head(bench, sid) == ("a", a2)
        assert_reads(bench.store(), sid, "a", a2)
        assert bench.store().get_task(sid, "b") == b2

    def test_a_stale_writer_of_the_pending_task_learns_and_folds(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        faulty = FaultyClient(bench.ddb)
        stale = bench.store(faulty)
        stale.load(sid)  # at seq 1: nothing pending
        store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        assert stale.head(sid) == 2
        faulty.calls.clear()
        a3 = record("a", sid, memos={"n": 3})
        # A transaction (a document) believing a not pending: its guard "pt is not a" fails
        # at the expected seq; it learns a is, and folds. Without the guard the old pending
        # record would shadow a3 on every read: a lost write.
        assert stale.commit(sid, 2, [a3], [Doc("d/x", 1)]) == 3
        assert ops(faulty).count("transact_write_items") == 2
        assert pending_on_head(bench, sid) is None
        assert_reads(bench.store(), sid, "a", a3)
        assert_digest_matches_items(bench, sid)

    def test_a_writer_that_believes_a_folded_record_pending_learns_it_is_not(
        self, bench: AwsBench
    ) -> None:
        sid, store = started(bench)
        store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        stale = bench.store()
        stale.load(sid)  # at seq 2: a pending
        store.commit(sid, 2, [record("a", sid, memos={"n": 3})], [Doc("d/x", 1)])  # folds
        assert stale.head(sid) == 3
        a4 = record("a", sid, memos={"n": 4})
        # Its guard "pt = a" fails at the expected seq; it learns nothing is, and writes a4.
        assert stale.commit(sid, 3, [a4], [Doc("d/y", 1)]) == 4
        assert pending_on_head(bench, sid) is None
        assert_reads(bench.store(), sid, "a", a4)

    def test_a_lost_answer_is_applied_once_and_no_conflict(self, bench: AwsBench) -> None:
        sid, _ = started(bench)
        faulty = FaultyClient(
            bench.ddb,
            plan={"update_item": [fail_after(ReadTimeoutError(endpoint_url="http://127.0.0.1"))]},
        )
        store = bench.store(faulty)
        store.load(sid)
        a2 = record("a", sid, memos={"n": 2})
        assert store.commit(sid, 1, [a2]) == 2  # the resend fails its condition: its own write
        assert ops(faulty).count("update_item") == 2
        assert head_item(bench, sid)["seq"] == {"N": "2"}  # applied once
        assert pending_on_head(bench, sid) == ("a", a2)
        # The store goes on from there.
        assert store.commit(sid, 2, [record("a", sid, memos={"n": 3})]) == 3

    def test_a_lost_answer_then_another_tasks_commit_is_still_applied_once(
        self, bench: AwsBench
    ) -> None:
        # The first attempt applies and its answer is lost; before the resend a rival commits
        # task b (a transaction that leaves a's record pending). The head's seq and txn are the
        # rival's now, but a's record still carries this commit's token: applied, no conflict.
        sid, _ = started(bench)
        rival = bench.store(bench.other_ddb)
        rival.load(sid)

        def apply_lose_then_rival(call: Any) -> Any:
            call()
            rival.load(sid)
            rival.commit(sid, 2, [record("b", sid, memos={"n": 2})], [Doc("d/r", 1)])
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1")

        faulty = FaultyClient(bench.ddb, plan={"update_item": [apply_lose_then_rival]})
        store = bench.store(faulty)
        store.load(sid)
        a2 = record("a", sid, memos={"n": 2})
        assert store.commit(sid, 1, [a2]) == 2
        assert ops(faulty).count("update_item") == 2
        assert head_item(bench, sid)["seq"] == {"N": "3"}  # a's commit, then the rival's
        assert pending_on_head(bench, sid) == ("a", a2)
        assert_reads(bench.store(), sid, "a", a2)

    def test_a_concurrent_commit_is_a_conflict_with_the_actual_seq(self, bench: AwsBench) -> None:
        sid, _ = started(bench)
        first, second = bench.store(), bench.store(bench.other_ddb)
        first.load(sid)
        second.load(sid)
        assert first.commit(sid, 1, [record("a", sid, memos={"n": 2})]) == 2
        with pytest.raises(ConflictError) as caught:
            second.commit(sid, 1, [record("a", sid, memos={"n": 9})])
        assert caught.value.actual_seq == 2
        assert pending_on_head(bench, sid)[1].memos == {"n": 2}  # type: ignore[index]

    def test_a_conflict_after_a_transient_error_is_still_a_conflict(self, bench: AwsBench) -> None:
        # The first attempt is throttled (not applied); a rival commits before the resend,
        # whose refusal carries the rival's token: a conflict, not this commit's success.
        sid, _ = started(bench)
        rival = bench.store(bench.other_ddb)
        rival.load(sid)

        def throttle_then_rival(call: Any) -> Any:
            rival.commit(sid, 1, [record("b", sid, memos={"n": 2})])
            raise client_error("ThrottlingException", "UpdateItem")

        faulty = FaultyClient(bench.ddb, plan={"update_item": [throttle_then_rival]})
        store = bench.store(faulty)
        store.load(sid)
        with pytest.raises(ConflictError) as caught:
            store.commit(sid, 1, [record("a", sid, memos={"n": 2})])
        assert caught.value.actual_seq == 2
        assert pending_on_head(bench, sid)[0] == "b"  # type: ignore[index]

    def test_a_record_too_large_for_the_head_takes_the_transaction(self, bench: AwsBench) -> None:
        sid, _ = started(bench)
        big = record("a", sid, size=pending.PENDING_RECORD_LIMIT)
        assert len(big.to_json().encode()) > pending.PENDING_RECORD_LIMIT
        faulty = FaultyClient(bench.ddb)
        writer = bench.store(faulty)
        writer.load(sid)
        faulty.calls.clear()
        assert writer.commit(sid, 1, [big]) == 2
        assert ops(faulty) == ["transact_write_items"]
        assert pending_on_head(bench, sid) is None
        assert task_item(bench, sid, "a")["wseq"] == {"N": "2"}

    @pytest.mark.parametrize("over", [0, 1])
    def test_the_record_limit_is_exact(self, bench: AwsBench, over: int) -> None:
        sid, store = started(bench)
        base = len(record("a", sid, size=1).to_json().encode()) - 1
        sized = record("a", sid, size=pending.PENDING_RECORD_LIMIT - base + over)
        assert len(sized.to_json().encode()) == pending.PENDING_RECORD_LIMIT + over
        store.commit(sid, 1, [sized])
        assert (pending_on_head(bench, sid) is None) == bool(over)
        assert bench.store().get_task(sid, "a") == sized

    def test_a_task_the_store_does_not_know_live_takes_the_transaction(
        self, bench: AwsBench
    ) -> None:
        sid, _ = started(bench)
        faulty = FaultyClient(bench.ddb)
        writer = bench.store(faulty)
        # Never read: a transaction, whose task guess is checked and learned.
        assert writer.commit(sid, 1, [record("new", sid)]) == 2
        assert set(ops(faulty)) == {"transact_write_items"}
        assert pending_on_head(bench, sid) is None

    def test_many_tasks_written_beside_a_pending_one_leave_it(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        fresh = bench.store()  # believes nothing pending: "pt IN (98 ids)" is checked
        assert fresh.head(sid) == 2
        many = [record(f"t{i}", sid) for i in range(98)]
        assert fresh.commit(sid, 2, many) == 3
        assert pending_on_head(bench, sid) == ("a", a2)
        assert len(bench.store().load(sid).tasks) == 100
        assert_reads(bench.store(), sid, "a", a2)


class TestTornLoads:
    def test_a_query_torn_across_a_fold_is_read_again(self, bench: AwsBench) -> None:
        sid, store = started(bench)
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        pending_head = head_item(bench, sid)
        old_a = task_item(bench, sid, "a")
        a3 = record("a", sid, memos={"n": 3})
        store.commit(sid, 2, [a3], [Doc("d/x", 1)])  # the fold: REMOVE pt, pr + new a item

        def old_head(page: dict[str, Any]) -> dict[str, Any]:  # head before, a after
            page["Items"] = [pending_head if i["sk"]["S"] == "HEAD" else i for i in page["Items"]]
            return page

        def old_task(page: dict[str, Any]) -> dict[str, Any]:  # head after, a before
            page["Items"] = [
                {**old_a, "lsk": {"S": "L#a"}} if i["sk"]["S"] == "T#a" else i
                for i in page["Items"]
            ]
            return page

        for tear in (old_head, old_task):
            bench.sleeps.clear()
            faulty = FaultyClient(bench.ddb, plan={"query": [edit_result(tear)]})
            snap = bench.store(faulty).load(sid)
            assert (snap.seq, snap.tasks["a"]) == (3, a3), tear.__name__
            assert faulty.count("query") == 2 and len(bench.sleeps) == 1

    def test_a_pending_commit_between_two_loads_needs_no_reread(self, bench: AwsBench) -> None:
        # The pending commit writes the head alone: any Query sees it whole or not at all.
        sid, store = started(bench)
        faulty = FaultyClient(bench.ddb)
        reader = bench.store(faulty)
        assert reader.load(sid).tasks["a"].memos == {}
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        faulty.calls.clear()
        assert reader.load(sid).tasks["a"] == a2
        assert faulty.count("query") == 1


class TestEndedSessions:
    def retaining(self, bench: AwsBench, clock: list[float], client: Any = None) -> DynamoDBStore:
        store = bench.store(client)
        store.set_retention(30 * DAY, clock=lambda: clock[0])
        return store

    def test_a_session_ended_unseen_learns_it_and_stamps_the_task_item(
        self, bench: AwsBench
    ) -> None:
        clock = [ENDED]
        ender, stale = self.retaining(bench, clock), self.retaining(bench, clock)
        sid, _ = started(bench, stale)
        ender.commit(sid, 1, [], [Doc(SESSION_ENDED_KEY, {"at": ENDED})])
        assert stale.head(sid) == 2  # told the seq, not the end
        a2 = record("a", sid, memos={"n": 2})
        assert stale.commit(sid, 2, [a2]) == 3
        # Refused (ended), learned, sent again as the transaction that stamps its item.
        assert pending_on_head(bench, sid) is None
        assert task_item(bench, sid, "a")[EXPIRES_AT] == {"N": str(math.ceil(ENDED + 30 * DAY))}
        assert stale.get_task(sid, "a") == a2

    def test_an_expired_head_behaves_as_before(self, bench: AwsBench) -> None:
        clock = [ENDED]
        faulty = FaultyClient(bench.ddb)
        ender = self.retaining(bench, clock, faulty)
        sid, _ = started(bench, ender)
        ender.commit(sid, 1, [], [Doc(SESSION_ENDED_KEY, {"at": ENDED})])
        clock[0] = ENDED + 31 * DAY
        # A store that never saw the end: refused (ended), and the head reads as gone.
        with pytest.raises(ConflictError) as caught:
            self.retaining(bench, clock).commit(sid, 2, [record("a", sid, memos={"n": 2})])
        assert caught.value.actual_seq == 0
        # The store that ended it knows the end: never onto the head, its transaction as
        # before (stamped with the session's expiry).
        ender.commit(sid, 2, [record("a", sid, memos={"n": 2})])
        assert "update_item" not in ops(faulty)
        assert pending_on_head(bench, sid) is None

    def test_a_pending_record_of_an_ended_session_is_still_read(self, bench: AwsBench) -> None:
        clock = [ENDED]
        store = self.retaining(bench, clock)
        sid, _ = started(bench, store)
        a2 = record("a", sid, memos={"n": 2})
        store.commit(sid, 1, [a2])
        store.commit(sid, 2, [], [Doc(SESSION_ENDED_KEY, {"at": ENDED})])
        assert pending_on_head(bench, sid) == ("a", a2)
        assert store.stamp_ended(sid) >= 2
        assert self.retaining(bench, clock).get_task(sid, "a") == a2
        # Later commits into the ended session take the transaction, which folds it.
        a3 = record("a", sid, ended=True)
        assert store.commit(sid, 3, [a3]) == 4
        assert pending_on_head(bench, sid) is None and store.get_task(sid, "a") == a3
