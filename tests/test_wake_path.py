"""The wake path as AWS really behaves (moto for SQS and Scheduler, a manual clock).

* EventBridge Scheduler fires an ``at()`` schedule anywhere within the minute it names
  (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html), at least once.
* The FIFO wake queue deduplicates Scheduler's messages by content for 5 minutes, even after
  the first copy was received and deleted
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html,
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html).
  moto forgets deleted messages' ids, so :class:`ContentDedup` models the window on top of it.
* A failed FIFO message blocks its group until it is visible again
  (https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned); the worker shortens
  that with ChangeMessageVisibility.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_fixtures import unique
from handler_fixtures import REPLY, Bench, FakeContext, aws_fixture, make_bench, run

from bide.aws.scheduler import alarm_minute, at_expression, schedule_name
from bide.aws.sqs import SqsDeadLetters, parse_dead_letter
from bide.constants import FIFO_DEDUPLICATION_SECONDS
from bide.service import signals, worker_batch
from bide.service.http import handle_worker

__all__ = ["aws_fixture"]

HOUR = 3600.0


class ContentDedup:
    """The wake queue as Scheduler sends to it: no deduplication id, so SQS deduplicates by a
    SHA-256 of the body, per message group (the stack's deduplication scope), for 5 minutes,
    remembering ids of messages already deleted."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.seen: dict[tuple[str, str], float] = {}
        self.dropped = 0

    def send(self, body: str, group: str) -> bool:
        """Whether the message was delivered (False: accepted and dropped as a duplicate)."""
        now = self.bench.clock.now()
        key = (group, hashlib.sha256(body.encode()).hexdigest())
        if key in self.seen and now - self.seen[key] < FIFO_DEDUPLICATION_SECONDS:
            self.dropped += 1
            return False
        self.seen[key] = now
        self.bench.sqs.send_message(
            QueueUrl=self.bench.queue_url,
            MessageBody=body,
            MessageGroupId=group,
            MessageDeduplicationId=unique("d"),  # moto's own window is ours now
        )
        return True


def fire(bench: Bench, fifo: ContentDedup, sid: str, *, times: int = 1) -> list[bool]:
    """Be Scheduler: send the schedule's Input ``times`` times (at-least-once), then delete the
    one-time schedule. Whether each copy was delivered."""
    name = schedule_name(sid)
    schedule = bench.scheduler.get_schedule(Name=name, GroupName=bench.group)
    target = schedule["Target"]
    sent = [
        fifo.send(target["Input"], target["SqsParameters"]["MessageGroupId"]) for _ in range(times)
    ]
    bench.scheduler.delete_schedule(Name=name, GroupName=bench.group)
    return sent


def virtual_sleep(bench: Bench, slept: list[float] | None = None):
    """``deps.sleep`` on the bench's clock. A sleep past a minute is the invocation's deadline
    timer (300 s away): it never ends by itself and is cancelled when the run ends."""

    async def sleep(seconds: float) -> None:
        if seconds > 60:
            await asyncio.Event().wait()
        await asyncio.sleep(0)
        if slept is not None:
            slept.append(seconds)
        bench.clock.advance(seconds)

    return sleep


@pytest.fixture(name="bench")
def bench_fixture(aws: dict[str, Any]) -> Bench:
    bench = make_bench(aws)
    bench.deps.sleep = virtual_sleep(bench)
    return bench


def parked(bench: Bench, rounds: list[dict[str, Any]]) -> tuple[str, str]:
    sid = unique("s")
    task_id = bench.start_napper(rounds, sid)
    bench.drain()
    return sid, task_id


def minute_of(expression: str) -> float:
    moment = datetime.strptime(expression, "at(%Y-%m-%dT%H:%M:%S)").replace(tzinfo=UTC)
    return moment.timestamp()


# --- 1 and 2: alarms --------


def test_at_expression_names_a_minute_that_cannot_start_before_the_deadline() -> None:
    start = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    assert at_expression(start) == "at(2026-01-01T00:00:00)"  # already on a minute
    assert at_expression(start + 0.001) == "at(2026-01-01T00:01:00)"
    assert at_expression(start + 30) == "at(2026-01-01T00:01:00)"
    assert at_expression(start + 59.999) == "at(2026-01-01T00:01:00)"
    assert at_expression(start + 3600 + 61) == "at(2026-01-01T01:02:00)"
    for offset in (0.5, 1, 29, 30.5, 59, 60, 61, 119.9, 7200.25):
        minute = minute_of(at_expression(start + offset))
        # Scheduler fires in [minute, minute + 60): never before the deadline.
        assert start + offset <= minute == alarm_minute(start + offset) < start + offset + 60


def test_a_timed_park_arms_the_minute_after_its_deadline(bench: Bench) -> None:
    start = bench.clock.now()
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR + 30}])
    (schedule,) = [bench.scheduler.get_schedule(Name=schedule_name(sid), GroupName=bench.group)]
    assert schedule["ScheduleExpression"] == "at(2026-01-01T01:01:00)"
    # Scheduler fires in the first second of that minute: the deadline has passed.
    bench.clock.set(minute_of(schedule["ScheduleExpression"]))
    assert fire(bench, ContentDedup(bench), sid) == [True]
    bench.drain()
    assert bench.task(sid, task_id).state.outcome.result["wake"] == {"reason": "expired"}
    assert bench.clock.now() - start < HOUR + 120


