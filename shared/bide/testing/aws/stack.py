"""The twin of a whole Bide deployment: :class:`AwsTwin` wires one simulated clock, one seeded
RNG, the wake queue (and its dead-letter queue) as a stack's template declares them, the
Scheduler, and the real worker handler behind the event source mapping."""

from __future__ import annotations

import random
from typing import Any

from ...app import App
from ...aws.scheduler import SchedulerAlarms
from ...aws.sqs import SqsWakeQueue
from ...engine.ids import IdSource
from ...engine.store.base import Store
from ...service.deps import Deps
from ...service.worker_batch import handle_worker
from .clock import DEFAULT_START, SimClock
from .dynamodb import DynamoDBTwin
from .lambda_esm import EventSourceMappingTwin, LambdaContext
from .scheduler import PastAt, SchedulerTwin
from .sqs import ACCOUNT, SqsTwin
from .template import TwinConfig

WAKE_QUEUE = "bide-wake.fifo"
DEAD_LETTERS = "bide-wake-dead-letters.fifo"
SCHEDULE_GROUP = "bide-alarms"
SCHEDULER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/bide-scheduler"


class _SeededIds:
    """Task and invocation ids from the twin's RNG, so a run is reproducible end to end."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{self._rng.getrandbits(128):032x}"


class AwsTwin:
    """A simulated deployment of ``config`` (see :func:`~bide.testing.aws.template.twin_config`).

    ``seed`` seeds every random choice (fire times, duplicates, injected faults, ids);
    ``duplicate_rate`` and ``past_at`` go to the :class:`SchedulerTwin`."""

    def __init__(
        self,
        config: TwinConfig,
        *,
        seed: int = 0,
        start: float = DEFAULT_START,
        duplicate_rate: float = 0.0,
        past_at: PastAt = "never",
    ) -> None:
        self.config = config
        self.clock = SimClock(start)
        self.rng = random.Random(seed)
        self.sqs = SqsTwin(self.clock, self.rng)
        self.scheduler = SchedulerTwin(
            self.clock, self.rng, self.sqs, duplicate_rate=duplicate_rate, past_at=past_at
        )
        dead = self.sqs.create_queue(
            QueueName=DEAD_LETTERS, Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"}
        )["QueueUrl"]
        self.dead_letter_url = dead
        self.dead_letter_arn = self._arn(dead)
        self.queue_url = self.sqs.create_queue(
            QueueName=WAKE_QUEUE, Attributes=config.queue.attributes(self.dead_letter_arn)
        )["QueueUrl"]
        self.queue_arn = self._arn(self.queue_url)

    def dynamodb(
        self, inner: Any, *, throttle_rate: float = 0.0, conflict_rate: float = 0.0
    ) -> DynamoDBTwin:
        """``inner`` (a real boto3 DynamoDB client) with the twin's faults and token rules."""
        return DynamoDBTwin(
            inner, self.clock, self.rng, throttle_rate=throttle_rate, conflict_rate=conflict_rate
        )

    def deps(self, store: Store, app: App, *, ids: IdSource | None = None, **kw: Any) -> Deps:
        """The worker's :class:`~bide.service.deps.Deps` on the twin: Scheduler alarms and
        the SQS wake queue of the twin, the simulated clock, seeded ids."""
        return Deps(
            store=store,
            alarms=SchedulerAlarms(
                self.scheduler,
                group=SCHEDULE_GROUP,
                queue_arn=self.queue_arn,
                role_arn=SCHEDULER_ROLE_ARN,
            ),
            queue=SqsWakeQueue(self.sqs, self.queue_url),
            app=app,
            clock=self.clock,
            ids=ids or _SeededIds(self.rng),
            **kw,
        )

    def worker(self, deps: Deps) -> EventSourceMappingTwin:
        """The event source mapping that drives the real worker handler
        (:func:`bide.service.worker_batch.handle_worker`) with the stack's safety margin."""
        margin = self.config.safety_margin_ms

        async def handler(event: dict[str, Any], context: LambdaContext) -> Any:
            return await handle_worker(deps, event, context, safety_margin_ms=margin)

        return EventSourceMappingTwin(
            self.clock, self.sqs, self.queue_url, handler, self.config.function
        )

    def _arn(self, url: str) -> str:
        found = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return str(found["Attributes"]["QueueArn"])
