"""The twin's configuration read from the synthesized CloudFormation template of a Bide stack,
and the runtime contract the deployed shape must keep (:func:`contract_problems`).

The worker is found from the template itself: the ``AWS::Lambda::EventSourceMapping`` whose
source is a FIFO queue, the function it invokes and the queue's dead-letter redrive policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...constants import DEFAULT_SAFETY_MARGIN_MS, ENV_SAFETY_MARGIN_MS
from .lambda_esm import MAX_FIFO_BATCH, FunctionConfig


@dataclass(frozen=True)
class QueueConfig:
    """The wake queue as deployed."""

    fifo: bool
    content_based_deduplication: bool
    deduplication_scope: str
    visibility_timeout: int
    max_receive_count: int | None

    def attributes(self, dead_letter_arn: str | None = None) -> dict[str, str]:
        """The queue's attributes as :meth:`~bide.testing.aws.sqs.SqsTwin.create_queue`
        takes them (a redrive policy only when ``dead_letter_arn`` is given)."""
        attributes = {
            "FifoQueue": str(self.fifo).lower(),
            "ContentBasedDeduplication": str(self.content_based_deduplication).lower(),
            "DeduplicationScope": self.deduplication_scope,
            "VisibilityTimeout": str(self.visibility_timeout),
        }
        if dead_letter_arn and self.max_receive_count is not None:
            attributes["RedrivePolicy"] = (
                f'{{"deadLetterTargetArn": "{dead_letter_arn}", '
                f'"maxReceiveCount": {self.max_receive_count}}}'
            )
        return attributes


@dataclass(frozen=True)
class TwinConfig:
    """What the twin needs to run a stack's worker: its wake queue and its function (with
    the event source mapping's settings)."""

    queue: QueueConfig
    function: FunctionConfig
    function_response_types: tuple[str, ...]

    @property
    def safety_margin_ms(self) -> int:
        """The worker's ``BIDE_SAFETY_MARGIN_MS`` (the default when unset)."""
        raw = self.function.environment.get(ENV_SAFETY_MARGIN_MS)
        return DEFAULT_SAFETY_MARGIN_MS if raw is None else int(raw)


class ContractBroken(AssertionError):
    """The stack breaks what the Bide runtime relies on; the message lists each problem."""


def twin_config(template: Mapping[str, Any]) -> TwinConfig:
    """Read the wake queue, the worker function and its event source mapping from a
    synthesized template (``Template.from_stack(stack).to_json()``). Raises ``ValueError``
    when the template has no SQS FIFO event source mapping."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    for mapping in resources.values():
        if mapping.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        props = mapping.get("Properties", {})
        queue_id = _target(props.get("EventSourceArn"))
        queue = resources.get(queue_id or "", {})
        if queue.get("Type") != "AWS::SQS::Queue":
            continue
        function = resources.get(_target(props.get("FunctionName")) or "", {})
        return _config(queue.get("Properties", {}), props, function.get("Properties", {}))
    raise ValueError("the template has no event source mapping from an SQS queue")


def _config(queue: Mapping[str, Any], esm: Mapping[str, Any], fn: Mapping[str, Any]) -> TwinConfig:
    redrive = queue.get("RedrivePolicy") or {}
    variables = (fn.get("Environment") or {}).get("Variables") or {}
    scaling = esm.get("ScalingConfig") or {}
    types = tuple(esm.get("FunctionResponseTypes") or ())
    return TwinConfig(
        queue=QueueConfig(
            fifo=_flag(queue.get("FifoQueue")),
            content_based_deduplication=_flag(queue.get("ContentBasedDeduplication")),
            # https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-sqs-queue.html
            # defaults: DeduplicationScope queue, VisibilityTimeout 30 seconds.
            deduplication_scope=str(queue.get("DeduplicationScope", "queue")),
            visibility_timeout=int(queue.get("VisibilityTimeout", 30)),
            max_receive_count=(
                int(redrive["maxReceiveCount"]) if "maxReceiveCount" in redrive else None
            ),
        ),
        function=FunctionConfig(
            # https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-lambda-function.html
            # default Timeout: 3 seconds.
            timeout=float(fn.get("Timeout", 3)),
            # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html :
            # BatchSize defaults to 10, MaximumBatchingWindowInSeconds to 0.
            batch_size=int(esm.get("BatchSize", 10)),
            report_batch_item_failures="ReportBatchItemFailures" in types,
            maximum_batching_window=float(esm.get("MaximumBatchingWindowInSeconds", 0)),
            maximum_concurrency=(
                int(scaling["MaximumConcurrency"]) if "MaximumConcurrency" in scaling else None
            ),
            environment={k: v for k, v in variables.items() if isinstance(v, str)},
            memory_mb=int(fn.get("MemorySize", 128)),
        ),
        function_response_types=types,
    )


def contract_problems(config: TwinConfig) -> list[str]:
    """What in the deployed shape breaks the Bide runtime's assumptions (empty: none)."""
    q, f = config.queue, config.function
    problems = []
    if not q.fifo:
        problems.append("the wake queue must be FIFO (one message group per session)")
    if not q.content_based_deduplication:
        # EventBridge Scheduler sends no deduplication id, and a FIFO send with neither an id
        # nor content-based deduplication fails (API_SendMessage.html, MessageDeduplicationId).
        problems.append("the wake queue needs ContentBasedDeduplication (Scheduler sends no id)")
    if q.visibility_timeout < f.timeout:
        # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
        problems.append(
            f"the wake queue's VisibilityTimeout ({q.visibility_timeout} s) is shorter than "
            f"the worker's Timeout ({f.timeout:g} s): a batch would be redelivered mid-run"
        )
    if not f.report_batch_item_failures:
        problems.append(
            "the event source mapping must report ReportBatchItemFailures: the worker answers "
            "batchItemFailures, which Lambda otherwise ignores (failed wakes deleted)"
        )
    if not 1 <= f.batch_size <= MAX_FIFO_BATCH:
        problems.append(f"BatchSize {f.batch_size}: 1 to 10 for a FIFO queue")
    if f.maximum_batching_window:
        problems.append("MaximumBatchingWindowInSeconds is not supported for FIFO queues")
    if q.max_receive_count is None:
        problems.append("the wake queue needs a dead-letter queue (RedrivePolicy)")
    if config.safety_margin_ms >= f.timeout * 1000:
        problems.append(
            f"{ENV_SAFETY_MARGIN_MS}={config.safety_margin_ms} leaves no time to run within "
            f"the worker's Timeout ({f.timeout:g} s)"
        )
    return problems


def check_contract(config: TwinConfig) -> None:
    """Raise :class:`ContractBroken` listing every problem of :func:`contract_problems`."""
    problems = contract_problems(config)
    if problems:
        raise ContractBroken("the stack breaks the Bide runtime contract: " + "; ".join(problems))


def _target(value: Any) -> str | None:
    """The logical id a ``Ref`` or ``Fn::GetAtt`` points at."""
    if isinstance(value, Mapping):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"