class Calls:
    """Counts the Scheduler calls and session head reads the worker makes."""

    def __init__(self, bench: Bench, monkeypatch: Any) -> None:
        self.made: list[str] = []
        for name in ("create_schedule", "update_schedule", "delete_schedule"):
            self._spy(monkeypatch, bench.deps.alarms.client, name)
        self._spy(monkeypatch, bench.deps.store, "head")

    def _spy(self, monkeypatch: Any, target: Any, name: str) -> None:
        real = getattr(target, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.made.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(target, name, spy)


def test_a_fired_schedule_is_not_deleted_again_nor_a_new_one_checked(
    bench: Bench, monkeypatch
) -> None:
    # Scheduler deletes a one-time schedule once it fired (ActionAfterCompletion DELETE): a
    # run woken by it that ends the task calls no DeleteSchedule; one that parks again creates
    # a schedule where none exists, which undoes no other run's alarm: no head read after it.
    sid, task_id = parked(bench, [{"after": HOUR}, {"after": HOUR}])
    calls = Calls(bench, monkeypatch)
    bench.clock.advance(HOUR + 60)
    assert fire(bench, ContentDedup(bench), sid) == [True]  # Scheduler's own calls ...
    calls.made.clear()  # ... are not the worker's
    bench.drain()
    assert bench.task(sid, task_id).state.status == "sleeping"
    assert calls.made == ["create_schedule"]
    bench.clock.advance(HOUR + 60)
    assert fire(bench, ContentDedup(bench), sid) == [True]
    calls.made.clear()
    bench.drain()
    assert bench.task(sid, task_id).state.status == "terminal"
    assert calls.made == []
    assert bench.schedules() == []


def test_a_stale_alarm_still_deletes_the_schedule_the_session_has(bench: Bench) -> None:
    # An alarm's wake for a deadline the session does not wait for is not its schedule
    # firing: when that run ends the task, the schedule armed for the real deadline is
    # deleted.
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR}])
    assert len(bench.schedules()) == 1
    stale = json.dumps({"session_id": sid, "reason": "alarm", "at": 1.0, "arming": "arm-old"})
    bench.sqs.send_message(
        QueueUrl=bench.queue_url, MessageBody=stale, MessageGroupId=sid, MessageDeduplicationId="x"
    )
    decision = signals.deliver(bench.deps, sid, task_id, REPLY.name, "k", {"text": "x"})
    assert decision.result.value == "delivered"
    bench.drain()  # the stale alarm's run ends the task; the signal's run finds nothing
    assert bench.task(sid, task_id).state.status == "terminal"
    assert bench.schedules() == []


def test_rearming_after_an_early_fire_is_never_deduplicated_away(bench: Bench) -> None:
    fifo = ContentDedup(bench)
    start = bench.clock.now()
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR}])
    first = bench.scheduler.get_schedule(Name=schedule_name(sid), GroupName=bench.group)
    # An early fire (clock skew, a stray duplicate): nothing is due, the worker re-arms.
    bench.clock.set(start + HOUR - 120)
    assert fire(bench, fifo, sid) == [True]
    bench.drain()
    second = bench.scheduler.get_schedule(Name=schedule_name(sid), GroupName=bench.group)
    assert second["ScheduleExpression"] == first["ScheduleExpression"]
    assert (
        json.loads(second["Target"]["Input"])["arming"]
        != json.loads(first["Target"]["Input"])["arming"]
    )
    assert bench.task(sid, task_id).state.status == "sleeping"
    # Two minutes later (inside the 5-minute window) the re-armed alarm fires, twice: the
    # first copy is delivered (a body equal to the early fire's would be dropped and the
    # session never woken), the second is a duplicate of the same schedule and is dropped.
    bench.clock.set(start + HOUR)
    assert fire(bench, fifo, sid, times=2) == [True, False]
    bench.drain()
    assert bench.task(sid, task_id).state.outcome.result["wake"] == {"reason": "expired"}
    assert bench.scheduler.list_schedules(GroupName=bench.group)["Schedules"] == []


