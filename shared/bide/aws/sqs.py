"""The SQS FIFO wake queue: message group = session, so one worker runs a session at a time."""

from __future__ import annotations

import json
import secrets
from typing import Any


class SqsWakeQueue:
    """:class:`~bide.aws.ports.WakeQueue` on an SQS FIFO queue."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def wake(self, session_id: str, reason: str) -> None:
        """Enqueue a wake. Each wake is a distinct message (never deduplicated away): a
        duplicate run of a session is harmless, a lost one is not."""
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=json.dumps({"session_id": session_id, "reason": reason}),
            MessageGroupId=session_id,
            MessageDeduplicationId=secrets.token_hex(16),
        )


def parse_wake(body: str) -> tuple[str, str]:
    """The session id and reason of a wake message (from the API, a signal or an alarm)."""
    data = json.loads(body)
    session_id = data.get("session_id") if isinstance(data, dict) else None
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("a wake message needs a non-empty 'session_id'")
    return session_id, str(data.get("reason", "unknown"))
