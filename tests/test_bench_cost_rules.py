"""The metering rules ``bench/bench_cost.py`` prices by: AWS's documented units, the stack's
memory sizes as deployed, and the DynamoDB meter (request units, local index writes) on moto.

Rules checked (AWS documentation): a write request unit per 1 KB of the larger of the item
before and after, two inside a transaction, and a local secondary index write per KB of its
entry, two when the index key changes
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/LSI.html#LSI.ThroughputConsiderations.Writes);
a read is billed by the whole item's size, whatever a projection returns
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ProjectionExpressions.html);
SQS bills a request per 64 KB chunk; Lambda bills per 1 ms and gives a function one vCPU at
1,769 MB (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import cost_model as cm
from cost_meter import Meter, Round

from bide.aws.table import LIVE_INDEX_KEY, create_table


def test_billing_units_follow_the_documented_rules() -> None:
    assert cm.write_units(1) == 1 and cm.write_units(1024) == 1 and cm.write_units(1025) == 2
    assert cm.read_units(4096) == 1 and cm.read_units(4097) == 2
    assert cm.sqs_chunks(0) == 1 and cm.sqs_chunks(65_536) == 1 and cm.sqs_chunks(65_537) == 2
    # Below 1,769 MB a function has that share of a core: 10 ms of one core's CPU at 512 MB
    # takes 10 * 1769 / 512 = 34.55 ms, billed as 35.
    assert cm.billed_ms(0.010, 512) == 35
    assert cm.billed_ms(0.010, 1769) == 10 and cm.billed_ms(0.010, 3008) == 10
    assert cm.billed_ms(0.0000001, 1024) == 1  # at least 1 ms
    # 1,000 ms at 1,024 MB is one GB-second.
    assert cm.lambda_usd(1, 1000, 1024) == pytest.approx(
        cm.PRICES["lambda_request"].usd + cm.PRICES["lambda_arm_gb_s"].usd
    )


def test_memory_sizes_and_access_log_are_the_stacks() -> None:
    import inspect

    from bide.cdk.api import ACCESS_LOG_FORMAT
    from bide.cdk.service import BideService

    defaults = inspect.signature(BideService.__init__).parameters
    assert cm.stack_memory_mb() == {
        "worker": defaults["worker_memory_size"].default,
        "signal": defaults["handler_memory_size"].default,
        "api": defaults["handler_memory_size"].default,
    }
    import json

    assert cm.access_log_format() == json.loads(ACCESS_LOG_FORMAT)


def test_platform_records_follow_the_stacks_logging_config() -> None:
    """Lambda's own records for a successful invocation: START/END/REPORT in Text format
    whatever the level (filtering needs JSON); in JSON, the records at or above the system
    level, start and report being INFO and runtimeDone DEBUG
    (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html)."""
    import json

    from bide.cdk.functions import LOGGING_CONFIG

    assert cm.lambda_logging() == LOGGING_CONFIG
    rid = "8f507cfc-0000-4697-b07a-ac58fc914c95"

    def records(config: dict[str, str]) -> list[str]:
        lines = cm.platform_log(config, rid, 35, 512).splitlines()
        return [json.loads(line)["type"] for line in lines]

    text = cm.platform_log({"LogFormat": "Text"}, rid, 35, 512)
    assert [line.split(" ")[0] for line in text.splitlines()] == ["START", "END", "REPORT"]
    assert "Billed Duration: 35 ms" in text and "Memory Size: 512 MB" in text
    assert cm.platform_log({"LogFormat": "Text", "SystemLogLevel": "WARN"}, rid, 35, 512) == text
    every = ["platform.start", "platform.runtimeDone", "platform.report"]
    assert records({"LogFormat": "JSON", "SystemLogLevel": "DEBUG"}) == every
    assert records({"LogFormat": "JSON"}) == ["platform.start", "platform.report"]  # INFO
    assert records({"LogFormat": "JSON", "SystemLogLevel": "WARN"}) == []
    with pytest.raises(ValueError, match="SystemLogLevel 'ERROR'"):
        cm.platform_log({"LogFormat": "JSON", "SystemLogLevel": "ERROR"}, rid, 35, 512)
    # The stack's own: nothing for an invocation that succeeds.
    assert cm.platform_log(cm.lambda_logging(), rid, 35, 512) == ""


@pytest.fixture
def table() -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "t")
        yield client


def _item(sk: str, size: int, live: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": "s"}, "sk": {"S": sk}}
    if live is not None:
        item[LIVE_INDEX_KEY] = {"S": live}
    pad = size - sum(len(k) + len(v["S"]) for k, v in item.items()) - len("body")
    item["body"] = {"S": "x" * pad}
    return item


def _metered(table: Any, call: Any) -> Round:
    import boto3

    session = boto3.Session(region_name="us-east-1")
    meter = Meter(table)
    meter.install(session.events)
    client = session.client("dynamodb")
    meter.round = Round()
    call(client)
    return meter.round


def test_transactional_put_and_its_index_entry(table: Any) -> None:
    item = _item("T#a", 1500, "L#a")  # 1.5 KB: 2 units, twice in a transaction
    r = _metered(
        table,
        lambda c: c.transact_write_items(TransactItems=[{"Put": {"TableName": "t", "Item": item}}]),
    )
    assert r.requests["dynamodb:TransactWriteItems"] == 1
    assert r.wru == 4 and r.wru_index == 2


def test_plain_put_without_index_key_costs_no_index_write(table: Any) -> None:
    item = _item("D#a", 500, None)
    r = _metered(table, lambda c: c.put_item(TableName="t", Item=item))
    assert r.wru == 1 and r.wru_index == 0


def test_update_is_priced_on_the_larger_image_and_a_key_change_twice(table: Any) -> None:
    table.put_item(TableName="t", Item=_item("T#b", 3000, "L#b"))  # 3 KB before
    key = {"pk": {"S": "s"}, "sk": {"S": "T#b"}}
    r = _metered(
        table,
        lambda c: c.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="SET #l = :l, body = :b",
            ExpressionAttributeNames={"#l": LIVE_INDEX_KEY},
            ExpressionAttributeValues={":l": {"S": "L#c"}, ":b": {"S": "y"}},
        ),
    )
    assert r.wru == 3  # the item before (3 KB), not after (a few bytes)
    assert r.wru_index == 3 + 1  # the old entry removed (3 KB) and the new one put (1 KB)


def test_removing_the_index_key_removes_the_entry(table: Any) -> None:
    table.put_item(TableName="t", Item=_item("T#d", 900, "L#d"))
    key = {"pk": {"S": "s"}, "sk": {"S": "T#d"}}
    r = _metered(
        table,
        lambda c: c.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="REMOVE #l",
            ExpressionAttributeNames={"#l": LIVE_INDEX_KEY},
        ),
    )
    assert r.wru == 1 and r.wru_index == 1


def test_a_projected_read_is_billed_by_the_whole_item(table: Any) -> None:
    table.put_item(TableName="t", Item=_item("HEAD", 9000, None))  # 9 KB: 3 units of 4 KB
    key = {"pk": {"S": "s"}, "sk": {"S": "HEAD"}}
    projected = {"ProjectionExpression": "pk", "ConsistentRead": True}
    plain = _metered(table, lambda c: c.get_item(TableName="t", Key=key, ConsistentRead=True))
    one = _metered(table, lambda c: c.get_item(TableName="t", Key=key, **projected))
    both = _metered(
        table,
        lambda c: c.transact_get_items(
            TransactItems=[
                {"Get": {"TableName": "t", "Key": key, "ProjectionExpression": "pk"}},
                {"Get": {"TableName": "t", "Key": {"pk": {"S": "s"}, "sk": {"S": "none"}}}},
            ]
        ),
    )
    assert plain.rru == 3 and one.rru == 3
    # Transactional: twice; reading an item that is not there still costs the minimum unit.
    assert both.rru == 2 * 3 + 2 * 1


def test_the_floors_dynamodb_lines_are_what_the_meter_charges(table: Any) -> None:
    """Each DynamoDB line of the floor (bench/cost_floor.py) is priced at the units the meter
    charges for the request it stands for, on 1 KB items outside any index."""
    import cost_floor
    import cost_report

    for i, sk in enumerate(("HEAD", "T#a", "D#k")):
        table.put_item(TableName="t", Item=_item(sk, 1000 - i, None))
    key = {"pk": {"S": "s"}, "sk": {"S": "HEAD"}}
    requests = {
        "the signal's commit: one 1 KB item": lambda c: c.update_item(
            TableName="t", Key=key, UpdateExpression="SET body = :b",
            ExpressionAttributeValues={":b": {"S": "y" * 900}},
        ),
        "the park's commit: one 1 KB item": lambda c: c.update_item(
            TableName="t", Key=key, UpdateExpression="SET body = :b",
            ExpressionAttributeValues={":b": {"S": "z" * 900}},
        ),
        "the consumed key's record: its own item": lambda c: c.put_item(
            TableName="t", Item=_item("D#c", 1000, None)
        ),
        "the next key's check: one GetItem": lambda c: c.get_item(
            TableName="t", Key={"pk": {"S": "s"}, "sk": {"S": "D#k"}}, ConsistentRead=True
        ),
    }  # fmt: skip
    lines = [line for line in cost_floor.floor_lines() if line.price.startswith("dynamodb")]
    assert sorted(line.why for line in lines) == sorted(requests)
    for line in lines:
        r = _metered(table, requests[line.why])
        metered = r.wru if line.price == "dynamodb_wru" else r.rru
        assert (metered, r.wru_index) == (line.units, 0), line.why
    assert {line.component for line in cost_floor.floor_lines()} <= set(cost_report.COMPONENTS)


def test_the_floor_shares_only_the_batched_requests() -> None:
    import cost_floor

    single, batched = cost_floor.floor_usd(1), cost_floor.floor_usd(10)
    assert single["API Gateway"] == batched["API Gateway"] == cm.PRICES["apigw_http"].usd
    for component in ("DynamoDB writes", "DynamoDB reads"):
        assert single[component] == batched[component]
    assert batched["Lambda requests"] == pytest.approx(1.1 * cm.PRICES["lambda_request"].usd)
    assert batched["SQS"] == pytest.approx(1.2 * cm.PRICES["sqs_fifo"].usd)
    assert single["SQS"] == pytest.approx(3 * cm.PRICES["sqs_fifo"].usd)
    with pytest.raises(ValueError, match="batch"):
        cost_floor.floor_usd(0)
    assert {line.price for line in cost_floor.floor_lines(10)} == set(cost_floor.UNIT_NAMES)


def test_a_column_under_the_floor_is_refused() -> None:
    import cost_floor
    import cost_report

    quiet, busy = sum(cost_floor.floor_usd(1).values()), sum(cost_floor.floor_usd(10).values())
    cost_report.check_above_floor([("iam", 3), ("busy", 3)], [quiet, busy])
    with pytest.raises(RuntimeError, match="iam 3"):
        cost_report.check_above_floor([("iam", 3)], [quiet * 0.99])
    with pytest.raises(RuntimeError, match="busy 3"):
        cost_report.check_above_floor([("busy", 3)], [busy * 0.99])


def test_the_verdict_reads_the_goal_columns_and_the_floor(capsys: Any) -> None:
    import cost_floor
    import cost_report

    quiet = sum(cost_floor.floor_usd(1).values())
    cols = [("iam", 3), ("iam", 1000), ("busy", 3)]
    # create_callback at 3 and 1,000 waits such that the floor is over the line at 3 only.
    dtotals = [quiet / 0.6, quiet / 0.4]
    cost_report.print_verdict(cols, [1.5, 0.45, 0.3], dtotals, (3, 1000))
    out = capsys.readouterr().out
    assert "NOT MET, 0.45-1.50x" in out  # the busy column is not the goal's
    assert "floor, quiet queue: 0.40-0.60x; under the line at 1,000 " in out
    cost_report.print_verdict(cols, [0.5, 0.45, 0.9], dtotals, (3, 1000))
    assert ": MET, 0.45-0.50x" in capsys.readouterr().out


def test_the_request_benches_estimate_counts_plain_writes(table: Any) -> None:
    """bench_aws_requests' estimate (the request benches' WRU column): a plain write is 1 WRU
    per KB of the larger of the item before and after, as the cost meter prices it."""
    import boto3
    from bench_aws_requests import Meter as Estimate

    table.put_item(TableName="t", Item=_item("HEAD", 3000, None))  # 3 KB before
    key = {"pk": {"S": "s"}, "sk": {"S": "HEAD"}}
    estimate = Estimate(table)
    client = estimate.hook(boto3.Session(region_name="us-east-1").client("dynamodb"), "bide")
    with estimate.counting() as tally:
        client.update_item(
            TableName="t", Key=key, UpdateExpression="SET body = :b",
            ExpressionAttributeValues={":b": {"S": "y"}},
        )  # fmt: skip
        client.put_item(TableName="t", Item=_item("D#a", 1500, None))  # new, 1.5 KB
    assert tally.wru == 3 + 2
    metered = _metered(table, lambda c: c.put_item(TableName="t", Item=_item("D#b", 1500, None)))
    assert metered.wru == 2  # the cost meter agrees on the plain put