# --- 3: deadlines shorter than the Scheduler's precision --------


def test_a_deadline_under_a_minute_is_waited_for_in_process(bench: Bench) -> None:
    start = bench.clock.now()
    sid, task_id = parked(bench, [{"after": 30}])
    # No alarm could be on time (it fires up to 59 s late): the worker waited and ran again.
    assert bench.task(sid, task_id).state.outcome.result["wake"] == {"reason": "time"}
    assert bench.scheduler.list_schedules(GroupName=bench.group)["Schedules"] == []
    assert start + 30 <= bench.clock.now() < start + 40
    assert len(bench.responses) == 1  # one invocation


def test_a_short_deadline_that_does_not_fit_the_invocation_is_armed(bench: Bench) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"after": 30}], sid)
    messages = bench.receive()
    # 40 s left, 20 s margin: the deadline (30 s) is past the stop time (20 s): arm.
    response = run(handle_worker(bench.deps, bench.sqs_event(messages), FakeContext(40_000)))
    assert response == {"batchItemFailures": []}
    schedule = bench.scheduler.get_schedule(Name=schedule_name(sid), GroupName=bench.group)
    assert schedule["ScheduleExpression"] == at_expression(bench.clock.now() + 30)
    assert bench.task(sid, task_id).state.status == "sleeping"


def test_an_early_fire_inside_the_last_minute_waits_in_process(bench: Bench) -> None:
    fifo = ContentDedup(bench)
    start = bench.clock.now()
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR + 30}])
    bench.clock.set(start + HOUR + 5)  # before the deadline: e.g. a skewed clock
    assert fire(bench, fifo, sid) == [True]
    bench.drain()
    assert bench.task(sid, task_id).state.outcome.result["wake"] == {"reason": "expired"}
    assert bench.clock.now() >= start + HOUR + 30


# --- 5: transient failures --------


