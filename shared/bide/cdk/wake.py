"""How a session gets woken: the SQS FIFO wake queue and EventBridge Scheduler.

Every wake, immediate or scheduled, is a message on one FIFO queue whose message group is the
session, so one worker runs a session at a time; wakes that keep failing go to a FIFO
dead-letter queue. A session's ``at`` alarm is a one-time schedule in this service's own
schedule group, delivered to the queue by a role only that group's schedules may assume; a
fire Scheduler could not deliver after its retries goes to a standard dead-letter queue of its
own (Scheduler refuses a FIFO one:
https://docs.aws.amazon.com/scheduler/latest/UserGuide/configuring-schedule-dlq.html).
The resources are created directly in the BideService's scope (not in a child construct) so
their logical ids, and with them the deployed queues, survive a change of how this code is
laid out.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

# AWS guidance for SQS event sources: visibility timeout >= 6x the function timeout.
VISIBILITY_TIMEOUT_FACTOR = 6

SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"


class WakePath:
    """The wake queue (``WakeQueue``) and its dead letters (``WakeDeadLetters``), the schedule
    group (``ScheduleGroup``), the role Scheduler delivers with (``SchedulerRole``) and the
    schedules' dead letters (``ScheduleDeadLetters``, standard).

    The queue's visibility timeout follows ``worker_timeout``; a message received
    ``max_receive_count`` times without success is dead-lettered.
    """

    def __init__(
        self, scope: Construct, *, worker_timeout: cdk.Duration, max_receive_count: int
    ) -> None:
        self.max_receive_count = max_receive_count
        self.dead_letter_queue, self.queue = self._queues(scope, worker_timeout, max_receive_count)
        self.schedule_group, self.scheduler_role = self._scheduler(scope, self.queue)
        self.schedule_dead_letter_queue = sqs.Queue(
            scope,
            "ScheduleDeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        # Scheduler sends a dead-letter event with the role the schedule names
        # (https://docs.aws.amazon.com/scheduler/latest/UserGuide/configuring-schedule-dlq.html,
        # "Set up execution role permissions").
        self.scheduler_role.add_to_policy(
            iam.PolicyStatement(
                actions=["sqs:SendMessage"], resources=[self.schedule_dead_letter_queue.queue_arn]
            )
        )

    @staticmethod
    def _queues(
        scope: Construct, worker_timeout: cdk.Duration, max_receive_count: int
    ) -> tuple[sqs.Queue, sqs.Queue]:
        dead_letters = sqs.Queue(
            scope,
            "WakeDeadLetters",
            fifo=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        queue = sqs.Queue(
            scope,
            "WakeQueue",
            fifo=True,
            # EventBridge Scheduler requires content-based deduplication on a FIFO target
            # (it sends no deduplication id). Senders that pass an explicit
            # MessageDeduplicationId still override it.
            content_based_deduplication=True,
            # High-throughput FIFO: one message group per session, deduplication per group.
            deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
            fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
            visibility_timeout=cdk.Duration.seconds(
                worker_timeout.to_seconds() * VISIBILITY_TIMEOUT_FACTOR
            ),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=dead_letters, max_receive_count=max_receive_count
            ),
        )
        return dead_letters, queue

    @staticmethod
    def _scheduler(
        scope: Construct, queue: sqs.Queue
    ) -> tuple[scheduler.CfnScheduleGroup, iam.Role]:
        group = scheduler.CfnScheduleGroup(
            scope, "ScheduleGroup", name=cdk.Names.unique_resource_name(scope, max_length=64)
        )
        stack = cdk.Stack.of(scope)
        # Confused-deputy guard: only schedules of this account's group may assume the role.
        role = iam.Role(
            scope,
            "SchedulerRole",
            description="Assumed by EventBridge Scheduler to deliver bide session alarms",
            assumed_by=iam.ServicePrincipal(
                SCHEDULER_PRINCIPAL,
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": stack.account,
                        "aws:SourceArn": group.attr_arn,
                    }
                },
            ),
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue_arn])
        )
        return group, role

    @property
    def schedules_arn(self) -> str:
        """ARN pattern of the schedules in this group (and no other group)."""
        return cdk.Stack.of(self.schedule_group).format_arn(
            service="scheduler",
            resource="schedule",
            resource_name=f"{self.schedule_group.ref}/*",
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )
