"""The DynamoDB store's session head keeps a constant-size digest of its live tasks (``n`` and
``dsum``, :mod:`bide.aws.digest`) instead of listing them: what a load checks, what a commit
adds, how a writer that guessed a task's old state wrong recovers, and how a head written
before the digest (it lists ``live``) is still read and then converted. Run on moto and on
DynamoDB Local (``aws_bench``).

A Query is read-committed with respect to transactions
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html,
"Isolation levels"): the torn answers faked here are what it may return mid-commit. A failed
condition of one action cancels the whole transaction and, with
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, returns the item as it stands in that action's
reason (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html).
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from aws_fixtures import AwsBench, FaultyClient, aws_bench, edit_result, unique
from botocore.exceptions import ClientError
from dynamodb_checks import head_item, live_items, record

from bide.aws import digest
from bide.engine.errors import ConflictError, StoreUnavailable
from bide.engine.records import TaskRecord

__all__ = ["aws_bench"]  # a fixture, imported for pytest to find


@pytest.fixture
def bench(aws_bench: AwsBench) -> AwsBench:
    aws_bench.sleeps.clear()
    return aws_bench


def assert_digest_matches_items(bench: AwsBench, sid: str) -> None:
    head = head_item(bench, sid)
    assert "live" not in head
    assert digest.head_digest(head) == digest.digest_of(live_items(bench, sid))


def write_legacy_session(bench: AwsBench, sid: str, records: list[TaskRecord]) -> None:
    """A session as the store wrote it before the digest: the head lists ``live``. Task items
    are written by the current store (their layout did not change), then the head replaced."""
    bench.store().commit(sid, 0, records)
    live = {r.id: {"N": "1"} for r in records if r.live}
    bench.ddb.put_item(
        TableName=bench.table,
        Item={
            "pk": {"S": sid},
            "sk": {"S": "HEAD"},
            "lsk": {"S": "HEAD"},
            "seq": {"N": "1"},
            "txn": {"S": "legacy"},
            "live": {"M": live},
        },
    )


class TestDigestHead:
    def test_the_head_keeps_a_count_and_a_sum_not_a_list(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record(f"t{i}", sid) for i in range(60)])
        store.commit(sid, 1, [record(f"t{i}", sid, ended=i % 2 == 0) for i in range(30)])
        store.commit(sid, 2, [record(f"u{i}", sid) for i in range(40)])
        head = head_item(bench, sid)
        assert digest.head_digest(head) is not None and head["n"] == {"N": str(60 - 15 + 40)}
        assert_digest_matches_items(bench, sid)
        # Constant size: the whole head is a few numbers and the token, whatever the live set.
        assert len(str(head)) < 400
        assert len(store.load(sid).tasks) == 85

    def test_a_torn_query_with_the_right_count_is_read_again(self, bench: AwsBench) -> None:
        # Mid-commit, a Query may return one task at its new version and the others at their
        # old ones: the count matches the head's, only the sum tells.
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid), record("b", sid)])

        def tear(page: dict[str, Any]) -> dict[str, Any]:
            for i in page["Items"]:
                if i["sk"]["S"] == "T#a":
                    i["wseq"] = {"N": "2"}
            return page

        faulty = FaultyClient(bench.ddb, plan={"query": [edit_result(tear)]})
        snap = bench.store(faulty).load(sid)
        assert (snap.seq, set(snap.tasks)) == (1, {"a", "b"})
        assert faulty.count("query") == 2 and len(bench.sleeps) == 1
        always = FaultyClient(bench.ddb, always={"query": edit_result(tear)})
        with pytest.raises(StoreUnavailable, match="kept changing"):
            bench.store(always, max_attempts=2).load(sid)

    def test_a_writer_that_never_read_the_session_learns_the_old_states(
        self, bench: AwsBench
    ) -> None:
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid), record("b", sid), record("c", sid)])
        # A second store (another Lambda) rewrites a, ends b and adds d without reading: it
        # guesses a and b not live, their conditions refuse, and the commit is sent again
        # with their states from the cancellation (no extra read).
        faulty = FaultyClient(bench.other_ddb)
        writer = bench.store(faulty)
        writer.commit(sid, 1, [record("a", sid), record("b", sid, ended=True), record("d", sid)])
        assert [op for op, _ in faulty.calls] == ["transact_write_items"] * 2
        assert_digest_matches_items(bench, sid)
        assert set(bench.store().load(sid).tasks) == {"a", "c", "d"}
        # Now it knows a, b (from the cancellation) and d (it wrote it): its next commit on
        # them goes through at once.
        writer.commit(sid, 2, [record("a", sid, ended=True), record("b", sid), record("d", sid)])
        assert faulty.count("transact_write_items") == 3
        assert_digest_matches_items(bench, sid)
        assert set(bench.store().load(sid).tasks) == {"b", "c", "d"}

    def test_without_the_items_in_the_cancellation_the_refused_tasks_are_read(
        self, bench: AwsBench
    ) -> None:
        # An emulator may leave ALL_OLD's item out of a cancellation reason: then each refused
        # task is read once (strongly consistent) before the commit is sent again.
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid), record("b", sid)])

        def without_items(call: Any) -> Any:
            try:
                return call()
            except ClientError as exc:
                for reason in exc.response.get("CancellationReasons", []):  # type: ignore[attr-defined]
                    reason.pop("Item", None)
                raise

        faulty = FaultyClient(bench.ddb, plan={"transact_write_items": [without_items]})
        bench.store(faulty).commit(sid, 1, [record("a", sid, ended=True), record("b", sid)])
        ops = [op for op, _ in faulty.calls]
        assert ops == ["transact_write_items", "get_item", "get_item", "transact_write_items"]
        assert_digest_matches_items(bench, sid)
        assert set(bench.store().load(sid).tasks) == {"b"}

    def test_a_reading_writer_commits_in_one_transaction(self, bench: AwsBench) -> None:
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid), record("b", sid)])
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        seq, _ = store.task_at_head(sid, "a")
        store.commit(sid, seq, [record("a", sid, ended=True), record("new", sid)])
        seq = store.load(sid).seq
        store.commit(sid, seq, [record("b", sid), record("new", sid, ended=True)])
        assert faulty.count("transact_write_items") == 2
        assert_digest_matches_items(bench, sid)
        assert set(bench.store().load(sid).tasks) == {"b"}

    def test_a_stale_writer_is_still_a_conflict(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record("a", sid)])
        store.commit(sid, 1, [record("a", sid)])
        with pytest.raises(ConflictError) as conflict:
            bench.store().commit(sid, 1, [record("a", sid, ended=True)])
        assert conflict.value.actual_seq == 2
        assert_digest_matches_items(bench, sid)

    def test_racing_writers_that_read_one_task_keep_the_digest_exact(self, bench: AwsBench) -> None:
        # Writers that read only one task (task_at_head) and rewrite others: their guesses go
        # stale under each other's commits, and every commit still moves the digest exactly.
        sid = unique("s")
        ids = [f"t{i}" for i in range(6)]
        bench.store().commit(sid, 0, [record(i, sid) for i in ids])
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            client = bench.ddb if n % 2 == 0 else bench.other_ddb
            store = bench.store(client, real_sleep=True)
            rng = random.Random(n)
            done = 0
            try:
                while done < 6:
                    seq, _ = store.task_at_head(sid, rng.choice(ids))
                    writes = [record(t, sid, ended=rng.random() < 0.3) for t in rng.sample(ids, 2)]
                    try:
                        store.commit(sid, seq, writes)
                        done += 1
                    except ConflictError:
                        continue
            except BaseException as exc:  # surfaced below: a thread's failure fails the test
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert bench.store().load(sid).seq == 1 + 3 * 6
        assert_digest_matches_items(bench, sid)


class TestLegacyHead:
    """Heads written before the digest list their live tasks in ``live``."""

    def test_a_legacy_head_is_loaded_then_converted_by_the_next_commit(
        self, bench: AwsBench
    ) -> None:
        sid = unique("s")
        write_legacy_session(bench, sid, [record("a", sid), record("b", sid), record("c", sid)])
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        assert store.load(sid).seq == 1 and set(store.load(sid).tasks) == {"a", "b", "c"}
        store.commit(sid, 1, [record("b", sid, ended=True), record("d", sid)])
        assert faulty.count("transact_write_items") == 1  # converted in the same transaction
        assert_digest_matches_items(bench, sid)
        snap = bench.store().load(sid)
        assert (snap.seq, set(snap.tasks)) == (2, {"a", "c", "d"})

    def test_a_writer_that_did_not_load_converts_after_one_refusal(self, bench: AwsBench) -> None:
        sid = unique("s")
        write_legacy_session(bench, sid, [record("a", sid), record("b", sid)])
        faulty = FaultyClient(bench.ddb)
        bench.store(faulty).commit(sid, 1, [record("a", sid, ended=True)])
        # Refused (the head lists live), one read of the head, converted with its list.
        ops = [op for op, _ in faulty.calls]
        assert ops == ["transact_write_items", "get_item", "transact_write_items"]
        assert_digest_matches_items(bench, sid)
        assert set(bench.store().load(sid).tasks) == {"b"}

    def test_a_torn_query_of_a_legacy_head_is_read_again(self, bench: AwsBench) -> None:
        sid = unique("s")
        write_legacy_session(bench, sid, [record("a", sid), record("b", sid)])

        def tear(page: dict[str, Any]) -> dict[str, Any]:
            return {**page, "Items": [i for i in page["Items"] if i["sk"]["S"] != "T#b"]}

        faulty = FaultyClient(bench.ddb, plan={"query": [edit_result(tear)]})
        assert set(bench.store(faulty).load(sid).tasks) == {"a", "b"}
        assert faulty.count("query") == 2


class TestModel:
    """Random commits by several stores (each with its own guesses, some forgotten, some
    stale), interleaved with loads, against a model of the live set."""

    @pytest.mark.parametrize("seed", [1, 2])
    def test_random_commits_keep_the_digest_exact(self, bench: AwsBench, seed: int) -> None:
        rng = random.Random(seed)
        sid = unique("s")
        stores = [bench.store(max_attempts=2) for _ in range(3)]
        model: dict[str, bool] = {}  # task id -> live
        seq = 0
        for _step in range(40):
            n = rng.randrange(len(stores))
            if rng.random() < 0.15:
                stores[n] = bench.store(max_attempts=2)  # a fresh Lambda: no guesses
            store = stores[n]
            read = rng.random()
            if read < 0.3:
                assert store.load(sid).seq == seq
            elif read < 0.5 and model:
                store.task_at_head(sid, rng.choice(sorted(model)))
            ids = sorted(model) + [f"n{seq}-{i}" for i in range(3)]
            writes = [
                record(task_id, sid, ended=rng.random() < 0.3)
                for task_id in rng.sample(ids, rng.randint(0, min(6, len(ids))))
            ]
            if seq and rng.random() < 0.1:
                with pytest.raises(ConflictError):
                    store.commit(sid, seq - 1, writes)
                continue
            seq = store.commit(sid, seq, writes)
            model.update({r.id: r.live for r in writes})
            snap = stores[rng.randrange(len(stores))].load(sid)
            assert snap.seq == seq
            assert set(snap.tasks) == {t for t, live in model.items() if live}
            assert_digest_matches_items(bench, sid)


class TestDigestFunctions:
    def test_terms_are_stable_and_in_range(self) -> None:
        # A stable hash (the same in every process): a fixed value pins it.
        assert digest.term("a", 1) == digest.term("a", 1)
        assert digest.term("a", 1) != digest.term("a", 2) != digest.term("b", 1)
        assert 0 <= digest.term("x" * 1000, 10**9) < 2**digest.DIGEST_BITS
        assert digest.digest_of({}) == (0, 0)

    def test_a_legacy_view_converts_only_at_its_own_seq(self) -> None:
        view = digest.View({"a": 3, "b": 1}, complete=True, legacy_seq=3)
        _, change = digest.plan(view, 3, [record("b", "s", ended=True), record("c", "s")])
        assert change == digest.HeadChange(*digest.digest_of({"a": 3, "c": 4}), True, True)
        olds, change = digest.plan(view, 4, [record("a", "s", ended=True)])
        assert olds == [3] and not change.absolute
        assert (change.n, change.dsum) == (-1, -digest.term("a", 3))
