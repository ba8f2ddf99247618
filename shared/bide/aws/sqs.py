"""The SQS FIFO wake queue: message group = session, so one worker runs a session at a time.

Also the worker's retry delay (ChangeMessageVisibility on a failed wake) and the dead-letter
queue the worker sends a wake to, with its reason, when it failed its last attempt.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from ..engine.partial import PageHint

# ChangeMessageVisibility takes 0 to 43,200 seconds (12 hours)
# (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html).
MAX_VISIBILITY_SECONDS = 43_200


class SqsWakeQueue:
    """:class:`~bide.aws.ports.WakeQueue` on an SQS FIFO queue."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def wake(
        self,
        session_id: str,
        reason: str,
        *,
        task: str | None = None,
        owner: str | None = None,
        pages: PageHint | None = None,
    ) -> None:
        """Enqueue a wake (naming ``task``, its ``owner`` and its sealed ``pages``, for a
        signal's: see :func:`wake_body`). Each wake is a distinct message (never deduplicated
        away): a duplicate run of a session is harmless, a lost one is not."""
        self.send(session_id, wake_body(session_id, reason, task=task, owner=owner, pages=pages))

    def send(self, session_id: str, body: str) -> None:
        """Enqueue ``body`` in the session's message group with a fresh deduplication id (an
        explicit id overrides content-based deduplication, so it is never dropped)."""
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=body,
            MessageGroupId=session_id,
            MessageDeduplicationId=secrets.token_hex(16),
        )

    def change_visibility(self, receipt_handle: str, seconds: int) -> None:
        """Make a received (failed) wake visible again in ``seconds``, instead of after the
        queue's visibility timeout. In a FIFO queue an in-flight message blocks the rest of
        its message group (https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned);
        "you can shorten [the visibility timeout] with ChangeMessageVisibility"
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html)."""
        self.client.change_message_visibility(
            QueueUrl=self.queue_url,
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=max(0, min(MAX_VISIBILITY_SECONDS, int(seconds))),
        )


