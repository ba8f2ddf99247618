"""The store contract and the DynamoDB-specific checks, each run on two implementations of
DynamoDB: moto (in process, ``mock_aws``, with an S3 bucket for offload) and AWS DynamoDB Local,
a second and independent implementation, at ``$BIDE_DYNAMODB_LOCAL_ENDPOINT`` (those cases are
skipped with the reason when it is unset; CI sets it), with S3 offload on a moto server on
127.0.0.1. Test ids end in ``[moto]`` or ``[dynamodb_local]``."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite(
    "store_contract", "aws_fixtures", "dynamodb_checks", "dynamodb_doc_checks"
)

from aws_fixtures import AwsBench, aws_bench  # noqa: E402
from dynamodb_checks import DynamoDBAdapterChecks  # noqa: E402
from dynamodb_doc_checks import DynamoDBDocumentChecks  # noqa: E402
from store_contract import StoreContract  # noqa: E402

from bide.aws.dynamodb import DynamoDBStore  # noqa: E402

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
