"""The CDK stack: every resource and grant, cdk-nag AwsSolutions, and cfn-lint on the app.

Everything synthesizes with ``bide:skipBundling`` (no installs, no network) and nothing here
talks to AWS: the stack is environment-agnostic and CDK never looks anything up.

cdk-nag, cfn-lint and the construct in a user's own app are in ``tests/test_infra_checks.py``.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from infra_kit import example_stack as _stack
from infra_kit import logical_id as _id
from infra_kit import resource as _resource

from bide import constants as c
from bide.aws.dynamodb import table_definition
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}


@pytest.fixture(scope="module")
def stack() -> BideStack:
    return _stack()


@pytest.fixture(scope="module")
def template(stack: BideStack) -> Template:
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def dev_stack() -> BideStack:
    """The other switches: X-Ray tracing on, data deleted with the stack."""
    return _stack(tracing=True, retain_data=False)


@pytest.fixture(scope="module")
def dev_template(dev_stack: BideStack) -> Template:
    return Template.from_stack(dev_stack)


# --- helpers ---------------------------------------------------------------------------------


def _arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def _statements(template: Template, role_id: str) -> list[dict[str, Any]]:
    policies = template.find_resources(
        "AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": role_id}]}}
    )
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def _grants(template: Template, role_id: str) -> dict[str, list[Any]]:
    """action -> the resources it is allowed on, over all of a role's statements."""
    grants: dict[str, list[Any]] = {}
    for statement in _statements(template, role_id):
        assert statement["Effect"] == "Allow"
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        for action in _actions(statement):
            grants.setdefault(action, []).extend(resources)
    return grants


def _functions(stack: BideStack) -> dict[str, Any]:
    service = stack.service
    return {
        c.FUNCTION_WORKER: service.worker,
        c.FUNCTION_SIGNAL: service.signal_function,
        c.FUNCTION_API: service.api_function,
    }


# --- data ------------------------------------------------------------------------------------


def test_table_keys_billing_recovery_encryption_and_retention(stack, template):
    definition = table_definition("bide")
    resource = _resource(template, _id(stack, stack.service.table))
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"
    props = resource["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["KeySchema"] == definition["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(
        definition["AttributeDefinitions"], key=str
    )
    # The store's sparse local index must exist: local indexes cannot be added later.
    assert props["LocalSecondaryIndexes"] == definition["LocalSecondaryIndexes"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert props["DeletionProtectionEnabled"] is True


def test_dev_mode_deletes_data_with_the_stack(dev_stack, dev_template):
    table = _resource(dev_template, _id(dev_stack, dev_stack.service.table))
    assert table["DeletionPolicy"] == "Delete"
    assert table["Properties"]["DeletionProtectionEnabled"] is False
    for bucket in (dev_stack.service.bucket, dev_stack.service.access_log_bucket):
        assert _resource(dev_template, _id(dev_stack, bucket))["DeletionPolicy"] == "Delete"
    # Non-empty buckets can only be deleted when emptied first.
    assert dev_template.find_resources("Custom::S3AutoDeleteObjects")


def test_stateful_resources_keep_their_logical_ids(stack, template):
    """Logical ids come from construct paths; a changed id makes CloudFormation replace the
    resource on update (a new, empty table or queue; a new group without the schedules). The
    concern modules create these directly in BideService, so the ids are those of one
    construct holding everything."""
    service = stack.service
    assert {
        name: _id(stack, getattr(service, name))
        for name in (
            "table",
            "bucket",
            "access_log_bucket",
            "queue",
            "dead_letter_queue",
            "schedule_group",
        )
    } == {
        "table": "BideTableE2409AEF",
        "bucket": "BideBucketBB15E186",
        "access_log_bucket": "BideAccessLogsD3565176",
        "queue": "BideWakeQueueD0116B5D",
        "dead_letter_queue": "BideWakeDeadLetters7BFC6028",
        "schedule_group": "BideScheduleGroup1379C796",
    }
    # The group's name is derived from the construct path too, and is what schedules live in.
    assert _resource(template, "BideScheduleGroup1379C796")["Properties"]["Name"] == "Bide859E4D7B"


def test_buckets_are_encrypted_private_and_tls_only(stack, template):
    service = stack.service
    for bucket in (service.bucket, service.access_log_bucket):
        logical_id = _id(stack, bucket)
        props = _resource(template, logical_id)["Properties"]
        assert props["BucketEncryption"] == {
            "ServerSideEncryptionConfiguration": [
                {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
            ]
        }
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        template.has_resource_properties(
            "AWS::S3::BucketPolicy",
            {
                "Bucket": {"Ref": logical_id},
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "s3:*",
                                    "Principal": {"AWS": "*"},
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            ),
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Condition": {
                                        "NumericLessThan": {"s3:TlsVersion": 1.2},
                                    },
                                }
                            ),
                        ]
                    )
                },
            },
        )
    data = _resource(template, _id(stack, service.bucket))["Properties"]
    assert data["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": _id(stack, service.access_log_bucket)},
        "LogFilePrefix": "values/",
    }
    assert data["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    # Referenced values must outlive any expiry rule: by default only values tagged as an
    # ended session's expire, after the retention and a day (tests/test_infra_limits.py).
    ended = {"Id": "ended-session-values", "ExpirationInDays": c.DEFAULT_RETENTION_DAYS + 1}
    ended |= {"Status": "Enabled", "TagFilters": [{"Key": "bide-retention", "Value": "ended"}]}
    abort = {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}, "Status": "Enabled"}
    assert data["LifecycleConfiguration"] == {"Rules": [abort, ended]}


