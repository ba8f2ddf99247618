"""A Lambda function behind an SQS FIFO event source mapping, on simulated time:
:class:`EventSourceMappingTwin` polls a :class:`~bide.testing.aws.sqs.SqsTwin` queue and invokes
an async handler ``handler(event, context)`` the way Lambda does.

moto's SQS-to-Lambda mapping runs the function in a container on every send and has no
batching, visibility or partial failure rules; the twin models them (tests in
``tests/test_twin_lambda.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .clock import SimClock
from .errors import TwinUnsupported
from .sqs import ACCOUNT, SqsTwin

Handler = Callable[[dict[str, Any], "LambdaContext"], Awaitable[Any]]
Outcome = Literal["success", "partial", "error", "timeout", "invalid-response"]

# https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html : BatchSize is at
# most 10 for FIFO queues, and "Batching window is not supported for FIFO queues".
MAX_FIFO_BATCH = 10


@dataclass(frozen=True)
class FunctionConfig:
    """The function and its event source mapping, as deployed (see
    :func:`~bide.testing.aws.template.twin_config`)."""

    timeout: float = 60.0
    batch_size: int = 10
    report_batch_item_failures: bool = True
    maximum_batching_window: float = 0.0
    maximum_concurrency: int | None = None
    environment: dict[str, str] = field(default_factory=dict)
    function_name: str = "bide-worker"
    memory_mb: int = 512


@dataclass
class InvocationRecord:
    """One invocation: when, which messages, how it ended, which messages were deleted."""

    started: float
    ended: float
    message_ids: list[str]
    outcome: Outcome
    deleted: list[str]
    error: str | None = None


class LambdaContext:
    """The parts of Lambda's context object handlers read; the remaining time follows the
    simulated clock."""

    def __init__(self, clock: SimClock, deadline: float, config: FunctionConfig, n: int) -> None:
        self._clock = clock
        self._deadline = deadline
        self.function_name = config.function_name
        self.memory_limit_in_mb = config.memory_mb
        arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{config.function_name}"
        self.invoked_function_arn = arn
        self.aws_request_id = f"req-{n}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the function times out, in simulated time."""
        return max(0, int((self._deadline - self._clock.now()) * 1000))


