"""cdk-nag (AwsSolutions) acknowledgments for a BideService, each with its reason.

cdk-nag 3 reads CDK's native ``Validations.of(construct).acknowledge(...)``. Findings with a
detail (``AwsSolutions-IAM5[Resource::...]``) are acknowledged one by one, naming the exact
resource, so a new wildcard anywhere else still fails the check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from constructs import IConstruct

from ..constants import WEBHOOK_TOKEN_BYTES

if TYPE_CHECKING:
    from .service import BideService

RUNTIME_REASON = (
    "python3.12 is pinned on purpose: the dependency layer is built from cp312 manylinux2014 "
    "aarch64 wheels (pydantic-core is compiled); runtime and wheels move together."
)
OBJECTS_REASON = (
    "Records over the store's offload threshold go to S3 under content-addressed keys "
    "<session>/<task>/<rev>-<sha>; the session id is only known at run time, so access is to "
    "this one bucket's objects (s3:GetObject, s3:PutObject only: no delete, no listing, no "
    "bucket-level actions)."
)
SCHEDULES_REASON = (
    "One EventBridge Scheduler schedule per session, named at run time; the wildcard is limited "
    "to the schedules of this service's own schedule group."
)
WEBHOOK_REASON = (
    "Capability webhook: the path's unguessable token "
    f"({WEBHOOK_TOKEN_BYTES * 8}-bit HMAC under the deployment's key) is the credential, "
    "resolved by the signal function to one session/task/signal/key; callers such as CI "
    "systems and SaaS webhooks cannot sign SigV4. The route has its own throttle and the "
    "access log records the route key, never the path with the token."
)
WEBHOOK_KEY_REASON = (
    "The webhook key is rotated by hand, not by a rotation function: a rotation must keep the "
    "old key in the secret's 'previous' list while webhooks minted under it live (automatic "
    "rotation would replace it and silently end every live webhook); docs/deploy.md says how."
)
XRAY_REASON = (
    "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions; "
    "added only when tracing is turned on."
)


SCHEDULE_DLQ_REASON = (
    "This queue is itself a dead-letter queue: EventBridge Scheduler's DeadLetterConfig for the "
    "session alarms, set per schedule at run time (bide.aws.scheduler), which cdk-nag cannot "
    "see. Its depth raises the ScheduleDeadLettersAlarm."
)
ALARM_TOPIC_REASON = (
    "The alarm topic carries CloudWatch alarm notifications only (alarm names and states, no "
    "session data). CloudWatch cannot publish to a topic encrypted with the AWS managed SNS "
    "key; pass your own alarm_topic encrypted with a customer managed key if you need one."
)


def acknowledge_alarm_topic(topic: IConstruct) -> None:
    """The alarm topic BideService creates for ``alarm_email`` is not KMS-encrypted."""
    acknowledge(topic, "AwsSolutions-SNS2", ALARM_TOPIC_REASON)


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one finding on ``scope`` and everything below it."""
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def _ref(construct: IConstruct) -> str:
    """How cdk-nag prints a reference to ``construct``'s CloudFormation resource."""
    resource = construct.node.default_child
    assert isinstance(resource, cdk.CfnElement)
    return cdk.Stack.of(construct).get_logical_id(resource)


def acknowledge_service(service: BideService) -> None:
    """The AwsSolutions findings a BideService leaves, and why each is intended."""
    bucket_objects = f"AwsSolutions-IAM5[Resource::<{_ref(service.bucket)}.Arn>/*]"
    stack = cdk.Stack.of(service)
    group_id = stack.get_logical_id(service.schedule_group)
    # A stack with an explicit environment has its region and account in the ARN as text.
    region = "<AWS::Region>" if cdk.Token.is_unresolved(stack.region) else stack.region
    account = "<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account) else stack.account
    schedules = (
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:{region}:"
        f"{account}:schedule/<{group_id}>/*]"
    )
    for fn in (service.worker, service.signal_function, service.api_function):
        acknowledge(fn, "AwsSolutions-L1", RUNTIME_REASON)
        assert fn.role is not None
        acknowledge(fn.role, bucket_objects, OBJECTS_REASON)
        if service.tracing:
            acknowledge(fn.role, "AwsSolutions-IAM5[Resource::*]", XRAY_REASON)
    assert service.worker.role is not None
    acknowledge(service.worker.role, schedules, SCHEDULES_REASON)
    acknowledge(service.webhook_route, "AwsSolutions-APIG4", WEBHOOK_REASON)
    acknowledge(service.webhook_failure_route, "AwsSolutions-APIG4", WEBHOOK_REASON)
    acknowledge(service.webhook_beat_route, "AwsSolutions-APIG4", WEBHOOK_REASON)
    acknowledge(service.schedule_dead_letter_queue, "AwsSolutions-SQS3", SCHEDULE_DLQ_REASON)
    acknowledge(service.webhook_key, "AwsSolutions-SMG4", WEBHOOK_KEY_REASON)


MODELS_REASON = (
    "A cross-region inference profile (model_access) sends each request to its foundation "
    "model in some region of its geography, and IAM checks that model in that region; the "
    "grant names that one model in every region (the profile itself only in this one)."
)


def acknowledge_models(role: IConstruct, resources: list[str]) -> None:
    """The any-region foundation model of each inference profile in ``model_access``."""
    for arn in resources:
        if ":bedrock:*::foundation-model/" in arn:
            model = arn.rsplit("/", 1)[1]
            finding = (
                "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:bedrock:*::"
                f"foundation-model/{model}]"
            )
            acknowledge(role, finding, MODELS_REASON)
