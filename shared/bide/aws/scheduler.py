"""EventBridge Scheduler alarms: one one-time ``at()`` schedule per session, targeting the
FIFO wake queue with the session as message group."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError


def schedule_name(session_id: str) -> str:
    """A schedule name valid for Scheduler (<= 64 chars of [0-9A-Za-z_.-]) and unique per
    session (session ids may hold other characters, so they are hashed)."""
    return "bide-" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def at_expression(at: float) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC, rounded up to the next whole second so the alarm
    never fires before the deadline."""
    moment = datetime.fromtimestamp(math.ceil(at), tz=UTC)
    return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"


class SchedulerAlarms:
    """:class:`~bide.aws.ports.Alarms` on EventBridge Scheduler."""

    def __init__(
        self,
        client: Any,
        *,
        group: str,
        queue_arn: str,
        role_arn: str,
    ) -> None:
        self.client = client
        self.group = group
        self.queue_arn = queue_arn
        self.role_arn = role_arn

    def _request(self, session_id: str, at: float) -> dict[str, Any]:
        return {
            "Name": schedule_name(session_id),
            "GroupName": self.group,
            "ScheduleExpression": at_expression(at),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            # One-time schedules delete themselves once they fired: nothing to clean up.
            "ActionAfterCompletion": "DELETE",
            "Target": {
                "Arn": self.queue_arn,
                "RoleArn": self.role_arn,
                # The queue deduplicates by content for Scheduler's messages (Scheduler sends
                # no deduplication id): the alarm time makes each arming's body distinct.
                "Input": json.dumps({"session_id": session_id, "reason": "alarm", "at": at}),
                "SqsParameters": {"MessageGroupId": session_id},
            },
        }

    def arm(self, session_id: str, at: float) -> None:
        """Create the session's schedule, or update it when it exists."""
        request = self._request(session_id, at)
        try:
            self.client.create_schedule(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConflictException":
                raise
            self.client.update_schedule(**request)

    def disarm(self, session_id: str) -> None:
        """Delete the session's schedule; a missing one is fine."""
        try:
            self.client.delete_schedule(Name=schedule_name(session_id), GroupName=self.group)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise

    def armed_at(self, session_id: str) -> str | None:
        """The schedule expression armed for the session, or None (for tools and tests)."""
        try:
            found = self.client.get_schedule(Name=schedule_name(session_id), GroupName=self.group)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise
        return str(found["ScheduleExpression"])
