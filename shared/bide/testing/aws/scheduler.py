"""EventBridge Scheduler one-time schedules targeting the SQS twin: :class:`SchedulerTwin`.

A boto3-client-like object (``create_schedule``, ``update_schedule``, ``delete_schedule``,
``get_schedule``) on simulated time. It models what bites a user of one-time schedules:

* an ``at()`` fires anywhere in the named minute, so up to 59 s *before* the second named;
* delivery is at least once: with probability ``duplicate_rate`` the target is invoked twice
  (the second time within the same minute, with the same Input);
* a failed send is retried with backoff per the target's RetryPolicy, then dead-lettered.

moto's Scheduler stores schedules and never invokes anything, so there is no moto behaviour
to compare the firing rules with; its validation is compared in ``tests/test_twin_scheduler.py``.
Only what Bide needs is modelled: ``at()`` in UTC with FlexibleTimeWindow OFF and an SQS
target. Anything else is refused with :class:`~bide.testing.aws.errors.TwinUnsupported`.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from .clock import SimClock, Timer
from .errors import TwinUnsupported, client_error
from .sqs import ACCOUNT, REGION, SqsTwin

# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html
# (Name): 1-64 characters of [0-9a-zA-Z-_.].
_NAME = re.compile(r"^[0-9a-zA-Z\-_.]{1,64}$")
# https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html (One-time
# schedules): at(yyyy-mm-ddThh:mm:ss), no time zone suffix; the zone is a separate field.
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
# https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html (Note): "All
# schedule types on EventBridge Scheduler invoke their targets with 60 second precision ...
# if you set your schedule to run at 1:00, it will invoke the target API between 1:00:00 and
# 1:00:59".
PRECISION = 60.0
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html : attempts
# 0-185, event age 60-86,400 s, exponential backoff. The defaults without a policy are not on
# the pages found, so the twin takes the documented maxima.
DEFAULT_RETRY = {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86_400}

PastAt = Literal["never", "reject", "fire"]


@dataclass
class Invocation:
    """One attempt of the Scheduler to send a schedule's Input to its target."""

    at: float
    schedule: str
    body: str
    attempt: int  # 0 = first try
    duplicate: bool
    error: str | None  # the send's error code, None when it succeeded


@dataclass
class _Schedule:
    request: dict[str, Any]
    created: datetime
    modified: datetime
    timers: list[Timer] = field(default_factory=list)


