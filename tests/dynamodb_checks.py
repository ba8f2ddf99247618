"""DynamoDB-specific checks of the store's task records (beyond the shared contract), run on
every bench (moto and DynamoDB Local): item layout, retries, idempotent commits, size limits, S3
offload and torn reads. Subclass :class:`DynamoDBAdapterChecks` with a ``bench`` fixture; the
same checks of documents are :class:`dynamodb_doc_checks.DynamoDBDocumentChecks`. The record
builders and raw-item readers here serve both.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from aws_fixtures import (
    AwsBench,
    FaultyClient,
    _rev,
    client_error,
    edit_result,
    fail_after,
    fail_before,
    throttled,
    unique,
)
from botocore.exceptions import ClientError, ReadTimeoutError

from bide.aws.dynamodb import (
    LIVE_INDEX,
    LIVE_INDEX_KEY,
    MAX_TASK_WRITES,
    DynamoDBStore,
)
from bide.engine.errors import CommitTooLarge, ConflictError, StoreUnavailable
from bide.engine.records import TaskRecord
from bide.engine.state import Completed, Pending, Terminal


def record(
    task_id: str, session_id: str, *, ended: bool = False, size: int = 0, **fields: Any
) -> TaskRecord:
    """A small record; ``size`` pads its input to about that many bytes of JSON."""
    state = Terminal(outcome=Completed(result="ok")) if ended else Pending(checkpoint="a")
    if size:
        fields["input"] = {"pad": "x" * size}
    return TaskRecord(
        id=task_id,
        session_id=session_id,
        kind="k",
        version=1,
        state=state,
        created_at=0.0,
        rev=fields.pop("rev", next(_rev)),
        **fields,
    )


def raw_item(bench: AwsBench, session_id: str, sort_key: str) -> dict[str, Any] | None:
    out = bench.ddb.get_item(
        TableName=bench.table,
        Key={"pk": {"S": session_id}, "sk": {"S": sort_key}},
        ConsistentRead=True,
    )
    item: dict[str, Any] | None = out.get("Item")
    return item


def live_items(bench: AwsBench, session_id: str) -> dict[str, int]:
    """The session's live task items as stored: ``{task id: wseq}``."""
    out = bench.ddb.query(
        TableName=bench.table,
        IndexName="live",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": session_id}},
        ConsistentRead=True,
    )
    return {i["sk"]["S"][2:]: int(i["wseq"]["N"]) for i in out["Items"] if i["sk"]["S"] != "HEAD"}


def head_item(bench: AwsBench, session_id: str) -> dict[str, Any]:
    """The session's head as stored (it must exist)."""
    item = raw_item(bench, session_id, "HEAD")
    assert item is not None
    return item


def assert_untouched(store: DynamoDBStore, session_id: str, *task_ids: str) -> None:
    assert store.head(session_id) == 0
    assert store.load(session_id).tasks == {}
    for task_id in task_ids:
        assert store.get_task(session_id, task_id) is None


