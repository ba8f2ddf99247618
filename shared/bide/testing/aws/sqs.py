"""An SQS FIFO queue as strict as AWS's, on simulated time: :class:`SqsTwin`.

A boto3-client-like object (``send_message``, ``receive_message``, ``delete_message``,
``change_message_visibility``, ``get_queue_attributes``, ``get_queue_url``, plus
``create_queue`` to set one up). Bad input raises :class:`botocore.exceptions.ClientError`
with AWS's error code. Only FIFO queues are modelled (standard queues are refused).

Where moto is more forgiving (each shown by a test in ``tests/test_twin_sqs.py``): moto forgets
a deduplication id once its message is deleted, ignores ``DeduplicationScope`` and measures
the 5-minute interval on the wall clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass, field
from typing import Any

from .clock import SimClock
from .errors import TwinUnsupported, client_error

REGION = "us-east-1"
ACCOUNT = "123456789012"

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
# (MessageDeduplicationId): a duplicate sent within the 5-minute deduplication interval is
# accepted successfully but not delivered.
DEDUPLICATION_INTERVAL = 300.0
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html
# (MaxNumberOfMessages): 1 to 10.
MAX_RECEIVE = 10
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
# (VisibilityTimeout): 0 to 43,200 seconds (12 hours).
MAX_VISIBILITY = 43_200


@dataclass
class _Message:
    message_id: str
    body: str
    group: str
    dedup_id: str
    sequence: int
    sent_at: float
    receive_count: int = 0
    first_receive_at: float | None = None
    visible_at: float = 0.0
    receipt: str | None = None  # the most recent receipt handle


@dataclass
class _Queue:
    name: str
    url: str
    arn: str
    attributes: dict[str, str]
    messages: list[_Message] = field(default_factory=list)  # in sequence order
    # deduplication key -> (first send time, MessageId answered to every duplicate)
    seen: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)

    @property
    def visibility_timeout(self) -> int:
        return int(self.attributes.get("VisibilityTimeout", "30"))


class SqsTwin:
    """FIFO queues in simulated time; ids come from ``rng`` so runs are reproducible."""

    def __init__(
        self,
        clock: SimClock,
        rng: random.Random,
        *,
        region: str = REGION,
        account: str = ACCOUNT,
    ) -> None:
        self.clock = clock
        self.rng = rng
        self.region = region
        self.account = account
        self._queues: dict[str, _Queue] = {}  # by URL
        self._sequence = itertools.count(1)
        self._listeners: list[Any] = []

    # --- setup ------------------------------------------------------------------------------

    def create_queue(self, QueueName: str, Attributes: dict[str, str] | None = None) -> Any:
        """Create a FIFO queue (``Attributes`` as SQS takes them: ``FifoQueue``,
        ``ContentBasedDeduplication``, ``DeduplicationScope``, ``VisibilityTimeout``,
        ``RedrivePolicy`` as JSON with ``deadLetterTargetArn`` and ``maxReceiveCount``)."""
        attributes = {str(k): str(v) for k, v in (Attributes or {}).items()}
        # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues.html
        # A FIFO queue's name ends in .fifo.
        if attributes.get("FifoQueue") != "true" or not QueueName.endswith(".fifo"):
            raise TwinUnsupported(f"queue {QueueName!r}: the twin models FIFO queues only")
        scope = attributes.setdefault("DeduplicationScope", "queue")
        if scope not in ("queue", "messageGroup"):
            raise client_error(
                "InvalidAttributeValue",
                f"DeduplicationScope={scope!r}: must be 'queue' or 'messageGroup'",
                "CreateQueue",
            )
        attributes.setdefault("ContentBasedDeduplication", "false")
        attributes.setdefault("VisibilityTimeout", "30")
        url = f"https://sqs.{self.region}.amazonaws.com/{self.account}/{QueueName}"
        arn = f"arn:aws:sqs:{self.region}:{self.account}:{QueueName}"
        self._queues.setdefault(url, _Queue(QueueName, url, arn, attributes))
        return {"QueueUrl": url}

    def get_queue_url(self, QueueName: str, **_: Any) -> Any:
        """The URL of a queue by name, or ``AWS.SimpleQueueService.NonExistentQueue``."""
        for queue in self._queues.values():
            if queue.name == QueueName:
                return {"QueueUrl": queue.url}
        raise _no_queue("GetQueueUrl")

    def queue_by_arn(self, arn: str) -> str | None:
        """The URL of the queue with this ARN (how the Scheduler twin finds its target)."""
        return next((q.url for q in self._queues.values() if q.arn == arn), None)

    def on_send(self, listener: Any) -> None:
        """Call ``listener(queue_url)`` after every delivered send (event source mappings
        poll again at once instead of waiting out their long poll)."""
        self._listeners.append(listener)

    # --- the API ------------------------------------------------------------------------------

    def send_message(
        self,
        QueueUrl: str,
        MessageBody: str,
        MessageGroupId: str | None = None,
        MessageDeduplicationId: str | None = None,
        DelaySeconds: int | None = None,
        **_: Any,
    ) -> Any:
        """Enqueue, or accept a duplicate without delivering it (same MessageId answered)."""
        op = "SendMessage"
        queue = self._queue(QueueUrl, op)
        if not MessageBody:
            raise client_error("InvalidParameterValue", "MessageBody must not be empty", op)
        # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
        # (MessageGroupId): required for FIFO queues.
        if not MessageGroupId:
            raise client_error(
                "MissingParameter", "The request must contain the parameter MessageGroupId.", op
            )
        # Same page (DelaySeconds): FIFO queues take no per-message delay.
        if DelaySeconds:
            raise client_error(
                "InvalidParameterValue",
                "DelaySeconds: per-message delays are not supported on FIFO queues",
                op,
            )
        dedup = self._dedup_id(queue, MessageBody, MessageDeduplicationId, op)
        now = self.clock.now()
        # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
        # (DeduplicationScope): deduplication per message group or for the whole queue.
        scope = MessageGroupId if queue.attributes["DeduplicationScope"] == "messageGroup" else ""
        key = (scope, dedup)
        found = queue.seen.get(key)
        # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html
        # SQS keeps tracking a deduplication id after its message was received and deleted.
        if found is not None and now - found[0] < DEDUPLICATION_INTERVAL:
            return {"MessageId": found[1], "SequenceNumber": "0"}
        message = _Message(
            message_id=self._uuid(),
            body=MessageBody,
            group=MessageGroupId,
            dedup_id=dedup,
            sequence=next(self._sequence),
            sent_at=now,
        )
        queue.seen[key] = (now, message.message_id)
        queue.messages.append(message)
        for listener in list(self._listeners):
            listener(queue.url)
        return {"MessageId": message.message_id, "SequenceNumber": str(message.sequence)}

    def receive_message(
        self,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int | None = None,
        **_: Any,
    ) -> Any:
        """Up to ``MaxNumberOfMessages`` visible messages; never waits (a poller in
        simulated time does the waiting). A group with a message in flight gives nothing."""
        op = "ReceiveMessage"
        queue = self._queue(QueueUrl, op)
        if not 1 <= MaxNumberOfMessages <= MAX_RECEIVE:
            raise client_error(
                "InvalidParameterValue",
                f"Value {MaxNumberOfMessages} for parameter MaxNumberOfMessages is invalid. "
                "Reason: must be between 1 and 10, if provided.",
                op,
            )
        visibility = queue.visibility_timeout if VisibilityTimeout is None else VisibilityTimeout
        _check_visibility(visibility, op)
        now = self.clock.now()
        taken: list[_Message] = []
        for group in self._available_groups(queue, now):
            for message in [m for m in queue.messages if m.group == group]:
                if len(taken) == MaxNumberOfMessages:
                    break
                if self._redrive(queue, message):
                    continue
                taken.append(message)
            if len(taken) == MaxNumberOfMessages:
                break
        for message in taken:
            message.receive_count += 1
            if message.first_receive_at is None:
                message.first_receive_at = now
            message.visible_at = now + visibility
            message.receipt = f"{message.message_id}#{self._uuid()}"
        return {"Messages": [self._shape(queue, m) for m in taken]} if taken else {}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> Any:
        """Delete by the most recent receipt handle.

        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html
        an older handle of a message received again since succeeds without deleting it."""
        op = "DeleteMessage"
        queue = self._queue(QueueUrl, op)
        message = self._by_handle(queue, ReceiptHandle, op)
        if message is not None and message.receipt == ReceiptHandle:
            queue.messages.remove(message)
        return {}

    def change_message_visibility(
        self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any
    ) -> Any:
        """Set a received message's remaining visibility timeout (0: visible at once).

        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
        a message not in flight answers ``MessageNotInflight``."""
        op = "ChangeMessageVisibility"
        queue = self._queue(QueueUrl, op)
        _check_visibility(VisibilityTimeout, op)
        message = self._by_handle(queue, ReceiptHandle, op)
        now = self.clock.now()
        if message is None or message.receipt != ReceiptHandle or message.visible_at <= now:
            raise client_error("MessageNotInflight", "The message is not in flight.", op)
        message.visible_at = now + VisibilityTimeout
        return {}

    def get_queue_attributes(
        self, QueueUrl: str, AttributeNames: list[str] | None = None, **_: Any
    ) -> Any:
        """The queue's attributes (``All`` or the names asked), with the approximate counts."""
        queue = self._queue(QueueUrl, "GetQueueAttributes")
        now = self.clock.now()
        values = {
            **queue.attributes,
            "QueueArn": queue.arn,
            "ApproximateNumberOfMessages": str(
                sum(1 for m in queue.messages if m.visible_at <= now)
            ),
            "ApproximateNumberOfMessagesNotVisible": str(
                sum(1 for m in queue.messages if m.visible_at > now)
            ),
        }
        names = AttributeNames or ["All"]
        if "All" not in names:
            values = {k: v for k, v in values.items() if k in names}
        return {"Attributes": values}

    # --- inspection (not AWS API) -------------------------------------------------------------

    def next_visible_at(self, QueueUrl: str) -> float | None:
        """When the earliest message now in flight becomes visible again (pollers wait for
        it), or None."""
        queue = self._queue(QueueUrl, "-")
        now = self.clock.now()
        times = [m.visible_at for m in queue.messages if m.visible_at > now]
        return min(times) if times else None

    def bodies(self, QueueUrl: str) -> list[str]:
        """Every message body the queue holds, in flight or not, in order."""
        return [m.body for m in self._queue(QueueUrl, "-").messages]

    # --- internals ----------------------------------------------------------------------------

    def _queue(self, url: str, op: str) -> _Queue:
        queue = self._queues.get(url)
        if queue is None:
            raise _no_queue(op)
        return queue

    def _dedup_id(self, queue: _Queue, body: str, given: str | None, op: str) -> str:
        if given:
            return given
        # Same page: with ContentBasedDeduplication the id is the SHA-256 of the body (not of
        # the attributes); without it, a send with no id fails.
        if queue.attributes["ContentBasedDeduplication"] == "true":
            return hashlib.sha256(body.encode()).hexdigest()
        raise client_error(
            "InvalidParameterValue",
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly",
            op,
        )

    def _available_groups(self, queue: _Queue, now: float) -> list[str]:
        """Groups with nothing in flight, ordered by their oldest message.

        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html
        messages of one group are delivered in order, none while another of the group is in
        flight, and a receive returns as many of one group as it can before the next."""
        blocked = {m.group for m in queue.messages if m.visible_at > now}
        order: list[str] = []
        for message in queue.messages:
            if message.group not in blocked and message.group not in order:
                order.append(message.group)
        return order

    def _redrive(self, queue: _Queue, message: _Message) -> bool:
        """Move ``message`` to the dead-letter queue if one more receive would exceed
        ``maxReceiveCount``.

        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html
        when the ReceiveCount for a message exceeds the maxReceiveCount, SQS moves it to the
        dead-letter queue (which keeps the message's group; a FIFO queue's DLQ is FIFO)."""
        policy = queue.attributes.get("RedrivePolicy")
        if not policy:
            return False
        parsed = json.loads(policy)
        if message.receive_count < int(parsed["maxReceiveCount"]):
            return False
        target = self.queue_by_arn(str(parsed["deadLetterTargetArn"]))
        queue.messages.remove(message)
        if target is not None:
            moved = _Message(
                message_id=message.message_id,
                body=message.body,
                group=message.group,
                dedup_id=message.dedup_id,
                sequence=next(self._sequence),
                sent_at=message.sent_at,
                receive_count=message.receive_count,
            )
            self._queues[target].messages.append(moved)
        return True

    def _by_handle(self, queue: _Queue, handle: str, op: str) -> _Message | None:
        """The message a handle was issued for; None when it is gone (deleted or moved);
        ``ReceiptHandleIsInvalid`` for a handle this queue never issued."""
        message_id = handle.split("#", 1)[0]
        if "#" not in handle or not message_id:
            raise client_error("ReceiptHandleIsInvalid", "The input receipt handle is invalid.", op)
        return next((m for m in queue.messages if m.message_id == message_id), None)

    def _shape(self, queue: _Queue, message: _Message) -> dict[str, Any]:
        body_md5 = hashlib.md5(message.body.encode(), usedforsecurity=False).hexdigest()
        first = message.first_receive_at or self.clock.now()
        return {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt,
            "MD5OfBody": body_md5,
            "Body": message.body,
            "Attributes": {
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(int(message.sent_at * 1000)),
                "ApproximateFirstReceiveTimestamp": str(int(first * 1000)),
                "MessageGroupId": message.group,
                "MessageDeduplicationId": message.dedup_id,
                "SequenceNumber": str(message.sequence),
                "SenderId": self.account,
            },
        }

    def _uuid(self) -> str:
        bits = self.rng.getrandbits(128)
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _check_visibility(value: int, op: str) -> None:
    if not 0 <= value <= MAX_VISIBILITY:
        raise client_error(
            "InvalidParameterValue",
            f"Value {value} for parameter VisibilityTimeout is invalid. "
            f"Reason: must be between 0 and {MAX_VISIBILITY}.",
            op,
        )


def _no_queue(op: str) -> Exception:
    return client_error(
        "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", op
    )
