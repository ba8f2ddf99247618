"""Shared pieces of the twin tests (``test_twin_*.py``): the deployed stack's configuration as
a small template literal (``test_twin_template.py`` checks it against the synthesized stack),
a DynamoDB store on moto through the twin, and a napper session to run on it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aws_fixtures import aws_client, fake_aws_environment, unique
from handler_fixtures import Probe, make_app

from bide import Harness
from bide.app import App
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.service.deps import Deps
from bide.testing.aws import AwsTwin, DynamoDBTwin, EventSourceMappingTwin, twin_config

# The wake queue, worker function and event source mapping as the Bide stack synthesizes them
# (only the properties the twin reads; test_twin_template.py proves they match).
STACK_TEMPLATE: dict[str, Any] = {
    "Resources": {
        "DeadLetters": {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True}},
        "WakeQueue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "ContentBasedDeduplication": True,
                "DeduplicationScope": "messageGroup",
                "FifoQueue": True,
                "FifoThroughputLimit": "perMessageGroupId",
                "RedrivePolicy": {
                    "deadLetterTargetArn": {"Fn::GetAtt": ["DeadLetters", "Arn"]},
                    "maxReceiveCount": 5,
                },
                "VisibilityTimeout": 1800,
            },
        },
        "Worker": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Timeout": 300,
                "MemorySize": 1024,
                "Environment": {"Variables": {"BIDE_SAFETY_MARGIN_MS": "20000"}},
            },
        },
        "WorkerMapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "BatchSize": 10,
                "EventSourceArn": {"Fn::GetAtt": ["WakeQueue", "Arn"]},
                "FunctionName": {"Ref": "Worker"},
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": 10},
            },
        },
    }
}
STACK_CONFIG = twin_config(STACK_TEMPLATE)


@dataclass
class TwinBench:
    """A twin, a DynamoDB store on moto through it, the worker's Deps and its mapping."""

    twin: AwsTwin
    ddb: DynamoDBTwin
    store: DynamoDBStore
    deps: Deps
    worker: EventSourceMappingTwin
    probe: Probe


@contextlib.contextmanager
def twin_bench(
    *, seed: int = 1, app: App | None = None, config: Any = None, **twin_options: Any
) -> Iterator[TwinBench]:
    """A :class:`TwinBench` inside moto's ``mock_aws`` (DynamoDB only)."""
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        twin = AwsTwin(config or STACK_CONFIG, seed=seed, **twin_options)
        raw = aws_client("dynamodb")
        table = unique("bide")
        create_table(raw, table)
        ddb = twin.dynamodb(raw)
        store = DynamoDBStore(table, client=ddb, sleep=twin.clock.advance)
        probe = Probe()
        deps = twin.deps(store, app or make_app(probe))
        yield TwinBench(twin, ddb, store, deps, twin.worker(deps), probe)


async def start_napper(bench: TwinBench, rounds: list[dict[str, Any]], session_id: str) -> str:
    """Create a napper task in a fresh session and wake it (as the API would)."""
    kind = next(k for k in bench.deps.app.tasks if k.name == "test.napper")
    harness = Harness(
        bench.deps.store,
        session_id,
        bench.deps.app.task_kinds(),
        clock=bench.twin.clock,
        ids=bench.deps.ids,
        services=bench.deps.harness_services(),
    )
    await harness.attach()
    task_id = await harness.create_task(kind, {"rounds": rounds})
    await harness.close()
    bench.deps.queue.wake(session_id, "submit")
    return task_id