class SqsDeadLetters:
    """:class:`~bide.aws.ports.DeadLetters` on the wake queue's FIFO dead-letter queue. SQS's
    own redrive (maxReceiveCount) stays the backstop for invocations that die."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def dead_letter(self, session_id: str, wake: str, reason: dict[str, object]) -> None:
        """Send the wake and why it failed to the dead-letter queue (a fresh deduplication
        id: two failures of one wake are two letters, never one dropped)."""
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=dead_letter_body(wake, reason),
            MessageGroupId=session_id,
            MessageDeduplicationId=secrets.token_hex(16),
        )


def dead_letter_body(wake: str, reason: dict[str, object]) -> str:
    """``{"dead_letter": 1, "wake": <the wake's body>, "reason": {...}}``."""
    return json.dumps({"dead_letter": 1, "wake": wake, "reason": reason})


def parse_dead_letter(body: str) -> tuple[str, dict[str, Any] | None]:
    """The original wake body and the reason of a dead letter. A wake SQS moved itself
    (its redrive policy, after an invocation died) has no reason: ``(body, None)``."""
    try:
        data = json.loads(body)
    except ValueError:
        return body, None
    if (
        isinstance(data, dict)
        and data.get("dead_letter") == 1
        and isinstance(data.get("wake"), str)
    ):
        reason = data.get("reason")
        return str(data["wake"]), reason if isinstance(reason, dict) else None
    return body, None


def wake_body(
    session_id: str,
    reason: str,
    *,
    task: str | None = None,
    owner: str | None = None,
    pages: PageHint | None = None,
) -> str:
    """A wake message: ``{"session_id", "reason"}``, plus ``"task"`` (and that task's
    ``"owner"``, when it has one) for a wake that only that task needs: a signal's. The worker
    then runs that task alone (:func:`wake_focus`); every other wake runs the whole session.
    With ``pages`` (the task's sealed memo page count and its ``created_at``, as the delivery
    read the record) also ``"pages"`` and ``"created_at"``: the worker's targeted read fetches
    the pages its cache lacks with the task (:func:`wake_pages`)."""
    data: dict[str, object] = {"session_id": session_id, "reason": reason}
    if task is not None:
        data["task"] = task
        if owner is not None:
            data["owner"] = owner
        if pages is not None:
            data["pages"], data["created_at"] = pages
    return json.dumps(data)


class Wake:
    """One wake message read once: what :func:`read_wake` finds in its body.

    ``session_id`` and ``reason`` always; ``focus``, the task a signal's wake names and its
    owner (None for a wake of the whole session); ``pages``, that task's sealed page count and
    ``created_at`` (a hint for the targeted read, None when absent or malformed); ``fired_at``,
    the deadline an alarm's wake was armed for (None for any other wake)."""

    __slots__ = ("fired_at", "focus", "pages", "reason", "session_id")

    def __init__(
        self,
        session_id: str,
        reason: str,
        focus: tuple[str, str | None] | None = None,
        pages: PageHint | None = None,
        fired_at: float | None = None,
    ) -> None:
        self.session_id = session_id
        self.reason = reason
        self.focus = focus
        self.pages = pages
        self.fired_at = fired_at

    def __repr__(self) -> str:
        return (
            f"Wake({self.session_id!r}, {self.reason!r}, focus={self.focus!r}, "
            f"pages={self.pages!r}, fired_at={self.fired_at!r})"
        )


def read_wake(body: str) -> Wake:
    """Parse a wake message (from the API, a signal or an alarm) once. ValueError when the body
    is not JSON or has no non-empty ``session_id``: no retry can make it valid. Every other
    field only narrows or dates the run, so a malformed one reads as absent (a full pass is
    always correct)."""
    data = json.loads(body)
    session_id = data.get("session_id") if isinstance(data, dict) else None
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("a wake message needs a non-empty 'session_id'")
    reason = str(data.get("reason", "unknown"))
    focus = _focus(data)
    pages = None if focus is None else _pages(data)
    fired_at = _fired_at(data) if reason == "alarm" else None
    return Wake(session_id, reason, focus, pages, fired_at)


def _focus(data: dict[str, Any]) -> tuple[str, str | None] | None:
    task = data.get("task")
    if not isinstance(task, str) or not task:
        return None
    owner = data.get("owner")
    if owner is not None and (not isinstance(owner, str) or not owner):
        return None
    return task, owner


def _pages(data: dict[str, Any]) -> PageHint | None:
    # Only a hint for what to read: the worker counts pages by the record it reads, never by
    # the wake (a wake never fails on it).
    count, created = data.get("pages"), data.get("created_at")
    if type(count) is not int or count < 0:
        return None
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    if not math.isfinite(created):
        return None
    return count, float(created)


def _fired_at(data: dict[str, Any]) -> float | None:
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float):
        return None
    return float(at)


def _object(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def wake_pages(body: str) -> PageHint | None:
    """``(sealed page count, created_at)`` of the task a signal's wake names, or None: a wake
    without them (any wake but a signal's to a task with sealed pages, and every message from
    before wakes carried them) or with a malformed one (see :class:`Wake`)."""
    data = _object(body)
    if data is None or _focus(data) is None:
        return None
    return _pages(data)


def wake_focus(body: str) -> tuple[str, str | None] | None:
    """The task a wake names and its owner (``(task, owner or None)``), or None for a wake of
    the whole session (every wake but a signal's, and any message from before wakes named a
    task). A malformed ``task`` or ``owner`` also gives None: a full pass is always correct."""
    data = _object(body)
    return None if data is None else _focus(data)


def whole_session(body: str) -> str:
    """``body`` without the task a signal's wake names: a wake sent again (a redriven dead
    letter) runs the whole session, whatever it first stood for. Any other body unchanged."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict) or "task" not in data:
        return body
    dropped = ("task", "owner", "pages", "created_at")
    return json.dumps({k: v for k, v in data.items() if k not in dropped})


def parse_wake(body: str) -> tuple[str, str]:
    """The session id and reason of a wake message (see :func:`read_wake`)."""
    wake = read_wake(body)
    return wake.session_id, wake.reason


def fired_for(body: str) -> float | None:
    """The deadline an alarm's wake was armed for (its ``at``), or None for any other wake
    (or an alarm body without one)."""
    data = json.loads(body)
    if not isinstance(data, dict) or data.get("reason") != "alarm":
        return None
    return _fired_at(data)
