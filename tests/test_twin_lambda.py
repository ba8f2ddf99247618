"""Lambda behind the SQS FIFO event source mapping, on the twin: batching, one batch in flight
per message group, partial batch responses, the function timeout and the context's clock.
(moto runs a mapped function on every send with none of these rules: no moto comparison.)"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from bide.testing.aws import (
    EventSourceMappingTwin,
    FunctionConfig,
    LambdaContext,
    SimClock,
    SqsTwin,
)

VISIBILITY = 120
CONFIG = FunctionConfig(timeout=60, batch_size=3)


def queue(visibility: int = VISIBILITY) -> tuple[SqsTwin, str]:
    sqs = SqsTwin(SimClock(), random.Random(2))
    attributes = {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "true",
        "VisibilityTimeout": str(visibility),
    }
    return sqs, sqs.create_queue(QueueName="q.fifo", Attributes=attributes)["QueueUrl"]


def send(sqs: SqsTwin, url: str, *pairs: tuple[str, str]) -> None:
    for body, group in pairs:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)


def run(sqs: SqsTwin, mapping: EventSourceMappingTwin, seconds: float) -> None:
    async def main() -> None:
        mapping.start()
        await sqs.clock.sleep(seconds)

    sqs.clock.run(main())


def bodies(event: dict[str, Any]) -> list[str]:
    return [r["body"] for r in event["Records"]]


def test_batches_of_at_most_batch_size_and_a_batch_may_mix_groups() -> None:
    sqs, url = queue()
    send(sqs, url, *[(f"m{i}", f"g{i % 4}") for i in range(8)])
    seen: list[list[str]] = []

    async def handler(event: dict[str, Any], context: LambdaContext) -> None:
        seen.append(bodies(event))

    run(sqs, EventSourceMappingTwin(sqs.clock, sqs, url, handler, CONFIG), 10)
    assert all(len(batch) <= 3 for batch in seen)
    assert sorted(b for batch in seen for b in batch) == sorted(f"m{i}" for i in range(8))
    assert any(len({int(b[1:]) % 4 for b in batch}) > 1 for batch in seen)
    assert sqs.bodies(url) == []  # all deleted


def test_one_batch_in_flight_per_message_group() -> None:
    sqs, url = queue()
    send(sqs, url, *[(f"{g}{i}", g) for i in range(4) for g in "ABC"])
    running: set[str] = set()
    order: dict[str, list[str]] = {"A": [], "B": [], "C": []}
    overlaps: list[set[str]] = []

    async def handler(event: dict[str, Any], context: LambdaContext) -> None:
        groups = {r["attributes"]["MessageGroupId"] for r in event["Records"]}
        assert not groups & running, f"group {groups & running} already in flight"
        running.update(groups)
        overlaps.append(set(running))
        for record in event["Records"]:
            order[record["attributes"]["MessageGroupId"]].append(record["body"])
        await asyncio.sleep(5)  # simulated: other batches start meanwhile
        running.difference_update(groups)

    run(
        sqs, EventSourceMappingTwin(sqs.clock, sqs, url, handler, replace(CONFIG, batch_size=2)), 60
    )
    assert order == {g: [f"{g}{i}" for i in range(4)] for g in "ABC"}
    assert max(len(s) for s in overlaps) > 1  # concurrency across groups happened


def test_report_batch_item_failures_returns_only_the_failed_after_the_visibility_timeout() -> None:
    sqs, url = queue()
    send(sqs, url, ("ok", "A"), ("bad", "B"))
    calls: list[tuple[float, list[str]]] = []

    async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        calls.append((sqs.clock.now(), bodies(event)))
        failed = [r["messageId"] for r in event["Records"] if r["body"] == "bad"]
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failed[:1]]}

    mapping = EventSourceMappingTwin(sqs.clock, sqs, url, handler, CONFIG)
    start = sqs.clock.now()
    run(sqs, mapping, VISIBILITY * 2 + 1)
    assert calls[0][1] == ["ok", "bad"]
    assert [round(t - start) for t, b in calls] == [0, VISIBILITY, 2 * VISIBILITY]
    assert all(b == ["bad"] for _, b in calls[1:])
    assert mapping.invocations[0].outcome == "partial"


def test_an_exception_fails_the_whole_batch() -> None:
    sqs, url = queue()
    send(sqs, url, ("a", "A"), ("b", "B"))
    calls: list[float] = []

    async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        calls.append(sqs.clock.now())
        if len(calls) == 1:
            raise RuntimeError("boom")
        return {"batchItemFailures": []}

    mapping = EventSourceMappingTwin(sqs.clock, sqs, url, handler, CONFIG)
    run(sqs, mapping, VISIBILITY + 1)
    assert [i.outcome for i in mapping.invocations] == ["error", "success"]
    assert mapping.invocations[0].deleted == []
    assert calls[1] - calls[0] == pytest.approx(VISIBILITY)
    assert sqs.bodies(url) == []


@pytest.mark.parametrize(
    "response",
    [
        {"batchItemFailures": [{"itemIdentifier": "not-in-the-batch"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"id": "bad key name"}]},
        "not a response",
    ],
)
def test_an_invalid_partial_response_fails_the_whole_batch(response: Any) -> None:
    sqs, url = queue()
    send(sqs, url, ("a", "A"), ("b", "B"))

    async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        return response

    mapping = EventSourceMappingTwin(sqs.clock, sqs, url, handler, CONFIG)
    run(sqs, mapping, 1)
    assert [i.outcome for i in mapping.invocations] == ["invalid-response"]
    assert sqs.bodies(url) == ["a", "b"]


def test_without_report_batch_item_failures_reported_failures_are_deleted() -> None:
    sqs, url = queue()
    send(sqs, url, ("a", "A"))

    async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        return {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}

    config = replace(CONFIG, report_batch_item_failures=False)
    run(sqs, EventSourceMappingTwin(sqs.clock, sqs, url, handler, config), VISIBILITY * 2)
    assert sqs.bodies(url) == []  # the failure was lost


def test_the_timeout_cuts_the_handler_where_it_awaits_and_the_batch_comes_back() -> None:
    sqs, url = queue()
    send(sqs, url, ("slow", "A"))
    cut: list[float] = []
    remaining: list[int] = []

    async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        remaining.append(context.get_remaining_time_in_millis())
        await asyncio.sleep(10)
        remaining.append(context.get_remaining_time_in_millis())
        if len(remaining) > 2:
            return None  # the second time, it finishes in time
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cut.append(sqs.clock.now())
            raise
        return None

    mapping = EventSourceMappingTwin(sqs.clock, sqs, url, handler, CONFIG)
    start = sqs.clock.now()
    run(sqs, mapping, VISIBILITY + 30)
    assert remaining[:2] == [60_000, 50_000]
    assert cut == [start + 60]
    assert [i.outcome for i in mapping.invocations] == ["timeout", "success"]
    assert mapping.invocations[1].started == pytest.approx(start + VISIBILITY)
    assert sqs.bodies(url) == []


def test_the_mapping_refuses_what_lambda_refuses() -> None:
    sqs, url = queue(visibility=30)

    async def handler(event: dict[str, Any], context: LambdaContext) -> None:
        return None

    bad = [
        replace(CONFIG, timeout=60),  # visibility 30 < timeout 60
        replace(CONFIG, timeout=10, batch_size=11),
        replace(CONFIG, timeout=10, maximum_batching_window=5),
        replace(CONFIG, timeout=10, maximum_concurrency=1),
    ]
    for config in bad:
        with pytest.raises(ValueError):
            EventSourceMappingTwin(sqs.clock, sqs, url, handler, config)
