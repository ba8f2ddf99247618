"""What tells an operator a BideService is in trouble: CloudWatch alarms, optionally to SNS,
and one dashboard.

The handlers turn most failures into answers (a 500, a failed batch item), so Lambda's
``Errors`` rarely moves; the alarms therefore watch what the code itself counts (the EMF
metrics of :mod:`bide.service.observability`, each with exactly the dimensions it is emitted
under: tests/test_infra_monitoring.py runs the code and compares) and what AWS measures
around it:

* the wake queue's dead letters, and the oldest wake's age (``ApproximateAgeOfOldestMessage``,
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html);
* the schedules' dead letters, and Scheduler's ``TargetErrorCount`` and
  ``InvocationDroppedCount`` for the service's schedule group (namespace ``AWS/Scheduler``,
  dimension ``ScheduleGroup``:
  https://docs.aws.amazon.com/scheduler/latest/UserGuide/monitoring-cloudwatch.html);
* each function's ``Errors`` (crashes, timeouts) and ``Throttles``;
* the HTTP API's ``5xx`` and ``4xx`` as a share of ``Count`` (namespace ``AWS/ApiGateway``,
  dimensions ``ApiId`` and ``Stage``:
  https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-metrics.html).

With a topic, every alarm notifies it. The alarms are created directly in the BideService's
scope (not in a child construct) so their logical ids survive a change of how this code is
laid out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from .. import constants as c
from ..service import observability as obs

PERIOD = cdk.Duration.minutes(5)
#: An HTTP error rate alarms only over at least this many requests in a period (a handful of
#: requests, one of them refused, is not a trend).
MIN_REQUESTS = 20
#: 5xx: a share of requests (percent) in one period. 4xx: a share held for three periods
#: (the open webhook route answers guessed tokens with 404; only a lasting surge matters).
SERVER_ERROR_PERCENT = 5
CLIENT_ERROR_PERCENT = 50
#: Worker runs that raised within one period before it alarms (each is retried in-process
#: and redelivered; a few are a flaky dependency, more are an outage).
WORKER_FAILURES_THRESHOLD = 3
SCHEDULER_NAMESPACE = "AWS/Scheduler"
API_NAMESPACE = "AWS/ApiGateway"


@dataclass(frozen=True)
class Watched:
    """What the alarms watch, besides the functions."""

    wake_queue: sqs.IQueue
    dead_letter_queue: sqs.IQueue
    schedule_dead_letter_queue: sqs.IQueue
    schedule_group: scheduler.CfnScheduleGroup
    stage: apigw.HttpStage
    api_function: lambda_.Function
    signal_function: lambda_.Function


def code_metric(name: str, **dimensions: str) -> cloudwatch.Metric:
    """The Sum per period of a count the code emits, under the exact dimensions it is
    emitted with (:func:`bide.service.observability.emitted_dimensions` refuses others)."""
    return cloudwatch.Metric(
        namespace=c.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=obs.emitted_dimensions(name, **dimensions),
        statistic="Sum",
        period=PERIOD,
    )


def _scheduler_metric(group: scheduler.CfnScheduleGroup, name: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=SCHEDULER_NAMESPACE,
        metric_name=name,
        dimensions_map={"ScheduleGroup": group.ref},
        statistic="Sum",
        period=PERIOD,
    )


def _api_metric(stage: apigw.HttpStage, name: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=API_NAMESPACE,
        metric_name=name,
        dimensions_map={"ApiId": stage.api.api_id, "Stage": stage.stage_name},
        statistic="Sum",
        period=PERIOD,
    )


def _error_rate(stage: apigw.HttpStage, name: str) -> cloudwatch.MathExpression:
    """``name`` (``5xx`` or ``4xx``) as a percentage of requests; 0 under MIN_REQUESTS."""
    return cloudwatch.MathExpression(
        expression=f"IF(requests >= {MIN_REQUESTS}, 100 * errors / requests, 0)",
        using_metrics={
            "errors": _api_metric(stage, name),
            "requests": _api_metric(stage, "Count"),
        },
        label=f"{name} % of requests",
        period=PERIOD,
    )


def alarms(
    scope: Construct,
    *,
    watched: Watched,
    functions: Sequence[lambda_.Function],
    topic: sns.ITopic | None,
    wake_age: cdk.Duration,
) -> list[cloudwatch.Alarm]:
    """The service's alarms (each id below), every one notifying ``topic`` when given.
    ``wake_age``: how old the oldest wake in the queue may get before it alarms."""
    at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
    created: list[cloudwatch.Alarm] = []

    def alarm(
        construct_id: str,
        description: str,
        metric: cloudwatch.IMetric,
        threshold: float = 1,
        periods: int = 1,
    ) -> None:
        created.append(
            cloudwatch.Alarm(
                scope,
                construct_id,
                alarm_description=f"bide: {description}",
                metric=metric,
                threshold=threshold,
                evaluation_periods=periods,
                comparison_operator=at_least,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        )

    alarm(
        "WakeDeadLettersAlarm",
        "a session wake failed repeatedly and was dead-lettered",
        watched.dead_letter_queue.metric_approximate_number_of_messages_visible(
            period=cdk.Duration.minutes(1), statistic="Maximum"
        ),
    )
    for fn in functions:
        alarm(
            f"{fn.node.id}-errors",
            f"the {fn.node.id} function reported errors",
            fn.metric_errors(period=PERIOD, statistic="Sum"),
        )
    # The ids above predate the rest; new alarms follow, so no deployed alarm is replaced.
    alarm(
        "WakeAgeAlarm",
        f"a wake has waited in the queue for {wake_age.to_human_string()} or more",
        watched.wake_queue.metric_approximate_age_of_oldest_message(
            period=cdk.Duration.minutes(1), statistic="Maximum"
        ),
        threshold=wake_age.to_seconds(),
        periods=3,
    )
    alarm(
        "WorkerFailuresAlarm",
        f"worker runs raised {WORKER_FAILURES_THRESHOLD} or more times in 5 minutes",
        code_metric(obs.WORKER_FAILURES),
        threshold=WORKER_FAILURES_THRESHOLD,
    )
    alarm(
        "MalformedWakesAlarm",
        "a wake message could not be read and was dropped",
        code_metric(obs.MALFORMED_WAKES),
    )
    for fn in (watched.api_function, watched.signal_function):
        alarm(
            f"{fn.node.id}-failures",
            f"the {fn.node.id} function answered a request with 500",
            code_metric(obs.HANDLER_FAILURES, function=fn.node.id),
        )
    for fn in functions:
        alarm(
            f"{fn.node.id}-throttles",
            f"the {fn.node.id} function was throttled",
            fn.metric_throttles(period=PERIOD, statistic="Sum"),
        )
    alarm(
        "Api5xxAlarm",
        f"{SERVER_ERROR_PERCENT}% or more of API requests got a 5xx",
        _error_rate(watched.stage, "5xx"),
        threshold=SERVER_ERROR_PERCENT,
    )
    alarm(
        "Api4xxAlarm",
        f"{CLIENT_ERROR_PERCENT}% or more of API requests got a 4xx for 15 minutes",
        _error_rate(watched.stage, "4xx"),
        threshold=CLIENT_ERROR_PERCENT,
        periods=3,
    )
    alarm(
        "ScheduleTargetErrorsAlarm",
        "Scheduler could not deliver session alarms to the wake queue for 15 minutes",
        _scheduler_metric(watched.schedule_group, "TargetErrorCount"),
        periods=3,
    )
    alarm(
        "ScheduleDroppedAlarm",
        "Scheduler dropped a session alarm after its retries",
        _scheduler_metric(watched.schedule_group, "InvocationDroppedCount"),
    )
    alarm(
        "ScheduleDeadLettersAlarm",
        "a session alarm could not be delivered and was dead-lettered (its session sleeps on)",
        watched.schedule_dead_letter_queue.metric_approximate_number_of_messages_visible(
            period=cdk.Duration.minutes(1), statistic="Maximum"
        ),
    )
    alarm(
        "WorkflowNondeterminismAlarm",
        "a workflow run failed because its body no longer replays its history "
        "(a deploy changed a body with runs in flight: GET /sessions/{id}/workflow lists them)",
        code_metric(obs.WORKFLOW_NONDETERMINISM),
    )
    if topic is not None:
        for created_alarm in created:
            created_alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
    return created


def dashboard(
    scope: Construct,
    *,
    watched: Watched,
    functions: Sequence[lambda_.Function],
    alarms: Sequence[cloudwatch.Alarm],
) -> cloudwatch.Dashboard:
    """``Dashboard``: the alarms' states, then wakes, failures, the queue, the API and the
    functions, one row each."""
    board = cloudwatch.Dashboard(scope, "Dashboard", period_override=cloudwatch.PeriodOverride.AUTO)

    def graph(title: str, metrics: Sequence[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(title=title, left=list(metrics), width=8)

    board.add_widgets(cloudwatch.AlarmStatusWidget(alarms=list(alarms), width=24))
    board.add_widgets(
        graph(
            "Wakes and parks",
            [code_metric(obs.WAKES, reason=r) for r in ("signal", "alarm", "submit")]
            + [code_metric(obs.PARKS)],
        ),
        graph(
            "Failures",
            [
                code_metric(obs.WORKER_FAILURES),
                code_metric(obs.DEAD_LETTERED_WAKES),
                code_metric(obs.MALFORMED_WAKES),
                code_metric(obs.COMMIT_CONFLICTS),
                code_metric(obs.WORKFLOW_NONDETERMINISM),
            ],
        ),
        graph(
            "Wake queue",
            [
                watched.wake_queue.metric_approximate_number_of_messages_visible(),
                watched.wake_queue.metric_approximate_age_of_oldest_message(),
                watched.dead_letter_queue.metric_approximate_number_of_messages_visible(),
                watched.schedule_dead_letter_queue.metric_approximate_number_of_messages_visible(),
            ],
        ),
    )
    board.add_widgets(
        graph(
            "HTTP API",
            [_api_metric(watched.stage, n) for n in ("Count", "4xx", "5xx")],
        ),
        graph(
            "Scheduler",
            [
                _scheduler_metric(watched.schedule_group, n)
                for n in ("TargetErrorCount", "InvocationDroppedCount")
            ],
        ),
        graph(
            "Functions: errors and throttles",
            [m for fn in functions for m in (fn.metric_errors(), fn.metric_throttles())],
        ),
    )
    return board
