"""EventBridge Scheduler alarms: one one-time ``at()`` schedule per session, targeting the
FIFO wake queue with the session as message group.

Two facts of AWS shape the request:

* "All schedule types on EventBridge Scheduler invoke their targets with 60 second precision
  ... if you set your schedule to run at 1:00, it will invoke the target API between 1:00:00
  and 1:00:59" (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html).
  An ``at(10:00:30)`` may fire at 10:00:05, before the deadline; so :func:`at_expression`
  names the first whole minute at or after the deadline. Delivery is at least once.
* The wake queue deduplicates Scheduler's messages by content (Scheduler sends no
  deduplication id): a body equal to one sent in the last 5 minutes is accepted and never
  delivered (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html).
  Every arming carries a fresh arming id, so re-arming after an early fire is never dropped;
  two fires of one schedule carry the same body, so the queue drops the copy.

Every schedule carries an explicit retry policy and, when the stack gives one, a dead-letter
queue: Scheduler retries a failed delivery "with exponential backoff ... until either the
maximum number of attempts is made or until the duration of the MaximumEventAgeInSeconds is
reached" (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-scheduler-schedule-retrypolicy.html),
then drops it, unless a dead-letter queue is set; that queue must be a *standard* SQS queue
("EventBridge Scheduler does not support using a FIFO queue as your schedule's DLQ",
https://docs.aws.amazon.com/scheduler/latest/UserGuide/configuring-schedule-dlq.html). A
dropped alarm leaves a session asleep for good, so a dead letter there raises an alarm.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from ..constants import (
    SCHEDULE_MAX_EVENT_AGE_SECONDS,
    SCHEDULE_MAX_RETRY_ATTEMPTS,
    SCHEDULER_PRECISION_SECONDS,
)
from ..engine.ids import IdSource, RandomIds


def schedule_name(session_id: str) -> str:
    """A schedule name valid for Scheduler (<= 64 chars of [0-9A-Za-z_.-]) and unique per
    session (session ids may hold other characters, so they are hashed)."""
    return "bide-" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def alarm_minute(at: float) -> float:
    """The first whole minute at or after ``at``: Scheduler fires anywhere within the minute
    an ``at()`` expression names, so only a minute that starts at or after the deadline can
    never fire before it."""
    step = SCHEDULER_PRECISION_SECONDS
    return float(math.ceil(at / step) * step)


def at_expression(at: float) -> str:
    """``at(yyyy-mm-ddThh:mm:00)`` in UTC naming :func:`alarm_minute` of ``at``, so the alarm
    never fires before the deadline (at most 119 s after it)."""
    moment = datetime.fromtimestamp(alarm_minute(at), tz=UTC)
    return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"


def alarm_body(session_id: str, at: float, arming: str) -> str:
    """The wake an alarm sends: distinct for every arming (``arming``), equal for every fire
    of one schedule."""
    return json.dumps({"session_id": session_id, "reason": "alarm", "at": at, "arming": arming})


ARM_ATTEMPTS = 3
"""Creates an arming tries in all when the schedule keeps vanishing between a refused create
and its update (see :meth:`SchedulerAlarms.arm`)."""


def _refused(call: Any, request: dict[str, Any], code: str) -> bool:
    """Make the call; True when the service refused it with ``code`` (any other error raises)."""
    try:
        call(**request)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != code:
            raise
        return True
    return False


class SchedulerAlarms:
    """:class:`~bide.aws.ports.Alarms` on EventBridge Scheduler.

    ``dead_letter_arn`` is the standard SQS queue a schedule's undeliverable fire goes to
    (None: Scheduler drops it after its retries)."""

    def __init__(
        self,
        client: Any,
        *,
        group: str,
        queue_arn: str,
        role_arn: str,
        ids: IdSource | None = None,
        dead_letter_arn: str | None = None,
    ) -> None:
        self.client = client
        self.dead_letter_arn = dead_letter_arn
        self.group = group
        self.queue_arn = queue_arn
        self.role_arn = role_arn
        self.ids: IdSource = ids or RandomIds()

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
                # The queue deduplicates Scheduler's messages by content (Scheduler sends no
                # deduplication id): a fresh arming id makes each arming's body distinct, even
                # when an early fire re-arms the same deadline within 5 minutes.
                "Input": alarm_body(session_id, at, self.ids.new_id("arm-")),
                "SqsParameters": {"MessageGroupId": session_id},
                # A late wake is harmless (the worker checks what is due), a lost one is not:
                # retry for as long as Scheduler allows, then dead-letter.
                "RetryPolicy": {
                    "MaximumEventAgeInSeconds": SCHEDULE_MAX_EVENT_AGE_SECONDS,
                    "MaximumRetryAttempts": SCHEDULE_MAX_RETRY_ATTEMPTS,
                },
                **(
                    {"DeadLetterConfig": {"Arn": self.dead_letter_arn}}
                    if self.dead_letter_arn
                    else {}
                ),
            },
        }

    def arm(self, session_id: str, at: float) -> bool:
        """Create the session's schedule (False), or update it when it exists (True: another
        run's alarm was replaced, which the caller checks was not a newer one).

        A schedule that exists when the create is refused may be gone by the update: another
        run disarmed it, or it fired and deleted itself (``ActionAfterCompletion``). Then the
        update's ``ResourceNotFoundException`` sends the create again, up to
        :data:`ARM_ATTEMPTS` times in all: failing the run would only redeliver its wake."""
        request = self._request(session_id, at)
        for _ in range(ARM_ATTEMPTS - 1):
            if not _refused(self.client.create_schedule, request, "ConflictException"):
                return False
            if not _refused(self.client.update_schedule, request, "ResourceNotFoundException"):
                return True
        self.client.create_schedule(**request)  # the last attempt raises whatever it meets
        return False

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
