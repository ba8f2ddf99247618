"""Limits and cost controls of a BideService: the worker's maximum concurrency on its SQS
event source, reserved concurrency, recursive-loop detection, the expiry of offloaded values,
and the schedules' dead-letter queue and retry policy (in the stack and in every schedule the
worker creates).

Everything synthesizes with ``bide:skipBundling``; the schedule requests go to the Scheduler
twin (bide.testing.aws), never to AWS.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import random
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from bide import constants as c
from bide.aws.scheduler import SchedulerAlarms
from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT, BideService
from bide.service.config import ConfigError, settings_from_env
from bide.testing.aws.clock import SimClock
from bide.testing.aws.scheduler import SchedulerTwin
from bide.testing.aws.sqs import SqsTwin
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


def _stack(**options: Any) -> BideStack:
    app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
    return BideStack(app, "Bide", app_paths=[ROOT / "examples"], service_options=options)


@pytest.fixture(scope="module")
def lim_default() -> tuple[BideStack, Template]:
    stack = _stack()
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="module")
def lim_custom() -> tuple[BideStack, Template]:
    stack = _stack(
        worker_max_concurrency=7,
        reserved_concurrency={c.FUNCTION_WORKER: 20, c.FUNCTION_API: 5},
        value_expiration=cdk.Duration.days(30),
        session_retention=cdk.Duration.days(7),
    )
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="module")
def lim_forever() -> tuple[BideStack, Template]:
    stack = _stack(session_retention=None)
    return stack, Template.from_stack(stack)


def _id(stack: cdk.Stack, construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(element)


def _props(stack: cdk.Stack, template: Template, construct: Any) -> dict[str, Any]:
    return template.to_json()["Resources"][_id(stack, construct)]["Properties"]


def test_the_worker_runs_at_most_max_concurrency_at_once(lim_default, lim_custom):
    for (_, template), expected in (
        (lim_default, c.DEFAULT_WORKER_MAX_CONCURRENCY),
        (lim_custom, 7),
    ):
        [mapping] = template.find_resources("AWS::Lambda::EventSourceMapping").values()
        assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": expected}


def test_reserved_concurrency_only_where_asked(lim_default, lim_custom):
    for stack, template in (lim_default, lim_custom):
        service = stack.service
        reserved = {
            name: _props(stack, template, fn).get("ReservedConcurrentExecutions")
            for name, fn in (
                (c.FUNCTION_WORKER, service.worker),
                (c.FUNCTION_SIGNAL, service.signal_function),
                (c.FUNCTION_API, service.api_function),
            )
        }
        expected = {c.FUNCTION_WORKER: None, c.FUNCTION_SIGNAL: None, c.FUNCTION_API: None}
        if stack is lim_custom[0]:
            expected.update({c.FUNCTION_WORKER: 20, c.FUNCTION_API: 5})
        assert reserved == expected


def test_recursive_loop_detection_terminates_except_on_the_worker(lim_default):
    stack, template = lim_default
    service = stack.service
    assert _props(stack, template, service.worker)["RecursiveLoop"] == "Allow"
    for fn in (service.signal_function, service.api_function):
        assert _props(stack, template, fn)["RecursiveLoop"] == "Terminate"


def _ended_rule(days: int) -> dict[str, Any]:
    return {
        "ExpirationInDays": days,
        "Id": "ended-session-values",
        "Status": "Enabled",
        "TagFilters": [{"Key": "bide-retention", "Value": "ended"}],
    }


def test_offloaded_values_expire_only_when_asked(lim_default, lim_custom, lim_forever):
    abort = {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}, "Status": "Enabled"}
    stack, template = lim_default
    rules = _props(stack, template, stack.service.bucket)["LifecycleConfiguration"]["Rules"]
    assert rules == [abort, _ended_rule(c.DEFAULT_RETENTION_DAYS + 1)]
    stack, template = lim_custom
    rules = _props(stack, template, stack.service.bucket)["LifecycleConfiguration"]["Rules"]
    assert rules == [abort, {"ExpirationInDays": 30, "Status": "Enabled"}, _ended_rule(8)]
    stack, template = lim_forever
    rules = _props(stack, template, stack.service.bucket)["LifecycleConfiguration"]["Rules"]
    assert rules == [abort]


def test_ended_sessions_expire_by_ttl_after_the_retention(lim_default, lim_custom, lim_forever):
    for (stack, template), seconds in (
        (lim_default, c.DEFAULT_RETENTION_DAYS * 86_400),
        (lim_custom, 7 * 86_400),
        (lim_forever, 0),
    ):
        table = _props(stack, template, stack.service.table)
        # TTL is on either way: only items of ended sessions carry the attribute.
        assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
        service = stack.service
        for fn in (service.worker, service.signal_function, service.api_function):
            env = _props(stack, template, fn)["Environment"]["Variables"]
            assert env[c.ENV_RETENTION_SECONDS] == str(seconds)
            # What the functions' configuration then reads back (the same check they run).
            raw = {k: v for k, v in env.items() if isinstance(v, str)}
            settings = settings_from_env(
                {
                    **raw,
                    c.ENV_TABLE: "tbl",
                    c.ENV_BUCKET: "bucket",
                    c.ENV_QUEUE_URL: "https://sqs.example/q.fifo",
                }
            )
            assert settings.retention_seconds == seconds


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"worker_max_concurrency": 1}, "worker_max_concurrency must be 2 to 1000, not 1"),
        ({"worker_max_concurrency": 1001}, "worker_max_concurrency must be 2 to 1000"),
        ({"reserved_concurrency": {"workers": 3}}, "reserved_concurrency: 'workers' is not one of"),
        ({"reserved_concurrency": {"api": -1}}, r"reserved_concurrency\['api'\] must be >= 0"),
        ({"alarm_email": "ops at example"}, "alarm_email .* is not an e-mail address"),
        ({"session_retention": cdk.Duration.hours(2)}, "session_retention must be at least 1 day"),
        ({"session_retention": cdk.Duration.days(4000)}, "session_retention must be at least"),
    ],
)
def test_bad_limits_are_refused_naming_the_prop(options, message):
    stack = cdk.Stack(cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True}), "S")
    with pytest.raises(ValueError, match=message):
        BideService(
            stack,
            "B",
            app_module="examples.agent_app:app",
            app_paths=[ROOT / "examples"],
            **options,
        )


# --- the schedules' dead letters ---------------------------------------------------------------


def test_schedule_dead_letters_are_a_standard_queue_the_scheduler_role_may_send_to(lim_default):
    stack, template = lim_default
    service = stack.service
    dlq = _props(stack, template, service.schedule_dead_letter_queue)
    assert "FifoQueue" not in dlq  # Scheduler refuses a FIFO dead-letter queue
    assert dlq["SqsManagedSseEnabled"] is True
    dlq_arn = {"Fn::GetAtt": [_id(stack, service.schedule_dead_letter_queue), "Arn"]}
    role = _id(stack, service.scheduler_role)
    statements = [
        s
        for p in template.find_resources(
            "AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": role}]}}
        ).values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert {"Action": "sqs:SendMessage", "Effect": "Allow", "Resource": dlq_arn} in statements
    env = _props(stack, template, service.worker)["Environment"]["Variables"]
    assert env[c.ENV_SCHEDULE_DLQ_ARN] == dlq_arn
    for fn in (service.signal_function, service.api_function):
        assert c.ENV_SCHEDULE_DLQ_ARN not in _props(stack, template, fn)["Environment"]["Variables"]


def _twin(failure_rate: float = 0.0) -> tuple[SimClock, SqsTwin, SchedulerTwin, str]:
    clock = SimClock()
    rng = random.Random(7)
    sqs = SqsTwin(clock, rng)
    url = sqs.create_queue(
        QueueName="wakes.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return clock, sqs, SchedulerTwin(clock, rng, sqs, target_failure_rate=failure_rate), arn


DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:schedule-dead-letters"


def _alarms(
    scheduler: SchedulerTwin, queue_arn: str, dead_letter_arn: str | None
) -> SchedulerAlarms:
    return SchedulerAlarms(
        scheduler,
        group="bide",
        queue_arn=queue_arn,
        role_arn="arn:aws:iam::123456789012:role/bide-scheduler",
        dead_letter_arn=dead_letter_arn,
    )


def test_every_schedule_carries_the_retry_policy_and_the_dead_letter_queue():
    clock, _sqs, scheduler, queue_arn = _twin()
    alarms = _alarms(scheduler, queue_arn, DLQ_ARN)
    request = alarms._request("s1", clock.now() + 3600)
    assert request["Target"]["RetryPolicy"] == {
        "MaximumEventAgeInSeconds": 86_400,
        "MaximumRetryAttempts": 185,
    }
    assert request["Target"]["DeadLetterConfig"] == {"Arn": DLQ_ARN}
    # The twin validates both (ranges, and no FIFO dead-letter queue) on create and update.
    alarms.arm("s1", clock.now() + 3600)
    alarms.arm("s1", clock.now() + 7200)
    assert "DeadLetterConfig" not in _alarms(scheduler, queue_arn, None)._request("s2", 0)["Target"]


def test_an_alarm_scheduler_cannot_deliver_goes_to_the_dead_letter_queue():
    clock, _sqs, scheduler, queue_arn = _twin(failure_rate=1.0)
    _alarms(scheduler, queue_arn, DLQ_ARN).arm("s1", clock.now() + 60)
    clock.advance(2 * 86_400)
    [dead] = scheduler.dead_letters
    assert dead["dead_letter_arn"] == DLQ_ARN
    assert '"session_id": "s1"' in dead["body"]


def test_the_worker_reads_the_schedule_dead_letter_arn_and_refuses_a_fifo_one():
    base = {
        c.ENV_APP: "examples.agent_app:app",
        c.ENV_TABLE: "bide-sessions",
        c.ENV_BUCKET: "bide-values",
        c.ENV_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/w.fifo",
    }
    assert settings_from_env({**base, c.ENV_SCHEDULE_DLQ_ARN: DLQ_ARN}).schedule_dlq_arn == DLQ_ARN
    with pytest.raises(ConfigError, match=c.ENV_SCHEDULE_DLQ_ARN):
        settings_from_env({**base, c.ENV_SCHEDULE_DLQ_ARN: DLQ_ARN + ".fifo"})
