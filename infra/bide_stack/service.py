"""BideService: the serverless shape of bide as one construct you can put in any CDK app.

DynamoDB holds sessions (one partition each), S3 holds large values, an SQS FIFO queue (message
group = session) wakes the worker, EventBridge Scheduler holds one ``at`` alarm per session
and sends it to that queue, and an HTTP API fronts the signal and sessions functions.
Each function gets its own role with only the permissions it uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from bide import constants as c
from bide.aws.dynamodb import table_definition

from .bundling import (
    ARCHITECTURE,
    RUNTIME,
    Bundling,
    lock_constraints,
    runtime_requirements,
    skip_bundling_requested,
)
from .nag import acknowledge_service

#: The repository this package lives in: ``functions/``, ``shared/bide``, pyproject.toml.
DEFAULT_SOURCE_ROOT = Path(__file__).resolve().parents[2]

SIGNAL_TIMEOUT = cdk.Duration.seconds(10)
# HTTP API integrations time out after 30 s; the function should give up first.
API_TIMEOUT = cdk.Duration.seconds(29)
WAKE_BATCH_SIZE = 10
# AWS guidance for SQS event sources: visibility timeout >= 6x the function timeout.
VISIBILITY_TIMEOUT_FACTOR = 6

SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
SCHEDULE_ACTIONS = (
    "scheduler:CreateSchedule",
    "scheduler:UpdateSchedule",
    "scheduler:DeleteSchedule",
    "scheduler:GetSchedule",
)
# What bide.aws.dynamodb and the signal/API services call (TransactWriteItems is authorised
# per contained Put/Update/Delete/ConditionCheck; TransactGetItems per GetItem). No Scan,
# no DescribeTable, no streams.
TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
)
# Every function commits through bide.aws.dynamodb, which writes any record over its offload
# threshold (64 KiB of JSON) to S3 before the transaction: the worker's results, the signal
# function's delivered values (webhook bodies may be 256 KiB), the API's submissions. Objects
# are content-addressed and never deleted or listed, so Get and Put are all anyone needs.
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject")

# Access log fields. No $context.path: on /hooks/{token} it would write the capability
# token (a credential) into the logs; the route key names the route without it.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "requestTime": "$context.requestTime",
        "routeKey": "$context.routeKey",
        "status": "$context.status",
        "sourceIp": "$context.identity.sourceIp",
        "caller": "$context.identity.userArn",
        "responseLength": "$context.responseLength",
        "latencyMs": "$context.responseLatency",
        "integrationError": "$context.integrationErrorMessage",
    },
    separators=(",", ":"),
)

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


@jsii.implements(apigw.IAccessLogSettings)
class _AccessLogSettings:
    def __init__(self, destination: apigw.IAccessLogDestination, log_format: str) -> None:
        self._destination = destination
        self._format = apigw_v1.AccessLogFormat.custom(log_format)

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw_v1.AccessLogFormat:
        return self._format


class BideService(Construct):
    """Everything a bide deployment runs, pointed at one app (``BIDE_APP=module:attribute``).

    ``app_paths`` are folders or files copied into every function next to ``bide/`` so that
    ``app_module`` can be imported there (``examples`` for ``examples.agent_app:app``, or your
    own package). ``source_root`` is where ``functions/``, ``shared/bide``, pyproject.toml and
    requirements.lock.txt are found (default: this repository).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        app_module: str,
        app_paths: Sequence[str | Path] = (),
        source_root: str | Path | None = None,
        extra_requirements: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        tracing: bool = False,
        retain_data: bool = True,
        skip_bundling: bool | None = None,
        worker_timeout: cdk.Duration | None = None,
        worker_memory_size: int = 1024,
        handler_memory_size: int = 512,
        max_receive_count: int = 5,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        throttle: apigw.ThrottleSettings | None = None,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        module, _, attribute = app_module.partition(":")
        if not module or not attribute:
            raise ValueError(f"app_module must look like 'package.module:app', not {app_module!r}")
        root = Path(source_root).resolve() if source_root else DEFAULT_SOURCE_ROOT
        paths = [Path(p).resolve() for p in app_paths]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"app_paths do not exist: {', '.join(missing)}")
        if module.split(".")[0] not in {p.stem for p in paths} | {"bide"}:
            cdk.Annotations.of(self).add_warning_v2(
                "bide:appModule",
                f"{app_module!r} is not in any of app_paths; the functions cannot import it",
            )

        self.tracing = tracing
        worker_timeout = worker_timeout or cdk.Duration.seconds(c.WORKER_TIMEOUT_SECONDS)
        removal = cdk.RemovalPolicy.RETAIN if retain_data else cdk.RemovalPolicy.DESTROY
        skip = skip_bundling_requested(self) if skip_bundling is None else skip_bundling
        if skip:
            cdk.Annotations.of(self).add_warning_v2(
                "bide:skipBundling", "bundling skipped: this template's code is not deployable"
            )
        bundling = Bundling(skip=skip)

        self._indexes: list[str] = []
        self.table = self._table(removal, retain_data)
        self.bucket = self._buckets(removal, retain_data)
        self.dead_letter_queue, self.queue = self._queues(worker_timeout, max_receive_count)
        self.schedule_group, self.scheduler_role = self._scheduler()
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            description="bide: capability webhooks, signals and the sessions API",
            create_default_stage=False,
        )
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=bundling.layer_code(
                runtime_requirements(root, tracing=tracing, extra=extra_requirements),
                lock_constraints(root),
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="bide runtime dependencies (pydantic, Powertools) for python3.12 arm64",
        )

        env = {
            c.ENV_APP: app_module,
            c.ENV_TABLE: self.table.table_name,
            c.ENV_BUCKET: self.bucket.bucket_name,
            c.ENV_QUEUE_URL: self.queue.queue_url,
            c.ENV_QUEUE_ARN: self.queue.queue_arn,
            c.ENV_SCHEDULE_GROUP: self.schedule_group.ref,
            c.ENV_SCHEDULER_ROLE_ARN: self.scheduler_role.role_arn,
            c.ENV_WEBHOOK_BASE_URL: self.http_api.api_endpoint,
            c.ENV_TRACING: "1" if tracing else "0",
            "POWERTOOLS_SERVICE_NAME": c.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": c.METRICS_NAMESPACE,
            **(environment or {}),
        }
        bide_dir = root / "shared" / "bide"

        def function(
            name: str, timeout: cdk.Duration, memory: int, **extra: str
        ) -> lambda_.Function:
            return self._function(
                name,
                code=bundling.function_code(root / "functions" / name, bide_dir, paths),
                timeout=timeout,
                memory_size=memory,
                environment={**env, **extra},
                removal=removal,
                log_retention=log_retention,
            )

        self.worker = function(
            c.FUNCTION_WORKER,
            worker_timeout,
            worker_memory_size,
            **{c.ENV_SAFETY_MARGIN_MS: str(c.DEFAULT_SAFETY_MARGIN_MS)},
        )
        self.signal_function = function(c.FUNCTION_SIGNAL, SIGNAL_TIMEOUT, handler_memory_size)
        self.api_function = function(c.FUNCTION_API, API_TIMEOUT, handler_memory_size)

        self._grant_worker()
        for fn in (self.signal_function, self.api_function):
            self._grant_table(fn)
            self._grant_objects(fn)
            self._grant_send(fn)

        self.stage = self._routes(log_retention, removal, throttle)
        self.alarms = self._alarms(alarm_topic)
        acknowledge_service(self)

    # --- data --------------------------------------------------------------------------------

    def _table(self, removal: cdk.RemovalPolicy, retain: bool) -> dynamodb.Table:
        # Keys and the local index come from the store's own CreateTable request, so the
        # deployed table and bide.aws.dynamodb cannot disagree.
        definition = table_definition("bide")
        types = {a["AttributeName"]: a["AttributeType"] for a in definition["AttributeDefinitions"]}

        def attribute(name: str) -> dynamodb.Attribute:
            return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[types[name]])

        keys = {k["KeyType"]: k["AttributeName"] for k in definition["KeySchema"]}
        table = dynamodb.Table(
            self,
            "Table",
            partition_key=attribute(keys["HASH"]),
            sort_key=attribute(keys["RANGE"]),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=retain,
            removal_policy=removal,
        )
        for index in definition.get("LocalSecondaryIndexes", []):
            sort_key = next(
                k["AttributeName"] for k in index["KeySchema"] if k["KeyType"] == "RANGE"
            )
            projection = index["Projection"].get("ProjectionType", "ALL")
            table.add_local_secondary_index(
                index_name=index["IndexName"],
                sort_key=attribute(sort_key),
                projection_type=dynamodb.ProjectionType(projection),
            )
            self._indexes.append(index["IndexName"])
        return table

    def _buckets(self, removal: cdk.RemovalPolicy, retain: bool) -> s3.Bucket:
        common: dict[str, Any] = {
            "encryption": s3.BucketEncryption.S3_MANAGED,
            "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
            "enforce_ssl": True,
            "minimum_tls_version": 1.2,
            "removal_policy": removal,
            "auto_delete_objects": not retain,
        }
        # Object ownership left to CDK: with the feature flag
        # @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy (set by infra/app.py) log delivery
        # is granted by bucket policy and ACLs stay disabled; without it CDK uses the log
        # delivery ACL, which needs ObjectWriter ownership.
        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogs",
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(90))],
            **common,
        )
        # Objects are content-addressed and referenced from task records for as long as the
        # session lives, so no expiry rule: deleting one would break a parked session.
        return s3.Bucket(
            self,
            "Bucket",
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix="values/",
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            **common,
        )

    def _queues(
        self, worker_timeout: cdk.Duration, max_receive_count: int
    ) -> tuple[sqs.Queue, sqs.Queue]:
        dead_letters = sqs.Queue(
            self,
            "WakeDeadLetters",
            fifo=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        queue = sqs.Queue(
            self,
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

    def _scheduler(self) -> tuple[scheduler.CfnScheduleGroup, iam.Role]:
        group = scheduler.CfnScheduleGroup(
            self, "ScheduleGroup", name=cdk.Names.unique_resource_name(self, max_length=64)
        )
        stack = cdk.Stack.of(self)
        # Confused-deputy guard: only schedules of this account's group may assume the role.
        role = iam.Role(
            self,
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
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.queue.queue_arn])
        )
        return group, role

    # --- functions ---------------------------------------------------------------------------

    def _function(
        self,
        name: str,
        *,
        code: lambda_.Code,
        timeout: cdk.Duration,
        memory_size: int,
        environment: Mapping[str, str],
        removal: cdk.RemovalPolicy,
        log_retention: logs.RetentionDays,
    ) -> lambda_.Function:
        log_group = logs.LogGroup(
            self, f"{name}-logs", retention=log_retention, removal_policy=removal
        )
        # Our own role instead of AWSLambdaBasicExecutionRole: it may write to its own log
        # group only.
        role = iam.Role(
            self,
            f"{name}-role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"bide {name} function",
        )
        log_group.grant_write(role)
        return lambda_.Function(
            self,
            name,
            description=f"bide {name}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=c.HANDLER,
            code=code,
            layers=[self.layer],
            role=role,
            log_group=log_group,
            timeout=timeout,
            memory_size=memory_size,
            environment=dict(environment),
            tracing=lambda_.Tracing.ACTIVE if self.tracing else None,
            # The worker re-arms its own session through the queue that invokes it; a long
            # session legitimately loops worker -> queue -> worker many times.
            recursive_loop=lambda_.RecursiveLoop.ALLOW if name == c.FUNCTION_WORKER else None,
        )

    def _grant_table(self, fn: lambda_.Function) -> None:
        indexes = [f"{self.table.table_arn}/index/{name}" for name in self._indexes]
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=list(TABLE_ACTIONS), resources=[self.table.table_arn, *indexes]
            )
        )

    def _grant_objects(self, fn: lambda_.Function) -> None:
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=list(OBJECT_ACTIONS), resources=[self.bucket.arn_for_objects("*")]
            )
        )

    def _grant_send(self, fn: lambda_.Function) -> None:
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.queue.queue_arn])
        )

    def _grant_worker(self) -> None:
        worker = self.worker
        self._grant_table(worker)
        self._grant_objects(worker)
        self._grant_send(worker)
        # Consuming: the event source grants receive/delete/change-visibility on this queue.
        worker.add_event_source(
            event_sources.SqsEventSource(
                self.queue, batch_size=WAKE_BATCH_SIZE, report_batch_item_failures=True
            )
        )
        worker.add_to_role_policy(
            iam.PolicyStatement(actions=list(SCHEDULE_ACTIONS), resources=[self.schedules_arn])
        )
        worker.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.scheduler_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SCHEDULER_PRINCIPAL}},
            )
        )

    @property
    def schedules_arn(self) -> str:
        """ARN pattern of the schedules in this service's group (and no other group)."""
        return cdk.Stack.of(self).format_arn(
            service="scheduler",
            resource="schedule",
            resource_name=f"{self.schedule_group.ref}/*",
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )

    # --- HTTP API ----------------------------------------------------------------------------

    def _routes(
        self,
        log_retention: logs.RetentionDays,
        removal: cdk.RemovalPolicy,
        throttle: apigw.ThrottleSettings | None,
    ) -> apigw.HttpStage:
        access_logs = logs.LogGroup(
            self, "ApiAccessLogs", retention=log_retention, removal_policy=removal
        )
        stage = apigw.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            access_log_settings=_AccessLogSettings(
                apigw.LogGroupLogDestination(access_logs), ACCESS_LOG_FORMAT
            ),
            throttle=throttle or apigw.ThrottleSettings(rate_limit=100, burst_limit=200),
        )
        signal = integrations.HttpLambdaIntegration("Signal", self.signal_function)
        sessions = integrations.HttpLambdaIntegration("Sessions", self.api_function)
        iam_auth = authorizers.HttpIamAuthorizer()
        # The capability webhook: the unguessable token in the path is the credential (the
        # signal function resolves it to one session/task/signal/key), so callers that cannot
        # sign SigV4 requests (CI systems, SaaS webhooks) can deliver.
        (self.webhook_route,) = self.http_api.add_routes(
            path="/hooks/{token}",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=apigw.HttpNoneAuthorizer(),
        )
        # More specific than /sessions/{proxy+}, so API Gateway routes it to the signal
        # function.
        self.http_api.add_routes(
            path="/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=iam_auth,
        )
        for path in ("/sessions", "/sessions/{proxy+}"):
            self.http_api.add_routes(
                path=path, methods=[apigw.HttpMethod.ANY], integration=sessions, authorizer=iam_auth
            )
        return stage

    @property
    def api_url(self) -> str:
        """Base URL of the HTTP API (the ``$default`` stage has no path prefix)."""
        return self.http_api.api_endpoint

    # --- alarms ------------------------------------------------------------------------------

    def _alarms(self, topic: sns.ITopic | None) -> list[cloudwatch.Alarm]:
        alarms = [
            cloudwatch.Alarm(
                self,
                "WakeDeadLettersAlarm",
                alarm_description="bide: a session wake failed repeatedly and was dead-lettered",
                metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=cdk.Duration.minutes(1), statistic="Maximum"
                ),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        ]
        for fn in (self.worker, self.signal_function, self.api_function):
            alarms.append(
                cloudwatch.Alarm(
                    self,
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
            for alarm in alarms:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
        return alarms
