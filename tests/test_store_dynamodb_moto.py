"""The store contract and the DynamoDB-specific checks on moto (in process, ``mock_aws``),
with an S3 bucket for offload."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("store_contract", "aws_fixtures", "dynamodb_checks")

from aws_fixtures import AwsBench, moto_bench  # noqa: E402
from dynamodb_checks import DynamoDBAdapterChecks  # noqa: E402
from store_contract import StoreContract  # noqa: E402

from bide.aws.dynamodb import DynamoDBStore  # noqa: E402

__all__ = ["moto_bench"]  # a fixture, imported for pytest to find


@pytest.fixture
def bench(moto_bench: AwsBench) -> AwsBench:
    moto_bench.sleeps.clear()
    return moto_bench


class TestDynamoDBMotoContract(StoreContract):
    @pytest.fixture
    def store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(real_sleep=True)

    @pytest.fixture
    def other_store(self, bench: AwsBench) -> DynamoDBStore:
        return bench.store(bench.other_ddb, real_sleep=True)


class TestDynamoDBMotoAdapter(DynamoDBAdapterChecks):
    pass
