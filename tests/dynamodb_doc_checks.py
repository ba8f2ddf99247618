"""DynamoDB-specific checks of the store's documents (beyond the shared contract), run on every
bench (moto and DynamoDB Local): they stay out of the live index, list reads only the range it
returns, keys fit a sort key, large bodies go to S3 (and come back checked), and documents
count toward the one transaction of a commit. Subclass :class:`DynamoDBDocumentChecks` with a
``bench`` fixture, beside :class:`dynamodb_checks.DynamoDBAdapterChecks` (the task records).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from aws_fixtures import (
    AwsBench,
    FaultyClient,
    edit_result,
    fail_after,
    fail_before,
    throttled,
    unique,
)
from botocore.exceptions import ReadTimeoutError
from dynamodb_checks import assert_untouched, raw_item, record

from bide.aws.dynamodb import LIVE_INDEX_KEY
from bide.engine.errors import CommitTooLarge, StoreUnavailable
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc


def doc_object_key(session_id: str, doc: Doc) -> str:
    """Where the store offloads a document: content-addressed under its key's digest."""
    body = json.dumps(doc.body, separators=(",", ":"), ensure_ascii=False).encode()
    key_sha = hashlib.sha256(doc.key.encode()).hexdigest()
    return f"{session_id}/docs/{key_sha}/{hashlib.sha256(body).hexdigest()}.json"


class DynamoDBDocumentChecks:
    """What the DynamoDB store adds to the contract for documents: kept out of the live index,
    ranged lists, sort-key limits, S3 offload, transaction sizes and idempotent resends.
    Subclass with a ``bench`` fixture returning an :class:`AwsBench`."""

    def test_documents_stay_out_of_the_live_index(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        docs = [Doc(f"conv/{i:04d}", {"n": i}) for i in range(40)]
        store.commit(sid, 0, [record("live", sid)], docs)
        item = raw_item(bench, sid, "D#conv/0007")
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
        key = doc_object_key(sid, big)
        item = raw_item(bench, sid, "D#sub/0001")
        assert item is not None and "body" not in item
        assert item["s3_key"]["S"] == key and item["s3_bucket"]["S"] == bench.bucket
        stored = bench.s3.get_object(Bucket=bench.bucket, Key=key)["Body"].read()
        assert json.loads(stored) == big.body
        assert store.get_doc(sid, "sub/0001") == big
        assert store.list_docs(sid, "sub/") == [big, Doc("sub/0002", "small")]
        # Replaced by a small body, it is inline again.
        store.commit(sid, 1, [], [Doc("sub/0001", {"n": 1})])
        assert "body" in raw_item(bench, sid, "D#sub/0001")  # type: ignore[operator]
        assert store.get_doc(sid, "sub/0001") == Doc("sub/0001", {"n": 1})

    def test_tampered_offloaded_document_is_not_returned(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [], [Doc("d", {"pad": "x" * 100_000})])
        key = raw_item(bench, sid, "D#d")["s3_key"]["S"]  # type: ignore[index]
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
        assert_untouched(store, sid, "a")
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
