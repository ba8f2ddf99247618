"""Dead-lettered wakes on AWS: list them with why they failed, and send them back.

The worker sets a wake aside on its last attempt with the reason in the body
(:func:`bide.aws.sqs.dead_letter_body`); SQS's own redrive policy moves wakes of invocations
that died without a word (no reason then). ``bide redrive`` reads the dead-letter queue,
prints each wake with its reason and, when asked, sends it back to the wake queue (with a
fresh deduplication id, so the FIFO queue never drops it as a repeat) and deletes it from the
dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..aws.sqs import SqsWakeQueue, parse_dead_letter, parse_wake, whole_session

# While listing, received letters stay hidden this long (then they are released at once).
LIST_VISIBILITY_SECONDS = 30


@dataclass(frozen=True)
class DeadWake:
    """One dead-lettered wake: its session, the wake's body and why it was set aside (None:
    SQS moved it after invocations died)."""

    letter_id: str
    session_id: str
    wake: str
    reason: dict[str, Any] | None
    handle: str = field(repr=False, default="")

    def describe(self) -> str:
        """One line for a terminal."""
        if self.reason is None:
            why = "no reason recorded (moved by the queue's redrive policy)"
        else:
            why = f"{self.reason.get('error_type', 'Error')}: {self.reason.get('error', '')}"
            if "receives" in self.reason:
                why += f" (after {self.reason['receives']} deliveries)"
        return f"{self.session_id}  {why}"

    def as_json(self) -> dict[str, Any]:
        """For ``--json``."""
        return {
            "letter_id": self.letter_id,
            "session_id": self.session_id,
            "wake": self.wake,
            "reason": self.reason,
        }


def dead_wake(letter_id: str, body: str, handle: str = "", group: str = "") -> DeadWake:
    """A :class:`DeadWake` from a dead letter's body (either kind)."""
    wake, reason = parse_dead_letter(body)
    try:
        session_id = parse_wake(wake)[0]
    except ValueError:
        session_id = group or "?"
    return DeadWake(letter_id, session_id, wake, reason, handle)


class SqsRedrive:
    """The wake queue's dead-letter queue, read and redriven through an SQS client."""

    def __init__(self, client: Any, dead_letter_url: str, queue_url: str) -> None:
        self.client = client
        self.dead_letter_url = dead_letter_url
        self.queue = SqsWakeQueue(client, queue_url)

    def _receive(self) -> list[DeadWake]:
        found = self.client.receive_message(
            QueueUrl=self.dead_letter_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=LIST_VISIBILITY_SECONDS,
            AttributeNames=["All"],
        )
        return [
            dead_wake(
                m["MessageId"],
                m["Body"],
                m["ReceiptHandle"],
                (m.get("Attributes") or {}).get("MessageGroupId", ""),
            )
            for m in found.get("Messages", [])
        ]

    def _release(self, letters: list[DeadWake]) -> None:
        for letter in letters:
            self.client.change_message_visibility(
                QueueUrl=self.dead_letter_url, ReceiptHandle=letter.handle, VisibilityTimeout=0
            )

    def letters(self) -> list[DeadWake]:
        """Every dead letter SQS hands out now (a FIFO group's letters behind ten in flight
        wait for the next call), released again at once."""
        seen: list[DeadWake] = []
        while batch := self._receive():
            seen += batch
        self._release(seen)
        return seen

    def redrive(self, select: Callable[[DeadWake], bool]) -> list[DeadWake]:
        """Send every selected letter's wake back to the wake queue and delete the letter
        (sent first: a crash in between wakes the session twice, harmless, never zero
        times). The others stay. The letters redriven."""
        sent: list[DeadWake] = []
        kept: list[DeadWake] = []
        while batch := self._receive():
            for letter in batch:
                if not select(letter):
                    kept.append(letter)
                    continue
                self.queue.send(letter.session_id, whole_session(letter.wake))
                self.client.delete_message(
                    QueueUrl=self.dead_letter_url, ReceiptHandle=letter.handle
                )
                sent.append(letter)
        self._release(kept)
        return sent


def sqs_redrive(dead_letter_url: str, queue_url: str) -> SqsRedrive:
    """An :class:`SqsRedrive` with the default SQS client (your AWS credentials)."""
    from .config import LazyClient

    return SqsRedrive(LazyClient("sqs"), dead_letter_url, queue_url)
