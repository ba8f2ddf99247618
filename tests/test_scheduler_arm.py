"""Arming when the schedule vanishes between a refused create and its update.

EventBridge Scheduler refuses ``CreateSchedule`` for a name that exists (``ConflictException``)
and ``UpdateSchedule`` for one that does not (``ResourceNotFoundException``):
https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html and
https://docs.aws.amazon.com/scheduler/latest/APIReference/API_UpdateSchedule.html. Between the
two calls the schedule may go: another run disarms it, or it fires and deletes itself
(``ActionAfterCompletion: DELETE``). The race proof on DynamoDB Local met this as a failed
worker run (its wake redelivered). botocore's Stubber answers in place of the service, with the
requests checked against the service model; nothing is sent.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

from bide.aws.scheduler import ARM_ATTEMPTS, SchedulerAlarms

CREATED = {"ScheduleArn": "arn:aws:scheduler:us-east-1:123456789012:schedule/g/s"}


def alarms() -> tuple[SchedulerAlarms, Stubber]:
    client = boto3.client("scheduler", region_name="us-east-1")
    queue = "arn:aws:sqs:us-east-1:123456789012:wakes.fifo"
    role = "arn:aws:iam::123456789012:role/r"
    return SchedulerAlarms(client, group="g", queue_arn=queue, role_arn=role), Stubber(client)


def expect(stub: Stubber, *calls: tuple[str, str | None]) -> None:
    for operation, error in calls:
        params: dict[str, Any] = {
            "Name": ANY, "GroupName": "g", "ScheduleExpression": ANY,
            "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": ANY,
            "ActionAfterCompletion": "DELETE", "Target": ANY,
        }  # fmt: skip
        if error is None:
            stub.add_response(operation, CREATED, params)
        else:
            stub.add_client_error(operation, error, expected_params=params)


def test_a_schedule_gone_before_its_update_is_created_again() -> None:
    armed, stub = alarms()
    expect(
        stub,
        ("create_schedule", "ConflictException"),
        ("update_schedule", "ResourceNotFoundException"),
        ("create_schedule", None),
    )
    with stub:
        assert armed.arm("s-1", 1_900_000_000.0) is False  # created: it replaced nothing
        stub.assert_no_pending_responses()


def test_an_existing_schedule_is_updated_and_says_so() -> None:
    armed, stub = alarms()
    expect(stub, ("create_schedule", "ConflictException"), ("update_schedule", None))
    with stub:
        assert armed.arm("s-1", 1_900_000_000.0) is True
        stub.assert_no_pending_responses()


def test_a_schedule_that_keeps_vanishing_fails_the_run_after_the_last_attempt() -> None:
    armed, stub = alarms()
    churn = [
        ("create_schedule", "ConflictException"),
        ("update_schedule", "ResourceNotFoundException"),
    ]
    expect(stub, *churn * (ARM_ATTEMPTS - 1), ("create_schedule", "ConflictException"))
    with stub, pytest.raises(ClientError, match="ConflictException"):
        armed.arm("s-1", 1_900_000_000.0)
    stub.assert_no_pending_responses()


def test_other_errors_are_not_retried() -> None:
    armed, stub = alarms()
    expect(
        stub, ("create_schedule", "ConflictException"), ("update_schedule", "ValidationException")
    )
    with stub, pytest.raises(ClientError, match="ValidationException"):
        armed.arm("s-1", 1_900_000_000.0)
    stub.assert_no_pending_responses()
