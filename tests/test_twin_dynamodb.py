"""The DynamoDB twin around a real client: ClientRequestToken idempotency (which moto ignores)
and seeded throttling and transaction conflicts (which moto never produces). Runs on moto, and
also on DynamoDB Local when ``BIDE_DYNAMODB_LOCAL_ENDPOINT`` names one."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fixtures import LOCAL_ENDPOINT_VAR, aws_client, fake_aws_environment, unique
from botocore.exceptions import ClientError

from bide.aws.retry import is_transient
from bide.testing.aws import DynamoDBTwin, SimClock

BACKENDS = ["moto"] + (["dynamodb-local"] if os.environ.get(LOCAL_ENDPOINT_VAR) else [])


@contextlib.contextmanager
def raw_client(backend: str) -> Iterator[tuple[Any, str]]:
    """A real DynamoDB client and a fresh table with a numeric counter item."""
    from moto import mock_aws

    with contextlib.ExitStack() as stack:
        if backend == "moto":
            stack.enter_context(fake_aws_environment())
            stack.enter_context(mock_aws())
            client = aws_client("dynamodb")
        else:
            client = aws_client("dynamodb", os.environ[LOCAL_ENDPOINT_VAR])
        table = unique("twin")
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client.put_item(TableName=table, Item={"pk": {"S": "c"}, "n": {"N": "0"}})
        yield client, table


def add(table: str, amount: int = 1) -> list[dict[str, Any]]:
    """One transaction adding ``amount`` to the counter and writing a second item."""
    return [
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"S": "c"}},
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": str(amount)}},
            }
        },
        {"Put": {"TableName": table, "Item": {"pk": {"S": "other"}}}},
    ]


def counter(client: Any, table: str) -> int:
    item = client.get_item(TableName=table, Key={"pk": {"S": "c"}}, ConsistentRead=True)
    return int(item["Item"]["n"]["N"])


def twin(client: Any, **rates: float) -> DynamoDBTwin:
    return DynamoDBTwin(client, SimClock(), random.Random(11), **rates)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_resent_transaction_with_its_token_applies_once_where_moto_applies_it_twice(
    backend: str,
) -> None:
    with raw_client(backend) as (client, table):
        ddb = twin(client)
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        assert counter(client, table) == 1
        if backend == "moto":
            client.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-2")
            client.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-2")
            assert counter(client, table) == 3  # moto: the resend applied again


def test_a_reused_token_with_other_parameters_is_a_mismatch_where_moto_applies_it() -> None:
    with raw_client("moto") as (client, table):
        ddb = twin(client)
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        with pytest.raises(ClientError) as exc:
            ddb.transact_write_items(TransactItems=add(table, 5), ClientRequestToken="tok-1")
        assert exc.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
        assert counter(client, table) == 1
        client.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-2")
        client.transact_write_items(TransactItems=add(table, 5), ClientRequestToken="tok-2")
        assert counter(client, table) == 7  # moto: no mismatch, both applied


def test_the_token_is_forgotten_after_10_minutes() -> None:
    with raw_client("moto") as (client, table):
        ddb = twin(client)
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        ddb.clock.advance(599)
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        assert counter(client, table) == 1
        ddb.clock.advance(1)
        ddb.transact_write_items(TransactItems=add(table), ClientRequestToken="tok-1")
        assert counter(client, table) == 2  # a new request now


def test_injected_throttles_apply_nothing_and_are_transient() -> None:
    with raw_client("moto") as (client, table):
        ddb = twin(client, throttle_rate=1.0)
        codes = set()
        for _ in range(20):
            with pytest.raises(ClientError) as exc:
                ddb.transact_write_items(TransactItems=add(table))
            codes.add(exc.value.response["Error"]["Code"])
            assert is_transient(exc.value)
            with pytest.raises(ClientError):
                ddb.get_item(TableName=table, Key={"pk": {"S": "c"}})
        assert codes == {"ProvisionedThroughputExceededException", "ThrottlingException"}
        assert counter(client, table) == 0
        ddb.throttle_rate = 0.0
        assert ddb.describe_table(TableName=table)["Table"]["TableName"] == table


def test_an_injected_conflict_is_shaped_as_aws_cancels_a_transaction() -> None:
    with raw_client("moto") as (client, table):
        ddb = twin(client, conflict_rate=1.0)
        with pytest.raises(ClientError) as exc:
            ddb.transact_write_items(TransactItems=add(table))
        error = exc.value.response
        assert error["Error"]["Code"] == "TransactionCanceledException"
        reasons = [r["Code"] for r in error["CancellationReasons"]]
        assert len(reasons) == 2 and sorted(reasons) == ["None", "TransactionConflict"]
        assert f"[{', '.join(reasons)}]" in error["Error"]["Message"]
        assert is_transient(exc.value)
        assert counter(client, table) == 0


def test_faults_follow_the_seed() -> None:
    def pattern(seed: int) -> list[str]:
        with raw_client("moto") as (client, table):
            ddb = DynamoDBTwin(
                client, SimClock(), random.Random(seed), throttle_rate=0.3, conflict_rate=0.3
            )
            seen = []
            for _ in range(30):
                try:
                    ddb.transact_write_items(TransactItems=add(table))
                    seen.append("ok")
                except ClientError as exc:
                    seen.append(exc.response["Error"]["Code"])
            return seen

    assert pattern(3) == pattern(3)
    assert pattern(3) != pattern(4)
