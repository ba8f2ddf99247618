"""The twin's configuration comes from the synthesized Bide stack, and the stack keeps the
runtime contract: a change that drops ReportBatchItemFailures, content-based deduplication,
FIFO, the dead-letter queue, or shortens the visibility timeout below the worker's timeout
fails here. Synthesis is slow, so the template is built once per module."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from twin_fixtures import STACK_CONFIG, start_napper, twin_bench

from bide import Terminal
from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT
from bide.engine.clock import HOUR
from bide.testing.aws import ContractBroken, check_contract, contract_problems, twin_config
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
    stack = BideStack(app, "Bide", app_paths=[ROOT / "examples"])
    found: dict[str, Any] = Template.from_stack(stack).to_json()
    return found


def _of_type(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def _wake_queue(template: dict[str, Any]) -> dict[str, Any]:
    return next(q for q in _of_type(template, "AWS::SQS::Queue") if "RedrivePolicy" in q)


def _mapping(template: dict[str, Any]) -> dict[str, Any]:
    return _of_type(template, "AWS::Lambda::EventSourceMapping")[0]


def _worker(template: dict[str, Any]) -> dict[str, Any]:
    ref = _mapping(template)["FunctionName"]["Ref"]
    found: dict[str, Any] = template["Resources"][ref]["Properties"]
    return found


def test_the_synthesized_stack_configures_the_twin_as_the_fixtures_assume(
    template: dict[str, Any],
) -> None:
    config = twin_config(template)
    assert config.queue == STACK_CONFIG.queue
    assert config.queue.fifo and config.queue.content_based_deduplication
    assert config.queue.deduplication_scope == "messageGroup"
    f, expected = config.function, STACK_CONFIG.function
    assert (f.timeout, f.batch_size, f.maximum_batching_window, f.maximum_concurrency) == (
        expected.timeout,
        expected.batch_size,
        expected.maximum_batching_window,
        expected.maximum_concurrency,
    )
    assert config.function_response_types == ("ReportBatchItemFailures",)
    assert config.safety_margin_ms == STACK_CONFIG.safety_margin_ms == 20_000
    assert f.environment["BIDE_TRACING"] == "0"
    assert contract_problems(config) == []


Mutation = Callable[[dict[str, Any]], None]
BREAKS: dict[str, tuple[Mutation, str]] = {
    "no ReportBatchItemFailures": (
        lambda t: _mapping(t).pop("FunctionResponseTypes"),
        "ReportBatchItemFailures",
    ),
    "content-based deduplication off": (
        lambda t: _wake_queue(t).update(ContentBasedDeduplication=False),
        "ContentBasedDeduplication",
    ),
    "visibility timeout below the function timeout": (
        lambda t: _wake_queue(t).update(VisibilityTimeout=120),
        "VisibilityTimeout",
    ),
    "not FIFO": (lambda t: _wake_queue(t).pop("FifoQueue"), "FIFO"),
    "no dead-letter queue": (lambda t: _wake_queue(t).pop("RedrivePolicy"), "dead-letter"),
    "a batching window": (
        lambda t: _mapping(t).update(MaximumBatchingWindowInSeconds=5),
        "MaximumBatchingWindowInSeconds",
    ),
    "batch size above 10": (lambda t: _mapping(t).update(BatchSize=50), "BatchSize"),
    "a safety margin longer than the timeout": (
        lambda t: _worker(t)["Environment"]["Variables"].update(BIDE_SAFETY_MARGIN_MS="400000"),
        "BIDE_SAFETY_MARGIN_MS",
    ),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_stack_change_that_breaks_the_runtime_contract_fails(
    template: dict[str, Any], name: str
) -> None:
    mutate, mentioned = BREAKS[name]
    broken = copy.deepcopy(template)
    mutate(broken)
    with pytest.raises(ContractBroken, match=mentioned):
        check_contract(twin_config(broken))


def test_the_twin_built_from_the_synthesized_stack_runs_the_real_worker(
    template: dict[str, Any],
) -> None:
    logging.disable(logging.INFO)
    try:
        with twin_bench(seed=2, config=twin_config(template)) as bench:

            async def scenario() -> str:
                bench.worker.start()
                task_id = await start_napper(bench, [{"after": HOUR}], "s-1")
                await bench.twin.clock.sleep(2 * HOUR)
                return task_id

            task_id = bench.twin.clock.run(scenario())
            task = bench.store.get_task("s-1", task_id)
            assert task is not None and isinstance(task.state, Terminal)
            assert bench.worker.config.timeout == 300
            assert len(bench.worker.invocations) == 2
    finally:
        logging.disable(logging.NOTSET)
