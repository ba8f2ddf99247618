"""What tells an operator a BideService is in trouble: CloudWatch alarms, optionally to SNS.

One alarm fires when a wake is dead-lettered (a session stopped moving), one per function
when it reports errors. With a topic, every alarm notifies it. The alarms are created
directly in the BideService's scope (not in a child construct) so their logical ids survive
a change of how this code is laid out.
"""

from __future__ import annotations

from collections.abc import Iterable

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct


def alarms(
    scope: Construct,
    *,
    dead_letter_queue: sqs.IQueue,
    functions: Iterable[lambda_.Function],
    topic: sns.ITopic | None,
) -> list[cloudwatch.Alarm]:
    """``WakeDeadLettersAlarm`` and ``<function>-errors`` for each function, in that order."""
    created = [
        cloudwatch.Alarm(
            scope,
            "WakeDeadLettersAlarm",
            alarm_description="bide: a session wake failed repeatedly and was dead-lettered",
            metric=dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=cdk.Duration.minutes(1), statistic="Maximum"
            ),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
    ]
    for fn in functions:
        created.append(
            cloudwatch.Alarm(
                scope,
                f"{fn.node.id}-errors",
                alarm_description=f"bide: the {fn.node.id} function reported errors",
                metric=fn.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        )
    if topic is not None:
        for alarm in created:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
    return created