# --- wake path -------------------------------------------------------------------------------


def test_wake_queue_is_fifo_with_dead_letters(stack, template):
    service = stack.service
    dlq_id = _id(stack, service.dead_letter_queue)
    queue = _resource(template, _id(stack, service.queue))["Properties"]
    assert queue["FifoQueue"] is True
    # Scheduler sends no deduplication id; a FIFO target must deduplicate by content.
    assert queue["ContentBasedDeduplication"] is True
    assert queue["DeduplicationScope"] == "messageGroup"
    assert queue["FifoThroughputLimit"] == "perMessageGroupId"
    assert queue["VisibilityTimeout"] == 6 * c.WORKER_TIMEOUT_SECONDS
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"] == {"deadLetterTargetArn": _arn(dlq_id), "maxReceiveCount": 5}
    dlq = _resource(template, dlq_id)["Properties"]
    assert dlq["FifoQueue"] is True
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    for queue_id in (_id(stack, service.queue), dlq_id):
        template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": queue_id}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "sqs:*",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                },
            },
        )


def test_worker_consumes_the_queue_with_partial_batch_failures(stack, template):
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": _arn(_id(stack, stack.service.queue)),
            "FunctionName": {"Ref": _id(stack, stack.service.worker)},
            "BatchSize": 10,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


def test_schedule_group_and_scheduler_role(stack, template):
    service = stack.service
    group_id = _id(stack, service.schedule_group)
    template.resource_count_is("AWS::Scheduler::ScheduleGroup", 1)
    group = _resource(template, group_id)["Properties"]
    assert 0 < len(group["Name"]) <= 64
    role_id = _id(stack, service.scheduler_role)
    role = _resource(template, role_id)["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
            "Condition": {
                "StringEquals": {
                    "aws:SourceAccount": {"Ref": "AWS::AccountId"},
                    "aws:SourceArn": _arn(group_id),
                }
            },
        }
    ]
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role
    # Its permissions: send to the wake queue, and to the schedules' dead-letter queue.
    assert _statements(template, role_id) == [
        {
            "Action": "sqs:SendMessage",
            "Effect": "Allow",
            "Resource": _arn(_id(stack, queue)),
        }
        for queue in (service.queue, service.schedule_dead_letter_queue)
    ]


# --- functions -------------------------------------------------------------------------------


def test_functions_runtime_architecture_handler_and_layer(stack, template):
    template.resource_count_is("AWS::Lambda::Function", 3)
    layer_id = _id(stack, stack.service.layer)
    template.has_resource_properties(
        "AWS::Lambda::LayerVersion",
        {"CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["arm64"]},
    )
    for name, fn in _functions(stack).items():
        props = _resource(template, _id(stack, fn))["Properties"]
        assert props["Runtime"] == "python3.12", name
        assert props["Architectures"] == ["arm64"], name
        assert props["Handler"] == c.HANDLER == "handler.handler", name
        assert props["Layers"] == [{"Ref": layer_id}], name
        assert props["Role"] == _arn(_id(stack, fn.role)), name
        assert "TracingConfig" not in props, name
        log_group = _resource(template, props["LoggingConfig"]["LogGroup"]["Ref"])
        assert log_group["Properties"]["RetentionInDays"] == 30
    worker = _resource(template, _id(stack, stack.service.worker))["Properties"]
    assert worker["Timeout"] == c.WORKER_TIMEOUT_SECONDS
    assert worker["RecursiveLoop"] == "Allow"  # it re-arms itself through its own queue
    for fn in (stack.service.signal_function, stack.service.api_function):
        props = _resource(template, _id(stack, fn))["Properties"]
        assert props["Timeout"] < 30  # HTTP API integrations give up after 30 s
        assert props["RecursiveLoop"] == "Terminate"  # Lambda's default, stated


def test_function_environment(stack, template):
    service = stack.service
    expected = {
        c.ENV_APP: "examples.agent_app:app",
        c.ENV_TABLE: {"Ref": _id(stack, service.table)},
        c.ENV_BUCKET: {"Ref": _id(stack, service.bucket)},
        c.ENV_QUEUE_URL: {"Ref": _id(stack, service.queue)},
        c.ENV_QUEUE_ARN: _arn(_id(stack, service.queue)),
        c.ENV_SCHEDULE_GROUP: {"Ref": _id(stack, service.schedule_group)},
        c.ENV_SCHEDULER_ROLE_ARN: _arn(_id(stack, service.scheduler_role)),
        c.ENV_WEBHOOK_BASE_URL: {"Fn::GetAtt": [_id(stack, service.http_api), "ApiEndpoint"]},
        c.ENV_WEBHOOK_KEY_SECRET: {"Ref": _id(stack, service.webhook_key)},
        c.ENV_TRACING: "0",
        c.ENV_RETENTION_SECONDS: str(c.DEFAULT_RETENTION_DAYS * 86_400),
        "POWERTOOLS_SERVICE_NAME": c.SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": c.METRICS_NAMESPACE,
    }
    for name, fn in _functions(stack).items():
        env = _resource(template, _id(stack, fn))["Properties"]["Environment"]["Variables"]
        extra = {
            c.ENV_SAFETY_MARGIN_MS: str(c.DEFAULT_SAFETY_MARGIN_MS),
            # The worker dead-letters on the last attempt: the redrive policy's count.
            c.ENV_DEAD_LETTER_URL: {"Ref": _id(stack, service.dead_letter_queue)},
            c.ENV_MAX_RECEIVE_COUNT: "5",
            c.ENV_SCHEDULE_DLQ_ARN: _arn(_id(stack, service.schedule_dead_letter_queue)),
        }
        assert env == {**expected, **(extra if name == c.FUNCTION_WORKER else {})}, name
    (queue,) = template.find_resources(
        "AWS::SQS::Queue", {"Properties": {"ContentBasedDeduplication": True}}
    ).values()
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 5


def test_tracing_is_opt_in(dev_stack, dev_template):
    for name, fn in _functions(dev_stack).items():
        props = _resource(dev_template, _id(dev_stack, fn))["Properties"]
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        assert props["Environment"]["Variables"][c.ENV_TRACING] == "1", name
        grants = _grants(dev_template, _id(dev_stack, fn.role))
        assert grants["xray:PutTraceSegments"] == ["*"]


# --- least privilege -------------------------------------------------------------------------


# Each role's exact grants, derived from what each function's code calls, are checked in
# tests/test_infra_security.py.


def test_function_roles_have_no_managed_policies_and_no_wildcards(stack, template):
    for fn in _functions(stack).values():
        role_id = _id(stack, fn.role)
        role = _resource(template, role_id)["Properties"]
        assert "ManagedPolicyArns" not in role
        assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
            "Service": "lambda.amazonaws.com"
        }
        for resources in _grants(template, role_id).values():
            assert "*" not in resources
    # Only the Lambda roles and the Scheduler role exist: nothing else is granted anything.
    template.resource_count_is("AWS::IAM::Role", 4)