class EventSourceMappingTwin:
    """Polls ``queue_url`` and invokes ``handler`` with batches, deleting what succeeded.

    Start it inside :meth:`SimClock.run` with :meth:`start`; it polls until cancelled."""

    def __init__(
        self,
        clock: SimClock,
        sqs: SqsTwin,
        queue_url: str,
        handler: Handler,
        config: FunctionConfig,
        *,
        poll_wait: float = 20.0,
    ) -> None:
        _validate(sqs, queue_url, config)
        self.clock = clock
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.config = config
        self.poll_wait = poll_wait
        self.invocations: list[InvocationRecord] = []
        self._numbers = itertools.count(1)
        self._running: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._poller: asyncio.Task[None] | None = None
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
        self.queue_arn = arn["Attributes"]["QueueArn"]
        sqs.on_send(self._on_send)

    def start(self) -> asyncio.Task[None]:
        """Start polling (call inside the simulation's loop)."""
        self._wake = asyncio.Event()
        self._poller = asyncio.get_running_loop().create_task(self._poll())
        return self._poller

    async def drain(self) -> None:
        """Wait for the invocations now running to end."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    # --- polling ------------------------------------------------------------------------------

    def _on_send(self, url: str) -> None:
        if url == self.queue_url and self._wake is not None:
            self._wake.set()  # long polling answers as soon as a message arrives

    async def _poll(self) -> None:
        assert self._wake is not None
        # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html : with
        # MaximumConcurrency the mapping never runs more invocations at once (default: as
        # many as there are message groups to serve, for a FIFO queue).
        limit = self.config.maximum_concurrency or 1_000
        while True:
            if len(self._running) >= limit:
                await asyncio.wait(list(self._running), return_when=asyncio.FIRST_COMPLETED)
                continue
            found = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=self.config.batch_size
            )
            messages = found.get("Messages", [])
            if messages:
                task = asyncio.get_running_loop().create_task(self._invoke(messages))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
                await asyncio.sleep(0)
                continue
            wait = self.poll_wait
            visible = self.sqs.next_visible_at(self.queue_url)
            if visible is not None:
                wait = min(wait, visible - self.clock.now())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.0))

    # --- one invocation -----------------------------------------------------------------------

    async def _invoke(self, messages: list[dict[str, Any]]) -> None:
        started = self.clock.now()
        deadline = started + self.config.timeout
        context = LambdaContext(self.clock, deadline, self.config, next(self._numbers))
        event = {"Records": [self._record(m) for m in messages]}
        ids = [m["MessageId"] for m in messages]
        outcome: Outcome
        error: str | None = None
        failed: set[str] = set(ids)
        try:
            # https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html : at the
            # timeout Lambda stops the invocation wherever it is; the SQS messages are not
            # deleted and come back after the queue's visibility timeout.
            async with asyncio.timeout(self.config.timeout) as window:
                result = await self.handler(event, context)
        except TimeoutError as exc:
            if window.expired():
                outcome = "timeout"
                error = f"Task timed out after {self.config.timeout:.2f} seconds"
            else:
                outcome, error = "error", f"TimeoutError: {exc}"
        except Exception as exc:
            # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
            # a function that throws fails the whole batch, partial responses or not.
            outcome, error = "error", f"{type(exc).__name__}: {exc}"
        else:
            outcome, failed = self._failures(result, ids)
        deleted = [m for m in messages if m["MessageId"] not in failed]
        for message in deleted:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        self.invocations.append(
            InvocationRecord(
                started,
                self.clock.now(),
                ids,
                outcome,
                [m["MessageId"] for m in deleted],
                error,
            )
        )

    def _failures(self, result: Any, ids: list[str]) -> tuple[Outcome, set[str]]:
        """Which messages failed, by the rules of partial batch responses.

        https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
        (#services-sqs-batchfailurereporting): with ReportBatchItemFailures, a null or empty
        response or ``batchItemFailures`` list is complete success; an invalid response, an
        empty or null ``itemIdentifier``, a bad key name or an id not in the batch is complete
        failure. Without it, any returned value is success: every message is deleted."""
        if not self.config.report_batch_item_failures:
            return "success", set()
        if result is None or result == {}:
            return "success", set()
        if not isinstance(result, dict):
            return "invalid-response", set(ids)
        items = result.get("batchItemFailures")
        if not items:
            return "success", set()
        if not isinstance(items, list):
            return "invalid-response", set(ids)
        failed: set[str] = set()
        for item in items:
            value = item.get("itemIdentifier") if isinstance(item, dict) else None
            if not isinstance(value, str) or not value or value not in ids:
                return "invalid-response", set(ids)
            failed.add(value)
        return "partial", failed

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        """https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html (example event)."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": dict(message["Attributes"]),
            "messageAttributes": {},
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": "us-east-1",
        }


def _validate(sqs: SqsTwin, queue_url: str, config: FunctionConfig) -> None:
    """Refuse a mapping AWS would refuse to create."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url)["Attributes"]
    if not 1 <= config.batch_size <= MAX_FIFO_BATCH:
        raise ValueError(f"BatchSize={config.batch_size}: 1 to 10 for a FIFO queue")
    if config.maximum_batching_window:
        raise ValueError("MaximumBatchingWindowInSeconds: not supported for FIFO queues")
    # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html : Lambda
    # refuses a mapping whose queue's visibility timeout is shorter than the function's.
    visibility = int(attributes["VisibilityTimeout"])
    if visibility < config.timeout:
        raise ValueError(
            f"Queue visibility timeout: {visibility} seconds is less than Function timeout: "
            f"{config.timeout:g} seconds"
        )
    # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html : 2 to 1,000.
    if config.maximum_concurrency is not None and not 2 <= config.maximum_concurrency <= 1000:
        raise ValueError("ScalingConfig.MaximumConcurrency: 2 to 1000")
    if not 1 <= config.timeout <= 900:
        raise TwinUnsupported(f"Timeout={config.timeout}: Lambda allows 1 to 900 seconds")
    json.dumps(config.environment)  # the environment is plain strings