class DynamoDBAdapterChecks:
    """What the DynamoDB store adds to the contract for task records: retries, idempotent
    resends, sizes, offload, classification without a second read, torn-read detection.
    Subclass with a ``bench`` fixture returning an :class:`AwsBench`."""

    def test_table_has_the_sparse_live_index(self, bench: AwsBench) -> None:
        table = bench.ddb.describe_table(TableName=bench.table)["Table"]
        (index,) = table["LocalSecondaryIndexes"]
        assert index["IndexName"] == LIVE_INDEX
        assert [k["AttributeName"] for k in index["KeySchema"]] == ["pk", LIVE_INDEX_KEY]
        sid = unique("s")
        bench.store().commit(sid, 0, [record("live", sid), record("gone", sid, ended=True)])
        assert LIVE_INDEX_KEY in raw_item(bench, sid, "T#live")  # type: ignore[operator]
        assert LIVE_INDEX_KEY not in raw_item(bench, sid, "T#gone")  # type: ignore[operator]

    def test_load_reads_only_the_head_and_live_tasks(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record(f"e{i}", sid, ended=True) for i in range(60)])
        store.commit(sid, 1, [record("live", sid)])
        pages: list[dict[str, Any]] = []
        faulty = FaultyClient(
            bench.ddb, always={"query": edit_result(lambda page: pages.append(page) or page)}
        )
        snap = bench.store(faulty).load(sid)
        assert set(snap.tasks) == {"live"} and snap.seq == 2
        assert [op for op, _ in faulty.calls] == ["query"]  # one Query, no other read
        assert faulty.calls[0][1]["ConsistentRead"] is True
        assert sum(p["ScannedCount"] for p in pages) == 2  # the head and the live task
        assert store.get_task(sid, "e59") is not None

    def test_throttled_commit_is_retried_then_succeeds(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(
            bench.ddb,
            plan={
                "transact_write_items": [
                    fail_before(throttled("TransactWriteItems")),
                    fail_before(client_error("InternalServerError", "TransactWriteItems", 500)),
                ]
            },
        )
        store = bench.store(faulty, base_delay=0.1, max_delay=10)
        assert store.commit(sid, 0, [record("a", sid)]) == 1
        assert faulty.count("transact_write_items") == 3
        tokens = {kw["ClientRequestToken"] for op, kw in faulty.calls if op.startswith("transact")}
        assert len(tokens) == 1, "every attempt of one commit carries the same token"
        assert len(bench.sleeps) == 2
        assert 0 <= bench.sleeps[0] <= 0.1 and 0 <= bench.sleeps[1] <= 0.2
        assert store.load(sid).tasks["a"] == store.get_task(sid, "a")

    def test_transaction_conflict_cancellation_is_retried(self, bench: AwsBench) -> None:
        # A TransactionConflict is another request touching the same item, not a seq conflict:
        # safe to resend because the seq condition still guards the write.
        sid = unique("s")
        reasons = {"CancellationReasons": [{"Code": "TransactionConflict"}, {"Code": "None"}]}
        faulty = FaultyClient(
            bench.ddb,
            plan={
                "transact_write_items": [
                    fail_before(
                        client_error(
                            "TransactionCanceledException", "TransactWriteItems", **reasons
                        )
                    )
                ]
            },
        )
        assert bench.store(faulty).commit(sid, 0, [record("a", sid)]) == 1
        assert faulty.count("transact_write_items") == 2

    def test_throttled_reads_are_retried(self, bench: AwsBench) -> None:
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid)])
        faulty = FaultyClient(
            bench.ddb,
            plan={
                "query": [fail_before(throttled("Query"))],
                # get_task reads the head with the task (a record may be pending on it).
                "transact_get_items": [
                    fail_before(client_error("ThrottlingException", "TransactGetItems")),
                    fail_before(ReadTimeoutError(endpoint_url="http://127.0.0.1")),
                ],
            },
        )
        store = bench.store(faulty)
        assert set(store.load(sid).tasks) == {"a"}
        assert store.get_task(sid, "a") is not None
        assert faulty.count("query") == 2 and faulty.count("transact_get_items") == 3

    def test_retries_exhausted_raise_store_unavailable(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(
            bench.ddb,
            always={
                "transact_write_items": fail_before(throttled("TransactWriteItems")),
                "query": fail_before(throttled("Query")),
            },
        )
        store = bench.store(faulty, max_attempts=4)
        with pytest.raises(StoreUnavailable, match="commit failed 4 times") as caught:
            store.commit(sid, 0, [record("a", sid)])
        assert caught.value.retryable
        assert faulty.count("transact_write_items") == 4 and len(bench.sleeps) == 3
        with pytest.raises(StoreUnavailable):
            store.load(sid)
        assert_untouched(bench.store(), sid, "a")

    def test_lost_answer_of_an_applied_commit_is_a_success(self, bench: AwsBench) -> None:
        # The first attempt applies but its answer is lost; the resend carries the same
        # ClientRequestToken. DynamoDB answers it with success; where the token is not
        # honoured (moto), the head's token identifies the commit. Never a ConflictError.
        sid = unique("s")
        faulty = FaultyClient(
            bench.ddb,
            plan={
                "transact_write_items": [
                    fail_after(ReadTimeoutError(endpoint_url="http://127.0.0.1"))
                ]
            },
        )
        store = bench.store(faulty)
        assert store.commit(sid, 0, [record("a", sid, memos={"n": 1})]) == 1
        # Two records: a transaction again, not a record pending on the head (bide.aws.pending).
        assert store.commit(sid, 1, [record("a", sid, memos={"n": 2}), record("b", sid)]) == 2
        calls = [kw for op, kw in faulty.calls if op == "transact_write_items"]
        assert len(calls) == 3
        assert calls[0]["ClientRequestToken"] == calls[1]["ClientRequestToken"]
        assert calls[1]["ClientRequestToken"] != calls[2]["ClientRequestToken"]
        assert store.head(sid) == 2
        assert store.get_task(sid, "a").memos == {"n": 2}  # type: ignore[union-attr]

    def test_conflict_after_a_transient_error_is_still_a_conflict(self, bench: AwsBench) -> None:
        # The first attempt is throttled (not applied); before the resend another writer
        # commits. The resend must report the conflict, not mistake it for its own success.
        sid = unique("s")
        rival = bench.store(bench.other_ddb)
        faulty = FaultyClient(
            bench.ddb, plan={"transact_write_items": [fail_before(throttled("TransactWriteItems"))]}
        )
        store = bench.store(faulty, sleep=lambda _: rival.commit(sid, 0, [record("r", sid)]))
        with pytest.raises(ConflictError) as caught:
            store.commit(sid, 0, [record("a", sid)])
        assert (caught.value.expected_seq, caught.value.actual_seq) == (0, 1)
        assert store.get_task(sid, "a") is None
        assert set(store.load(sid).tasks) == {"r"}

    def test_conflict_is_classified_without_a_second_read(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        for seq in range(3):
            store.commit(sid, seq, [record("a", sid)])
        faulty = FaultyClient(bench.ddb)
        for stale in (0, 1, 2, 7):
            with pytest.raises(ConflictError) as caught:
                bench.store(faulty).commit(sid, stale, [record("a", sid), record("b", sid)])
            assert (caught.value.expected_seq, caught.value.actual_seq) == (stale, 3)
        assert [op for op, _ in faulty.calls] == ["transact_write_items"] * 4
        assert store.get_task(sid, "b") is None

    def test_oversize_record_without_bucket_is_refused_before_writing(
        self, bench: AwsBench
    ) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty, bucket=False)
        with pytest.raises(CommitTooLarge, match="no S3 bucket"):
            store.commit(sid, 0, [record("small", sid), record("big", sid, size=450_000)])
        assert faulty.calls == []
        assert_untouched(store, sid, "small", "big")

    def test_record_over_threshold_without_bucket_stays_inline(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store(bucket=False)
        big = record("big", sid, size=200_000)
        store.commit(sid, 0, [big])
        assert store.get_task(sid, "big") == big
        assert "body" in raw_item(bench, sid, "T#big")  # type: ignore[operator]

    def test_more_than_99_task_writes_are_refused(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        too_many = [record(f"t{i}", sid) for i in range(MAX_TASK_WRITES + 1)]
        with pytest.raises(CommitTooLarge, match="99"):
            store.commit(sid, 0, too_many)
        assert faulty.calls == []
        assert_untouched(store, sid, "t0", f"t{MAX_TASK_WRITES}")
        # 99 writes (live and ended mixed) is exactly one full transaction.
        full = [record(f"t{i}", sid, ended=i % 2 == 0) for i in range(MAX_TASK_WRITES)]
        assert store.commit(sid, 0, full) == 1
        assert len(store.load(sid).tasks) == MAX_TASK_WRITES // 2

    def test_transaction_over_4mb(self, bench: AwsBench) -> None:
        sid = unique("s")
        records = [record(f"t{i}", sid, size=60_000) for i in range(70)]  # ~4.2 MB, each inline
        faulty = FaultyClient(bench.ddb)
        with pytest.raises(CommitTooLarge, match="transaction"):
            bench.store(faulty, bucket=False).commit(sid, 0, records)
        assert faulty.calls == []
        # With a bucket, the largest records are offloaded until the transaction fits.
        store = bench.store()
        assert store.commit(sid, 0, records) == 1
        assert store.load(sid).tasks == {r.id: r for r in records}
        listed = bench.s3.list_objects_v2(Bucket=bench.bucket, Prefix=f"{sid}/")
        assert 0 < listed["KeyCount"] < 70

    def test_large_record_is_offloaded_to_s3_and_read_back(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        big = record("big", sid, size=1_000_000, rev=3)
        store.commit(sid, 0, [big])
        body = big.to_json().encode()
        key = f"{sid}/big/3-{hashlib.sha256(body).hexdigest()}.json"
        item = raw_item(bench, sid, "T#big")
        assert item is not None and "body" not in item
        assert item["s3_key"]["S"] == key and item["s3_bucket"]["S"] == bench.bucket
        assert bench.s3.get_object(Bucket=bench.bucket, Key=key)["Body"].read() == body
        assert store.get_task(sid, "big") == big and store.load(sid).tasks["big"] == big
        # Replaced by a small version, it is inline again.
        # (2 KB: larger than a record pending on the head holds, bide.aws.pending; so the
        # task item is written.)
        small = record("big", sid, rev=4, size=2000)
        store.commit(sid, 1, [small])
        assert "body" in raw_item(bench, sid, "T#big")  # type: ignore[operator]
        assert store.get_task(sid, "big") == small

    def test_tampered_offloaded_record_is_not_returned(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record("big", sid, size=100_000)])
        key = raw_item(bench, sid, "T#big")["s3_key"]["S"]  # type: ignore[index]
        bench.s3.put_object(Bucket=bench.bucket, Key=key, Body=b"{}")
        with pytest.raises(StoreUnavailable, match="digest"):
            store.get_task(sid, "big")

    def test_torn_read_is_detected_and_read_again(self, bench: AwsBench) -> None:
        # Fake what a Query may return while a commit is half applied: one task at a version
        # the head's manifest does not list, one live task missing.
        sid = unique("s")
        bench.store().commit(sid, 0, [record("a", sid), record("b", sid)])

        def tear(page: dict[str, Any]) -> dict[str, Any]:
            items = [i for i in page["Items"] if i["sk"]["S"] != "T#b"]
            for i in items:
                if i["sk"]["S"] == "T#a":
                    i["wseq"] = {"N": "2"}
            return {**page, "Items": items}

        faulty = FaultyClient(bench.ddb, plan={"query": [edit_result(tear), edit_result(tear)]})
        store = bench.store(faulty)
        snap = store.load(sid)
        assert (snap.seq, set(snap.tasks)) == (1, {"a", "b"})
        assert faulty.count("query") == 3 and len(bench.sleeps) == 2

        always_torn = FaultyClient(bench.ddb, always={"query": edit_result(tear)})
        with pytest.raises(StoreUnavailable, match="kept changing"):
            bench.store(always_torn, max_attempts=3).load(sid)

    def test_other_errors_surface_at_once(self, bench: AwsBench) -> None:
        store = DynamoDBStore("no-such-table", bench.ddb, sleep=bench.sleeps.append)
        with pytest.raises(ClientError) as caught:
            store.head(unique("s"))
        assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"
        assert bench.sleeps == []

    def test_record_of_another_session_and_closed_store(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        with pytest.raises(ValueError, match="belongs to session"):
            store.commit(sid, 0, [record("a", "elsewhere")])
        store.close()
        with pytest.raises(RuntimeError, match="closed"):
            store.load(sid)
