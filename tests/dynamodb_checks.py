"""DynamoDB-specific checks of the store (beyond the shared contract), run on every bench
(moto and DynamoDB Local): item layout, retries, idempotent commits, size limits, S3 offload,
torn reads and documents. Subclass :class:`DynamoDBAdapterChecks` with a ``bench`` fixture.

Long because: it is one class of checks that runs on two benches; splitting it would make each
bench subclass several classes and nothing would read better for it.
"""

from __future__ import annotations

import hashlib
import json
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
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc


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


def _raw_item(bench: AwsBench, session_id: str, sort_key: str) -> dict[str, Any] | None:
    out = bench.ddb.get_item(
        TableName=bench.table,
        Key={"pk": {"S": session_id}, "sk": {"S": sort_key}},
        ConsistentRead=True,
    )
    item: dict[str, Any] | None = out.get("Item")
    return item


def _assert_untouched(store: DynamoDBStore, session_id: str, *task_ids: str) -> None:
    assert store.head(session_id) == 0
    assert store.load(session_id).tasks == {}
    for task_id in task_ids:
        assert store.get_task(session_id, task_id) is None


def _doc_object_key(session_id: str, doc: Doc) -> str:
    """Where the store offloads a document: content-addressed under its key's digest."""
    body = json.dumps(doc.body, separators=(",", ":"), ensure_ascii=False).encode()
    key_sha = hashlib.sha256(doc.key.encode()).hexdigest()
    return f"{session_id}/docs/{key_sha}/{hashlib.sha256(body).hexdigest()}.json"