# --- HTTP API --------------------------------------------------------------------------------


def test_routes_and_their_authorization(stack, template):
    service = stack.service
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    by_key = {r["Properties"]["RouteKey"]: r["Properties"] for r in routes.values()}
    assert {key: props["AuthorizationType"] for key, props in by_key.items()} == {
        "POST /hooks/{token}": "NONE",
        "POST /hooks/{token}/failure": "NONE",
        "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}": "AWS_IAM",
        "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/failure": "AWS_IAM",
        "POST /hooks/{token}/heartbeat": "NONE",
        "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/heartbeat": "AWS_IAM",
        "ANY /sessions": "AWS_IAM",
        "ANY /sessions/{proxy+}": "AWS_IAM",
    }
    integrations = template.find_resources("AWS::ApiGatewayV2::Integration")

    def target_function(route_key: str) -> str:
        target = by_key[route_key]["Target"]["Fn::Join"][1][1]["Ref"]
        props = integrations[target]["Properties"]
        assert props["IntegrationType"] == "AWS_PROXY"
        assert props["PayloadFormatVersion"] == "2.0"
        return props["IntegrationUri"]["Fn::GetAtt"][0]

    signal_id, api_id = _id(stack, service.signal_function), _id(stack, service.api_function)
    assert target_function("POST /hooks/{token}") == signal_id
    assert target_function("POST /hooks/{token}/failure") == signal_id
    for suffix in ("", "/failure", "/heartbeat"):
        route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}" + suffix
        assert target_function(route) == signal_id
    assert target_function("POST /hooks/{token}/heartbeat") == signal_id
    assert target_function("ANY /sessions") == api_id
    assert target_function("ANY /sessions/{proxy+}") == api_id
    # API Gateway may invoke exactly these two functions.
    permissions = template.find_resources("AWS::Lambda::Permission")
    invoked = {p["Properties"]["FunctionName"]["Fn::GetAtt"][0] for p in permissions.values()}
    assert invoked == {signal_id, api_id}
    for permission in permissions.values():
        assert permission["Properties"]["Principal"] == "apigateway.amazonaws.com"


def test_stage_access_logs_without_tokens_and_throttling(stack, template):
    stage = _resource(template, _id(stack, stack.service.stage))["Properties"]
    assert stage["StageName"] == "$default"
    assert stage["AutoDeploy"] is True
    settings = stage["AccessLogSettings"]
    assert settings["DestinationArn"]["Fn::GetAtt"][1] == "Arn"
    fields = json.loads(settings["Format"])
    assert fields["requestId"] == "$context.requestId"
    assert fields["routeKey"] == "$context.routeKey"
    # The webhook's path holds its capability token: it must never reach the logs.
    assert "$context.path" not in settings["Format"]
    assert stage["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 200,
        "ThrottlingRateLimit": 100,
    }


# --- alarms and outputs ----------------------------------------------------------------------


def test_alarms_on_dead_letters_and_function_errors(stack, template):
    service = stack.service
    # The others: tests/test_infra_monitoring.py.
    template.resource_count_is("AWS::CloudWatch::Alarm", 18)
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [
                {
                    "Name": "QueueName",
                    "Value": {"Fn::GetAtt": [_id(stack, service.dead_letter_queue), "QueueName"]},
                }
            ],
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "EvaluationPeriods": 1,
        },
    )
    for fn in _functions(stack).values():
        template.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "Namespace": "AWS/Lambda",
                "MetricName": "Errors",
                "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": _id(stack, fn)}}],
                "Statistic": "Sum",
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            },
        )


def test_outputs(stack, template):
    service = stack.service
    outputs = template.to_json()["Outputs"]
    assert outputs["ApiUrl"]["Value"] == {
        "Fn::GetAtt": [_id(stack, service.http_api), "ApiEndpoint"]
    }
    assert outputs["TableName"]["Value"] == {"Ref": _id(stack, service.table)}
    assert outputs["QueueUrl"]["Value"] == {"Ref": _id(stack, service.queue)}
