"""The EventBridge Scheduler twin: one-time at() schedules sending to the SQS FIFO twin."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_fixtures import aws_client, fake_aws_environment
from botocore.exceptions import ClientError

from bide.testing.aws import SchedulerTwin, SimClock, SqsTwin, TwinUnsupported

START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
ROLE = "arn:aws:iam::123456789012:role/scheduler"
FIFO = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}


def bench(seed: int = 1, **options: Any) -> tuple[SchedulerTwin, SqsTwin, str, str]:
    clock = SimClock(START)
    rng = random.Random(seed)
    sqs = SqsTwin(clock, rng)
    url = sqs.create_queue(QueueName="wake.fifo", Attributes=FIFO)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url)["Attributes"]["QueueArn"]
    return SchedulerTwin(clock, rng, sqs, **options), sqs, url, arn


def request(name: str, at: str, arn: str, body: str = "wake", **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "GroupName": "alarms",
        "ScheduleExpression": f"at({at})",
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {
            "Arn": arn,
            "RoleArn": ROLE,
            "Input": body,
            "SqsParameters": {"MessageGroupId": name},
            **extra.pop("target", {}),
        },
        **extra,
    }


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_create_conflict_get_update_delete_and_not_found_codes_match_moto() -> None:
    """moto gets these codes right; the twin answers the same."""
    from moto import mock_aws

    def codes(client: Any, arn: str) -> list[str]:
        found = []
        client.create_schedule(**request("s", "2026-01-01T01:00:00", arn))
        with pytest.raises(ClientError) as exc:
            client.create_schedule(**request("s", "2026-01-01T01:00:00", arn))
        found.append(code(exc))
        client.update_schedule(**request("s", "2026-01-01T02:00:00", arn))
        assert client.get_schedule(Name="s", GroupName="alarms")["ScheduleExpression"] == (
            "at(2026-01-01T02:00:00)"
        )
        client.delete_schedule(Name="s", GroupName="alarms")
        for call in (client.get_schedule, client.delete_schedule):
            with pytest.raises(ClientError) as exc:
                call(Name="s", GroupName="alarms")
            found.append(code(exc))
        with pytest.raises(ClientError) as exc:
            client.update_schedule(**request("s", "2026-01-01T02:00:00", arn))
        found.append(code(exc))
        return found

    scheduler, _, _, arn = bench()
    ours = codes(scheduler, arn)
    assert ours == ["ConflictException"] + ["ResourceNotFoundException"] * 3
    with fake_aws_environment(), mock_aws():
        moto = aws_client("scheduler")
        moto.create_schedule_group(Name="alarms")
        assert codes(moto, arn) == ours


def test_bad_expression_is_a_validation_exception_where_moto_accepts_it() -> None:
    from moto import mock_aws

    scheduler, _, _, arn = bench()
    for bad in ("2026-13-01T00:00:00", "tomorrow", "2026-01-01T01:00"):
        with pytest.raises(ClientError) as exc:
            scheduler.create_schedule(**request("s", bad, arn))
        assert code(exc) == "ValidationException"
    with fake_aws_environment(), mock_aws():
        moto = aws_client("scheduler")
        moto.create_schedule(**{**request("s", "2026-13-01T00:00:00", arn), "GroupName": "default"})


def test_what_the_twin_does_not_model_is_refused_clearly() -> None:
    scheduler, _, _, arn = bench()
    refused = [
        {"ScheduleExpressionTimezone": "Europe/Paris"},
        {"ScheduleExpression": "rate(5 minutes)"},
        {"FlexibleTimeWindow": {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5}},
    ]
    for change in refused:
        with pytest.raises(TwinUnsupported):
            scheduler.create_schedule(**{**request("s", "2026-01-01T01:00:00", arn), **change})


def test_fires_anywhere_in_the_named_minute_even_before_the_second_named() -> None:
    """schedule-types.html: 60 second precision; at 1:00 -> between 1:00:00 and 1:00:59."""
    scheduler, sqs, _, arn = bench(seed=7)
    named = START + 3600 + 30  # at(01:00:30)
    for i in range(200):
        scheduler.create_schedule(**request(f"s{i}", "2026-01-01T01:00:30", arn, body=f"b{i}"))
    sqs.clock.advance(7200)
    times = [i.at for i in scheduler.invocations]
    assert len(times) == 200
    assert all(START + 3600 <= t < START + 3660 for t in times)
    assert sum(t < named for t in times) > 50  # about half fire before 01:00:30


def test_at_least_once_duplicate_is_absorbed_by_content_based_deduplication() -> None:
    scheduler, sqs, url, arn = bench(duplicate_rate=1.0)
    scheduler.create_schedule(**request("s", "2026-01-01T01:00:00", arn))
    sqs.clock.advance(7200)
    assert [i.duplicate for i in scheduler.invocations] == [False, True]
    assert all(i.error is None for i in scheduler.invocations)  # both sends accepted
    assert sqs.bodies(url) == ["wake"]  # one delivered


def test_action_after_completion() -> None:
    scheduler, sqs, _, arn = bench()
    scheduler.create_schedule(
        **request("gone", "2026-01-01T01:00:00", arn, ActionAfterCompletion="DELETE")
    )
    scheduler.create_schedule(
        **request("kept", "2026-01-01T01:00:00", arn, body="other", ActionAfterCompletion="NONE")
    )
    assert scheduler.schedule_names("alarms") == ["gone", "kept"]
    sqs.clock.advance(7200)
    assert scheduler.schedule_names("alarms") == ["kept"]
    assert len(scheduler.invocations) == 2


def test_update_replans_and_delete_cancels() -> None:
    scheduler, sqs, url, arn = bench()
    scheduler.create_schedule(**request("moved", "2026-01-01T01:00:00", arn, body="moved"))
    scheduler.create_schedule(**request("deleted", "2026-01-01T01:00:00", arn, body="deleted"))
    scheduler.update_schedule(**request("moved", "2026-01-01T03:00:00", arn, body="moved"))
    scheduler.delete_schedule(Name="deleted", GroupName="alarms")
    sqs.clock.advance(2 * 3600)
    assert sqs.bodies(url) == []
    sqs.clock.advance(3600 + 60)
    assert sqs.bodies(url) == ["moved"]


def test_target_failures_are_retried_then_dead_lettered() -> None:
    scheduler, sqs, _, arn = bench()
    dlq_arn = "arn:aws:sqs:us-east-1:123456789012:schedule-dead-letters"  # a standard queue
    target = {
        "Arn": arn.replace("wake.fifo", "missing.fifo"),
        "RetryPolicy": {"MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": 3600},
        "DeadLetterConfig": {"Arn": dlq_arn},
    }
    scheduler.create_schedule(**request("s", "2026-01-01T01:00:00", arn, target=target))
    sqs.clock.advance(7200)
    assert [i.attempt for i in scheduler.invocations] == [0, 1, 2, 3]
    assert {i.error for i in scheduler.invocations} == {"AWS.SimpleQueueService.NonExistentQueue"}
    assert [(d["body"], d["dead_letter_arn"]) for d in scheduler.dead_letters] == [
        ("wake", dlq_arn)
    ]
    fifo_dlq = {**target, "DeadLetterConfig": {"Arn": arn}}
    with pytest.raises(ClientError) as exc:
        scheduler.create_schedule(**request("t", "2026-01-01T01:00:00", arn, target=fifo_dlq))
    assert code(exc) == "ValidationException"


def test_injected_target_failures_are_retried_until_delivered() -> None:
    scheduler, sqs, url, arn = bench(seed=3, target_failure_rate=0.5)
    for i in range(20):
        scheduler.create_schedule(**request(f"s{i}", "2026-01-01T01:00:00", arn, body=f"b{i}"))
    sqs.clock.advance(86_400)
    assert sorted(sqs.bodies(url)) == sorted(f"b{i}" for i in range(20))
    assert any(i.attempt > 0 for i in scheduler.invocations)


def test_at_in_the_past_never_fires_by_default() -> None:
    """AWS documents nothing for an at() whose time is past; the strict twin accepts it and
    never invokes the target. The other choices exist for comparison."""
    scheduler, sqs, url, arn = bench()
    scheduler.create_schedule(**request("s", "2025-12-31T23:00:00", arn))
    sqs.clock.advance(86_400)
    assert scheduler.invocations == [] and sqs.bodies(url) == []

    rejecting, _, _, arn = bench(past_at="reject")
    with pytest.raises(ClientError) as exc:
        rejecting.create_schedule(**request("s", "2025-12-31T23:00:00", arn))
    assert code(exc) == "ValidationException"

    firing, sqs, url, arn = bench(past_at="fire")
    firing.create_schedule(**request("s", "2025-12-31T23:00:00", arn))
    sqs.clock.advance(0)
    assert sqs.bodies(url) == ["wake"]


def test_the_same_seed_fires_at_the_same_instants() -> None:
    def run(seed: int) -> list[float]:
        scheduler, sqs, _, arn = bench(seed=seed, duplicate_rate=0.3)
        for i in range(10):
            scheduler.create_schedule(**request(f"s{i}", "2026-01-01T01:00:00", arn, f"b{i}"))
        sqs.clock.advance(7200)
        return [i.at for i in scheduler.invocations]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_bide_alarm_input_reaches_the_queue_as_the_body() -> None:
    from bide.aws.scheduler import SchedulerAlarms

    scheduler, sqs, url, arn = bench()
    alarms = SchedulerAlarms(scheduler, group="alarms", queue_arn=arn, role_arn=ROLE)
    alarms.arm("session-1", START + 3600)
    assert alarms.armed_at("session-1") == "at(2026-01-01T01:00:00)"
    sqs.clock.advance(3700)
    (body,) = sqs.bodies(url)
    assert json.loads(body)["session_id"] == "session-1"
    assert alarms.armed_at("session-1") is None  # ActionAfterCompletion DELETE


def test_a_bide_alarm_never_fires_before_its_deadline() -> None:
    from bide.aws.scheduler import SchedulerAlarms

    scheduler, sqs, _, arn = bench(seed=5)
    alarms = SchedulerAlarms(scheduler, group="alarms", queue_arn=arn, role_arn=ROLE)
    deadlines = {f"s{i}": START + 3600 + i + 0.25 for i in range(60)}
    for session, at in deadlines.items():
        alarms.arm(session, at)
    sqs.clock.advance(7200)
    early = [f for f in scheduler.invocations if f.at < deadlines[json.loads(f.body)["session_id"]]]
    assert early == []