class DynamoDBAdapterChecks:
    """What the DynamoDB store adds to the contract: retries, idempotent resends, sizes,
    offload, classification without a second read, torn-read detection; and the same for
    documents. Subclass with a ``bench`` fixture returning an :class:`AwsBench`."""

    def test_table_has_the_sparse_live_index(self, bench: AwsBench) -> None:
        table = bench.ddb.describe_table(TableName=bench.table)["Table"]
        (index,) = table["LocalSecondaryIndexes"]
        assert index["IndexName"] == LIVE_INDEX
        assert [k["AttributeName"] for k in index["KeySchema"]] == ["pk", LIVE_INDEX_KEY]
        sid = unique("s")
        bench.store().commit(sid, 0, [record("live", sid), record("gone", sid, ended=True)])
        assert LIVE_INDEX_KEY in _raw_item(bench, sid, "T#live")  # type: ignore[operator]
        assert LIVE_INDEX_KEY not in _raw_item(bench, sid, "T#gone")  # type: ignore[operator]

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
                "get_item": [
                    fail_before(client_error("ThrottlingException", "GetItem")),
                    fail_before(ReadTimeoutError(endpoint_url="http://127.0.0.1")),
                ],
            },
        )
        store = bench.store(faulty)
        assert set(store.load(sid).tasks) == {"a"}
        assert store.get_task(sid, "a") is not None
        assert faulty.count("query") == 2 and faulty.count("get_item") == 3

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
        _assert_untouched(bench.store(), sid, "a")

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
        assert store.commit(sid, 1, [record("a", sid, memos={"n": 2})]) == 2
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
        _assert_untouched(store, sid, "small", "big")

    def test_record_over_threshold_without_bucket_stays_inline(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store(bucket=False)
        big = record("big", sid, size=200_000)
        store.commit(sid, 0, [big])
        assert store.get_task(sid, "big") == big
        assert "body" in _raw_item(bench, sid, "T#big")  # type: ignore[operator]

    def test_more_than_99_task_writes_are_refused(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        too_many = [record(f"t{i}", sid) for i in range(MAX_TASK_WRITES + 1)]
        with pytest.raises(CommitTooLarge, match="99"):
            store.commit(sid, 0, too_many)
        assert faulty.calls == []
        _assert_untouched(store, sid, "t0", f"t{MAX_TASK_WRITES}")
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
        item = _raw_item(bench, sid, "T#big")
        assert item is not None and "body" not in item
        assert item["s3_key"]["S"] == key and item["s3_bucket"]["S"] == bench.bucket
        assert bench.s3.get_object(Bucket=bench.bucket, Key=key)["Body"].read() == body
        assert store.get_task(sid, "big") == big and store.load(sid).tasks["big"] == big
        # Replaced by a small version, it is inline again.
        small = record("big", sid, rev=4)
        store.commit(sid, 1, [small])
        assert "body" in _raw_item(bench, sid, "T#big")  # type: ignore[operator]
        assert store.get_task(sid, "big") == small

    def test_tampered_offloaded_record_is_not_returned(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record("big", sid, size=100_000)])
        key = _raw_item(bench, sid, "T#big")["s3_key"]["S"]  # type: ignore[index]
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

    # --- documents --------------------------------------------------------------------------

    def test_documents_stay_out_of_the_live_index(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        docs = [Doc(f"conv/{i:04d}", {"n": i}) for i in range(40)]
        store.commit(sid, 0, [record("live", sid)], docs)
        item = _raw_item(bench, sid, "D#conv/0007")
        assert item is not None and item["body"]["S"] == '{"n":7}'
        assert LIVE_INDEX_KEY not in item and item["wseq"]["N"] == "1"
        pages: list[dict[str, Any]] = []
        faulty = FaultyClient(
            bench.ddb, always={"query": edit_result(lambda page: pages.append(page) or page)}
        )
        assert set(bench.store(faulty).load(sid).tasks) == {"live"}
        assert sum(p["ScannedCount"] for p in pages) == 2  # the head and the live task

    def test_list_docs_reads_only_the_range_it_returns(self, bench: AwsBench) -> None:
        sid = unique("s")
        bench.store().commit(
            sid,
            0,
            [record("t", sid)],
            [Doc(f"a/{i:04d}", i) for i in range(30)] + [Doc("a0", "x"), Doc("b/1", "y")],
        )
        pages: list[dict[str, Any]] = []
        faulty = FaultyClient(
            bench.ddb, always={"query": edit_result(lambda page: pages.append(page) or page)}
        )
        store = bench.store(faulty)
        listed = store.list_docs(sid, "a/", start_after="a/0009", limit=5)
        assert listed == [Doc(f"a/{i:04d}", i) for i in range(10, 15)]
        ((op, request),) = faulty.calls
        assert op == "query" and request["ConsistentRead"] is True
        assert request["ExclusiveStartKey"]["sk"] == {"S": "D#a/0009"}
        assert [p["ScannedCount"] for p in pages] == [5]  # nothing before or after was read
        # A start_after past the prefix's range is answered without a read; one before it is
        # no bound at all.
        faulty.calls.clear()
        assert store.list_docs(sid, "a/", start_after="a0") == []
        assert store.list_docs(sid, "b/", start_after="a/9999") == [Doc("b/1", "y")]
        assert [op for op, _ in faulty.calls] == ["query"]
        # A start_after that names no document starts after where it would be.
        absent = store.list_docs(sid, "a/", start_after="a/0027~")
        assert absent == [Doc("a/0028", 28), Doc("a/0029", 29)]
        # A start_after longer than any key can be is still honoured.
        assert store.list_docs(sid, "a/", start_after="a/0028" + "z" * 1100) == [Doc("a/0029", 29)]

    def test_document_keys_must_fit_a_sort_key(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        longest = "k" * 1022  # "D#" + key: 1024 bytes
        with pytest.raises(ValueError, match="sort key"):
            store.commit(sid, 0, [record("a", sid)], [Doc(longest + "k", 1)])
        assert store.get_doc(sid, longest + "k") is None
        assert store.list_docs(sid, longest + "k") == []
        assert faulty.calls == []
        store.commit(sid, 0, [], [Doc(longest, 1)])
        assert store.get_doc(sid, longest) == Doc(longest, 1)
        assert store.list_docs(sid, "k") == [Doc(longest, 1)]

    def test_large_document_is_offloaded_to_s3_and_read_back(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        big = Doc("sub/0001", {"pad": "x" * 1_000_000, "n": [1, 2]})
        store.commit(sid, 0, [], [big, Doc("sub/0002", "small")])
        key = _doc_object_key(sid, big)
        item = _raw_item(bench, sid, "D#sub/0001")
        assert item is not None and "body" not in item
        assert item["s3_key"]["S"] == key and item["s3_bucket"]["S"] == bench.bucket
        stored = bench.s3.get_object(Bucket=bench.bucket, Key=key)["Body"].read()
        assert json.loads(stored) == big.body
        assert store.get_doc(sid, "sub/0001") == big
        assert store.list_docs(sid, "sub/") == [big, Doc("sub/0002", "small")]
        # Replaced by a small body, it is inline again.
        store.commit(sid, 1, [], [Doc("sub/0001", {"n": 1})])
        assert "body" in _raw_item(bench, sid, "D#sub/0001")  # type: ignore[operator]
        assert store.get_doc(sid, "sub/0001") == Doc("sub/0001", {"n": 1})

    def test_tampered_offloaded_document_is_not_returned(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [], [Doc("d", {"pad": "x" * 100_000})])
        key = _raw_item(bench, sid, "D#d")["s3_key"]["S"]  # type: ignore[index]
        bench.s3.put_object(Bucket=bench.bucket, Key=key, Body=b"{}")
        with pytest.raises(StoreUnavailable, match="digest"):
            store.get_doc(sid, "d")
        with pytest.raises(StoreUnavailable, match="digest"):
            store.list_docs(sid, "")

    def test_oversize_document_without_bucket_is_refused_before_writing(
        self, bench: AwsBench
    ) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty, bucket=False)
        with pytest.raises(CommitTooLarge, match="no S3 bucket"):
            store.commit(sid, 0, [record("a", sid)], [Doc("big", "x" * 450_000)])
        assert faulty.calls == []
        _assert_untouched(store, sid, "a")
        assert store.get_doc(sid, "big") is None

    def test_documents_count_toward_the_transaction(self, bench: AwsBench) -> None:
        sid = unique("s")
        faulty = FaultyClient(bench.ddb)
        store = bench.store(faulty)
        tasks = [record(f"t{i}", sid) for i in range(40)]
        docs = [Doc(f"d/{i:03d}", i) for i in range(MAX_COMMIT_ITEMS - 40 + 1)]
        with pytest.raises(CommitTooLarge, match=str(MAX_COMMIT_ITEMS)):
            store.commit(sid, 0, tasks, docs)
        assert faulty.calls == []
        assert store.commit(sid, 0, tasks, docs[:-1]) == 1
        ((_, request),) = [c for c in faulty.calls if c[0] == "transact_write_items"]
        assert len(request["TransactItems"]) == MAX_COMMIT_ITEMS + 1  # and the head
        # ~4.2 MB of documents: too much for one transaction unless some go to S3.
        sid = unique("s")
        docs = [Doc(f"d/{i:03d}", "x" * 60_000) for i in range(70)]
        faulty.calls.clear()
        with pytest.raises(CommitTooLarge, match="transaction"):
            bench.store(faulty, bucket=False).commit(sid, 0, [], docs)
        assert faulty.calls == []
        assert store.commit(sid, 0, [], docs) == 1
        listed = bench.s3.list_objects_v2(Bucket=bench.bucket, Prefix=f"{sid}/docs/")
        assert 0 < listed["KeyCount"] < 70
        faulty.calls.clear()
        assert store.list_docs(sid, "d/") == docs
        assert faulty.count("query") >= 3, "about 3.6 MB inline is several 1 MB pages"

    def test_commit_with_documents_retried_then_answer_lost_is_one_success(
        self, bench: AwsBench
    ) -> None:
        sid = unique("s")
        faulty = FaultyClient(
            bench.ddb,
            plan={
                "transact_write_items": [
                    fail_before(throttled("TransactWriteItems")),
                    fail_after(ReadTimeoutError(endpoint_url="http://127.0.0.1")),
                ]
            },
        )
        store = bench.store(faulty)
        big, small = Doc("c/2", {"pad": "y" * 100_000}), Doc("c/1", ["one"])
        assert store.commit(sid, 0, [record("a", sid)], [big, small]) == 1
        calls = [kw for op, kw in faulty.calls if op == "transact_write_items"]
        assert len(calls) == 3 and len({c["ClientRequestToken"] for c in calls}) == 1
        assert store.head(sid) == 1
        assert store.list_docs(sid, "c/") == [small, big]
        assert store.commit(sid, 1, [], [Doc("c/1", ["two"])]) == 2
        assert store.get_doc(sid, "c/1") == Doc("c/1", ["two"])
