"""The store contract and the DynamoDB-specific checks on AWS DynamoDB Local, a second and
independent implementation of DynamoDB, at ``$BIDE_DYNAMODB_LOCAL_ENDPOINT`` (skipped with the
reason when unset; CI sets it). S3 offload goes to a moto server on 127.0.0.1."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("store_contract", "aws_fixtures", "dynamodb_checks")

from aws_fixtures import AwsBench, local_bench  # noqa: E402
from dynamodb_checks import DynamoDBAdapterChecks  # noqa: E402
from store_contract import StoreContract  # noqa: E402

from bide.aws.dynamodb import DynamoDBStore  # noqa: E402

__all__ = ["local_bench"]  # a fixture, imported for pytest to find


@pytest.fixture
def bench(local_bench: AwsBench) -> AwsBench:
    local_bench.sleeps.clear()
    return local_bench


class TestDynamoDBLocalContract(StoreContract):
    @pytest.fixture
    def store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(real_sleep=True)

    @pytest.fixture
    def other_store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(bench.other_ddb, real_sleep=True)


class TestDynamoDBLocalAdapter(DynamoDBAdapterChecks):
    pass