class Recorder:
    """Passes calls through to the client and records ChangeMessageVisibility."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.visibility: list[tuple[str, int]] = []

    def change_message_visibility(self, **kw: Any) -> Any:
        self.visibility.append((kw["ReceiptHandle"], kw["VisibilityTimeout"]))
        return self.inner.change_message_visibility(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def failing(monkeypatch, sessions: set[str], ran: list[str]) -> None:
    real = worker_batch.run_session

    async def flaky(deps, session_id, **kw):
        ran.append(session_id)
        if session_id in sessions:
            raise RuntimeError("throttled")
        return await real(deps, session_id, **kw)

    monkeypatch.setattr(worker_batch, "run_session", flaky)


def test_a_failed_wake_is_retried_in_process_then_redelivered_in_seconds(
    bench: Bench, monkeypatch
) -> None:
    recorder = Recorder(bench.sqs)
    bench.deps.queue.client = recorder  # type: ignore[attr-defined]
    slept: list[float] = []
    bench.deps.sleep = virtual_sleep(bench, slept)
    bad, good = unique("s-bad"), unique("s")
    for sid in (bad, good, bad):
        bench.deps.queue.wake(sid, "signal")
    messages = bench.receive(visibility=1800)
    assert len(messages) == 3
    ran: list[str] = []
    failing(monkeypatch, {bad}, ran)
    event = bench.sqs_event(messages)
    response = run(handle_worker(bench.deps, event, FakeContext()))
    failed = [f["itemIdentifier"] for f in response["batchItemFailures"]]
    # Only bad's records fail; good's ran although it came after bad's failure.
    assert failed == [m["MessageId"] for m in messages if bad in m["Body"]]
    assert ran == [bad, bad, bad, good]
    assert slept == list(worker_batch.RETRY_BACKOFF_SECONDS)  # retried in-process first
    # Both of bad's records come back in 5 s, not after the 30-minute visibility timeout:
    # an in-flight message would block its group.
    handles = {m["ReceiptHandle"] for m in messages if m["MessageId"] in failed}
    assert {h for h, _ in recorder.visibility} == handles
    assert {s for _, s in recorder.visibility} == {worker_batch.REDELIVERY_BASE_SECONDS}
    # Later receives wait longer, up to a cap.
    record = event["Records"][0]
    for count, expected in ((2, 10), (3, 20), (10, worker_batch.REDELIVERY_CAP_SECONDS)):
        record["attributes"]["ApproximateReceiveCount"] = str(count)
        assert worker_batch._redelivery_delay(record) == expected


# --- 7: poison wakes --------


def test_the_last_attempt_dead_letters_the_wake_with_its_reason(bench: Bench, monkeypatch) -> None:
    dlq_url = bench.sqs.create_queue(
        QueueName=f"{unique('dead')}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    bench.deps.dead_letters = SqsDeadLetters(bench.sqs, dlq_url)
    bench.deps.max_receive_count = 3
    bad = unique("s-bad")
    ran: list[str] = []
    failing(monkeypatch, {bad}, ran)
    bench.deps.queue.wake(bad, "signal")
    (message,) = bench.receive()
    record = bench.sqs_record(message)
    record["attributes"]["ApproximateReceiveCount"] = "2"  # not the last: SQS redelivers
    response = run(handle_worker(bench.deps, {"Records": [record]}, FakeContext()))
    assert response == {"batchItemFailures": [{"itemIdentifier": message["MessageId"]}]}
    assert "Messages" not in bench.sqs.receive_message(QueueUrl=dlq_url)
    record["attributes"]["ApproximateReceiveCount"] = "3"  # the last: set aside, done
    response = run(handle_worker(bench.deps, {"Records": [record]}, FakeContext()))
    assert response == {"batchItemFailures": []}
    (letter,) = bench.sqs.receive_message(QueueUrl=dlq_url, AttributeNames=["All"])["Messages"]
    wake, reason = parse_dead_letter(letter["Body"])
    assert json.loads(wake) == {"session_id": bad, "reason": "signal"}
    assert reason is not None
    assert reason["error_type"] == "RuntimeError" and reason["error"] == "throttled"
    assert reason["receives"] == 3 and reason["at"] == bench.clock.now()
    assert letter["Attributes"]["MessageGroupId"] == bad


# --- 6: phases stopped before the function's timeout --------


def test_a_long_call_is_stopped_before_the_timeout_and_the_session_requeued(bench: Bench) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"keys": ["k"]}], sid)
    messages = bench.receive()
    start = bench.clock.now()

    async def scenario() -> dict[str, Any]:
        bench.probe.arm_pause()  # the phase awaits a "model call" that does not return
        entered = bench.probe.entered
        assert entered is not None

        async def sleep(seconds: float) -> None:
            await entered.wait()  # time passes while the call runs
            bench.clock.advance(seconds)

        bench.deps.sleep = sleep
        # 25 s left, 20 s margin: the call is cut off 5 s from now.
        worker = handle_worker(bench.deps, bench.sqs_event(messages), FakeContext(25_000))
        return await asyncio.wait_for(worker, timeout=10)  # real time: only if it hangs

    response = run(scenario())
    assert response == {"batchItemFailures": []}
    assert bench.clock.now() == start + 5
    for m in messages:
        bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=m["ReceiptHandle"])
    record = bench.task(sid, task_id)
    # Put back cleanly: pending again, no restart counted (not a crash).
    assert record.state.status == "pending" and record.restarts == 0
    assert bench.queued() == [{"session_id": sid, "reason": "still-active"}]
    bench.deps.sleep = virtual_sleep(bench)
    bench.drain()
    assert bench.task(sid, task_id).state.status == "sleeping"


# --- configuration -------------------------------------------------------------------------


def test_the_worker_reads_its_dead_letter_queue_and_max_receive_count() -> None:
    from bide import constants as c
    from bide.aws.scheduler import SchedulerAlarms
    from bide.service.config import ConfigError, deps_from_env

    env = {
        c.ENV_APP: "handler_fixtures:default_app",
        c.ENV_TABLE: "bide-sessions",
        c.ENV_BUCKET: "bide-offload",
        c.ENV_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/bide-wakes.fifo",
        c.ENV_QUEUE_ARN: "arn:aws:sqs:us-east-1:123456789012:bide-wakes.fifo",
        c.ENV_SCHEDULE_GROUP: "bide-alarms",
        c.ENV_SCHEDULER_ROLE_ARN: "arn:aws:iam::123456789012:role/bide-scheduler",
    }
    plain = deps_from_env(env)
    assert plain.dead_letters is None and plain.max_receive_count is None
    dlq = "https://sqs.us-east-1.amazonaws.com/123456789012/bide-dead.fifo"
    deps = deps_from_env({**env, c.ENV_DEAD_LETTER_URL: dlq, c.ENV_MAX_RECEIVE_COUNT: "5"})
    assert isinstance(deps.dead_letters, SqsDeadLetters) and deps.dead_letters.queue_url == dlq
    assert deps.max_receive_count == 5
    # Arming ids come from the function's id source.
    assert isinstance(deps.alarms, SchedulerAlarms) and deps.alarms.ids is deps.ids
    with pytest.raises(ConfigError, match=c.ENV_MAX_RECEIVE_COUNT):
        deps_from_env({**env, c.ENV_MAX_RECEIVE_COUNT: "0"})
    with pytest.raises(ConfigError, match=c.ENV_DEAD_LETTER_URL):
        deps_from_env({**env, c.ENV_DEAD_LETTER_URL: "not a url"})