class SchedulerTwin:
    """One-time schedules that send to :class:`~bide.testing.aws.sqs.SqsTwin` queues.

    ``duplicate_rate``: probability that a fire invokes the target a second time.
    ``past_at``: what an ``at()`` whose whole minute is already over does. AWS does not
    document it (no page of the Scheduler guide or API reference says), so the strict default
    is ``"never"``: accepted, never invoked; ``"reject"`` refuses it with a
    ValidationException and ``"fire"`` invokes at once, for comparison.
    ``target_failure_rate``: probability that one send attempt fails (retries are exercised).
    """

    def __init__(
        self,
        clock: SimClock,
        rng: random.Random,
        sqs: SqsTwin,
        *,
        duplicate_rate: float = 0.0,
        past_at: PastAt = "never",
        target_failure_rate: float = 0.0,
        region: str = REGION,
        account: str = ACCOUNT,
    ) -> None:
        self.clock = clock
        self.rng = rng
        self.sqs = sqs
        self.duplicate_rate = duplicate_rate
        self.past_at = past_at
        self.target_failure_rate = target_failure_rate
        self.region = region
        self.account = account
        self.invocations: list[Invocation] = []
        self.dead_letters: list[dict[str, Any]] = []
        self._schedules: dict[tuple[str, str], _Schedule] = {}

    # --- the API ------------------------------------------------------------------------------

    def create_schedule(self, **request: Any) -> Any:
        """Create a schedule; ``ConflictException`` if the name exists in the group."""
        op = "CreateSchedule"
        key, when = self._validate(request, op)
        if key in self._schedules:
            raise client_error(
                "ConflictException", f"Schedule {key[1]} already exists.", op, status=409
            )
        now = self._stamp()
        schedule = _Schedule(copy.deepcopy(request), now, now)
        self._schedules[key] = schedule
        self._plan(key, schedule, when)
        return {"ScheduleArn": self._arn(key)}

    def update_schedule(self, **request: Any) -> Any:
        """Replace a schedule's whole definition (UpdateSchedule takes every field anew:
        https://docs.aws.amazon.com/scheduler/latest/APIReference/API_UpdateSchedule.html );
        ``ResourceNotFoundException`` if it does not exist. A pending fire is re-planned."""
        op = "UpdateSchedule"
        key, when = self._validate(request, op)
        old = self._get(key, op)
        for timer in old.timers:
            timer.cancel()
        schedule = _Schedule(copy.deepcopy(request), old.created, self._stamp())
        self._schedules[key] = schedule
        self._plan(key, schedule, when)
        return {"ScheduleArn": self._arn(key)}

    def delete_schedule(self, Name: str, GroupName: str = "default", **_: Any) -> Any:
        """Delete; ``ResourceNotFoundException`` if it does not exist."""
        key = (GroupName, Name)
        schedule = self._get(key, "DeleteSchedule")
        for timer in schedule.timers:
            timer.cancel()
        del self._schedules[key]
        return {}

    def get_schedule(self, Name: str, GroupName: str = "default", **_: Any) -> Any:
        """The schedule as stored; ``ResourceNotFoundException`` if it does not exist."""
        key = (GroupName, Name)
        schedule = self._get(key, "GetSchedule")
        request = copy.deepcopy(schedule.request)
        request.setdefault("GroupName", "default")
        request.setdefault("ActionAfterCompletion", "NONE")
        request.setdefault("State", "ENABLED")
        request.setdefault("ScheduleExpressionTimezone", "UTC")
        return {
            **request,
            "Arn": self._arn(key),
            "CreationDate": schedule.created,
            "LastModificationDate": schedule.modified,
        }

    def schedule_names(self, GroupName: str = "default") -> list[str]:
        """The names of the group's schedules (inspection, not AWS API)."""
        return sorted(name for group, name in self._schedules if group == GroupName)

    # --- validation ---------------------------------------------------------------------------

    def _validate(self, request: dict[str, Any], op: str) -> tuple[tuple[str, str], float]:
        def invalid(message: str) -> ClientError:
            return client_error("ValidationException", message, op)

        name = request.get("Name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise invalid(f"Name={name!r}: 1 to 64 characters of [0-9a-zA-Z-_.]")
        group = str(request.get("GroupName") or "default")
        expression = request.get("ScheduleExpression")
        if not isinstance(expression, str):
            raise invalid("ScheduleExpression is required")
        if expression.startswith(("rate(", "cron(")):
            raise TwinUnsupported(f"{expression!r}: the twin models one-time at() schedules")
        found = _AT.match(expression)
        if found is None:
            raise invalid(f"Invalid Schedule Expression {expression}.")
        try:
            named = datetime.strptime(found.group(1) + "+0000", "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            raise invalid(f"Invalid Schedule Expression {expression}.") from None
        zone = request.get("ScheduleExpressionTimezone") or "UTC"
        if zone not in ("UTC", "Etc/UTC"):
            raise TwinUnsupported(f"ScheduleExpressionTimezone={zone!r}: the twin models UTC only")
        window = request.get("FlexibleTimeWindow")
        if not isinstance(window, dict) or window.get("Mode") not in ("OFF", "FLEXIBLE"):
            raise invalid("FlexibleTimeWindow.Mode is required: 'OFF' or 'FLEXIBLE'")
        if window["Mode"] != "OFF":
            raise TwinUnsupported("FlexibleTimeWindow: the twin models Mode OFF only")
        after = request.get("ActionAfterCompletion", "NONE")
        if after not in ("NONE", "DELETE"):
            raise invalid(f"ActionAfterCompletion={after!r}: 'NONE' or 'DELETE'")
        self._validate_target(request.get("Target"), invalid)
        when = named.timestamp()
        # Undocumented by AWS (see the class docstring): an at() whose minute is over.
        if when + PRECISION <= self.clock.now() and self.past_at == "reject":
            raise invalid(f"{expression} is in the past")
        return (group, name), when

    @staticmethod
    def _validate_target(target: Any, invalid: Any) -> None:
        # https://docs.aws.amazon.com/scheduler/latest/APIReference/API_Target.html : Arn and
        # RoleArn are required; SqsParameters.MessageGroupId names the FIFO group.
        if not isinstance(target, dict) or not target.get("Arn") or not target.get("RoleArn"):
            raise invalid("Target with Arn and RoleArn is required")
        if ":sqs:" not in str(target["Arn"]):
            raise TwinUnsupported(f"Target.Arn={target['Arn']!r}: the twin models SQS targets")
        if not isinstance(target.get("Input"), str):
            raise TwinUnsupported("Target.Input: the twin needs the message body as Input")
        dead_letter = str((target.get("DeadLetterConfig") or {}).get("Arn", ""))
        # configuring-schedule-dlq.html: "EventBridge Scheduler does not support using a FIFO
        # queue as your schedule's DLQ". When AWS refuses it is not documented; the twin
        # refuses at once.
        if dead_letter.endswith(".fifo"):
            raise invalid("DeadLetterConfig.Arn: a schedule's dead-letter queue cannot be FIFO")
        policy = target.get("RetryPolicy") or {}
        attempts = policy.get("MaximumRetryAttempts", 0)
        age = policy.get("MaximumEventAgeInSeconds", 60)
        if not 0 <= attempts <= 185 or not 60 <= age <= 86_400:
            raise invalid(
                "RetryPolicy: MaximumRetryAttempts 0-185, MaximumEventAgeInSeconds 60-86400"
            )

    # --- firing -------------------------------------------------------------------------------

    def _plan(self, key: tuple[str, str], schedule: _Schedule, when: float) -> None:
        if schedule.request.get("State", "ENABLED") != "ENABLED":
            return
        start = when - (when % PRECISION)  # the named minute
        now = self.clock.now()
        if start + PRECISION <= now:
            if self.past_at != "fire":
                return  # "never" (and "reject" refused it already)
            fire_at = now
        else:
            fire_at = max(now, start + self.rng.uniform(0.0, PRECISION))
        window_end = start + PRECISION if start + PRECISION > now else now
        schedule.timers.append(
            self.clock.call_at(fire_at, lambda: self._fire(key, schedule, window_end))
        )

    def _fire(self, key: tuple[str, str], schedule: _Schedule, window_end: float) -> None:
        if self._schedules.get(key) is not schedule:
            return  # deleted or replaced since
        target = copy.deepcopy(schedule.request["Target"])
        name = schedule.request["Name"]
        started = self.clock.now()
        self._attempt(name, target, 0, started, duplicate=False)
        if self.rng.random() < self.duplicate_rate:
            # At-least-once: an independent second invocation, already on its way, so
            # deleting or updating the schedule does not stop it.
            later = self.rng.uniform(started, max(started, window_end))
            self.clock.call_at(later, lambda: self._attempt(name, target, 0, later, True))
        # https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html
        # (ActionAfterCompletion): DELETE removes the schedule after its last invocation.
        if schedule.request.get("ActionAfterCompletion", "NONE") == "DELETE":
            del self._schedules[key]

    def _attempt(
        self, name: str, target: dict[str, Any], attempt: int, first: float, duplicate: bool
    ) -> None:
        body = str(target["Input"])
        error = self._send(target, body)
        self.invocations.append(Invocation(self.clock.now(), name, body, attempt, duplicate, error))
        if error is None:
            return
        policy = {**DEFAULT_RETRY, **(target.get("RetryPolicy") or {})}
        # Exponential backoff (API_RetryPolicy above), capped; the exact curve is not
        # documented, so the twin uses full jitter over 2**attempt seconds, at most 5 min.
        delay = self.rng.uniform(0.0, min(300.0, 2.0 ** (attempt + 1)))
        age = self.clock.now() + delay - first
        if attempt < policy["MaximumRetryAttempts"] and age <= policy["MaximumEventAgeInSeconds"]:
            self.clock.call_later(
                delay, lambda: self._attempt(name, target, attempt + 1, first, duplicate)
            )
            return
        self._dead_letter(name, target, body, error)

    def _send(self, target: dict[str, Any], body: str) -> str | None:
        if self.rng.random() < self.target_failure_rate:
            return "InjectedTargetFailure"
        url = self.sqs.queue_by_arn(str(target["Arn"]))
        if url is None:
            return "AWS.SimpleQueueService.NonExistentQueue"
        group = (target.get("SqsParameters") or {}).get("MessageGroupId")
        try:
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
        except ClientError as exc:
            return str(exc.response.get("Error", {}).get("Code", "?"))
        return None

    def _dead_letter(self, name: str, target: dict[str, Any], body: str, error: str) -> None:
        """An event that exhausted its retries becomes a dead-letter event (a JSON payload
        with the invocation's details) in the target's DeadLetterConfig queue, if any, else
        it is dropped; :attr:`dead_letters` records it either way.

        https://docs.aws.amazon.com/scheduler/latest/UserGuide/configuring-schedule-dlq.html
        (the DLQ is a standard queue, which the twin does not model: events are recorded)."""
        arn = (target.get("DeadLetterConfig") or {}).get("Arn")
        self.dead_letters.append(
            {"schedule": name, "body": body, "error": error, "dead_letter_arn": arn}
        )

    # --- internals ----------------------------------------------------------------------------

    def _get(self, key: tuple[str, str], op: str) -> _Schedule:
        schedule = self._schedules.get(key)
        if schedule is None:
            raise client_error(
                "ResourceNotFoundException", f"Schedule {key[1]} does not exist.", op, status=404
            )
        return schedule

    def _arn(self, key: tuple[str, str]) -> str:
        return f"arn:aws:scheduler:{self.region}:{self.account}:schedule/{key[0]}/{key[1]}"

    def _stamp(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now(), tz=UTC)
