"""The store contract and the DynamoDB-specific checks, each run on two implementations of
DynamoDB: moto (in process, ``mock_aws``, with an S3 bucket for offload) and AWS DynamoDB Local,
a second and independent implementation, at ``$BIDE_DYNAMODB_LOCAL_ENDPOINT`` (those cases are
skipped with the reason when it is unset; CI sets it), with S3 offload on a moto server on
127.0.0.1. Test ids end in ``[moto]`` or ``[dynamodb_local]``."""

from __future__ import annotations

import time

import pytest
from aws_fixtures import (
    AwsBench,
    FaultyClient,
    aws_bench,
    client_error,
    fail_before,
    unique,
)
from dynamodb_checks import DynamoDBAdapterChecks, record
from dynamodb_doc_checks import DynamoDBDocumentChecks
from store_contract import StoreContract

from bide.aws.dynamodb import PARTITION_KEY, SORT_KEY, DynamoDBStore
from bide.aws.retention import EXPIRES_AT
from bide.engine.errors import DocumentExists
from bide.engine.store.base import Doc

__all__ = ["aws_bench"]  # a fixture, imported for pytest to find


@pytest.fixture
def bench(aws_bench: AwsBench) -> AwsBench:
    aws_bench.sleeps.clear()
    return aws_bench


class TestDynamoDBContract(StoreContract):
    @pytest.fixture
    def store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(real_sleep=True)

    @pytest.fixture
    def other_store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(bench.other_ddb, real_sleep=True)


class TestDynamoDBAdapter(DynamoDBAdapterChecks, DynamoDBDocumentChecks):
    # One class of both (task records and documents) keeps the test ids of either.
    pass


class TestAbsentChecks:
    """A commit's absent keys on DynamoDB: one ``ConditionCheck`` each, classified from the
    cancellation itself (``ReturnValuesOnConditionCheckFailure=ALL_OLD``), as
    https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
    documents it. Run on moto and on DynamoDB Local."""

    def test_a_failed_check_is_classified_without_a_second_read(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [], [Doc("d/x", {"n": 1})])
        faulty = FaultyClient(bench.ddb)
        with pytest.raises(DocumentExists) as refused:
            bench.store(faulty).commit(sid, 1, [], [Doc("d/y", 2)], absent=["d/w", "d/x"])
        assert refused.value.found == {"d/x": {"n": 1}}
        assert [op for op, _ in faulty.calls] == ["transact_write_items"]  # no retry, no read
        ((_, request),) = faulty.calls
        checks = [a["ConditionCheck"] for a in request["TransactItems"] if "ConditionCheck" in a]
        assert [c["Key"]["sk"]["S"] for c in checks] == ["D#d/w", "D#d/x"]
        assert store.head(sid) == 1 and store.get_doc(sid, "d/y") is None

    def test_an_offloaded_document_comes_back_whole(self, bench: AwsBench) -> None:
        sid = unique("s")
        store = bench.store()
        big = {"pad": "x" * 500_000}
        store.commit(sid, 0, [], [Doc("d/big", big)])
        with pytest.raises(DocumentExists) as refused:
            store.commit(sid, 1, [record("t", sid)], absent=["d/big"])
        assert refused.value.found == {"d/big": big}

    def test_an_expired_document_counts_as_absent(self, bench: AwsBench) -> None:
        # An item past its expires_at reads as gone (get_doc); TTL deletes it later.
        sid = unique("s")
        store = bench.store()
        store.commit(sid, 0, [record("t", sid)])
        bench.ddb.put_item(
            TableName=bench.table,
            Item={
                PARTITION_KEY: {"S": sid},
                SORT_KEY: {"S": "D#d/old"},
                "body": {"S": "1"},
                EXPIRES_AT: {"N": str(int(time.time()) - 60)},
            },
        )
        assert store.get_doc(sid, "d/old") is None
        assert store.commit(sid, 1, [record("t", sid)], absent=["d/old"]) == 2

    def test_a_throttled_commit_with_checks_is_retried_then_lands(self, bench: AwsBench) -> None:
        sid = unique("s")
        throttled = FaultyClient(
            bench.ddb,
            plan={
                "transact_write_items": [
                    fail_before(client_error("ThrottlingException", "TransactWriteItems"))
                ]
            },
        )
        store = bench.store(throttled)
        assert store.commit(sid, 0, [record("t", sid)], absent=["d/a"]) == 1
        assert [op for op, _ in throttled.calls] == ["transact_write_items"] * 2
