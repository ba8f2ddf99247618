"""What a BideService runs: the worker, signal and API functions, their layer and their roles.

The worker consumes the wake queue and runs sessions; the signal function delivers signal
values (capability webhooks and signed signal requests); the API function serves the
sessions API. All three share one dependency layer and the same environment. Each gets its
own role with only the permissions it uses, and its own log group. The resources are created
directly in the BideService's scope (not in a child construct) so their logical ids survive
a change of how this code is laid out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from .. import constants as c
from .bundling import (
    ARCHITECTURE,
    PACKAGE_DIR,
    RUNTIME,
    Bundling,
    installed_constraints,
    lock_constraints,
    runtime_requirements,
)
from .nag import acknowledge_models
from .storage import Storage
from .wake import SCHEDULER_PRINCIPAL, WakePath

SIGNAL_TIMEOUT = cdk.Duration.seconds(10)
#: Lambda's advanced logging controls, the same for every function (CloudFormation's
#: ``LoggingConfig`` names). System logs at WARN: for an invocation that succeeds Lambda sends
#: no platform record at all (``platform.start`` and ``platform.report`` are INFO,
#: ``platform.runtimeDone`` DEBUG); a failed or timed-out invocation still sends its
#: ``runtimeDone`` and ``report`` (WARN), so errors keep their duration and memory line. Each
#: successful invocation saves the START/END/REPORT lines (about 260 bytes of ingestion);
#: durations stay in Lambda's own CloudWatch metrics. System log levels need the JSON format
#: (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html,
#: "System log level event mapping"). JSON changes nothing the services write: the Python
#: runtime formats only the root logger's records as JSON and leaves what the code writes to
#: stdout (the services' JSON lines, the EMF metric documents) as it is
#: (https://docs.aws.amazon.com/lambda/latest/dg/python-logging.html). The application log
#: level is left to Lambda's default, INFO, on purpose: Lambda files a stdout JSON object
#: without a known ``level`` (an EMF document) as INFO, so a stricter level would drop the
#: metrics. bench/cost_model.py reads this constant to price the log lines.
LOGGING_CONFIG = {"LogFormat": "JSON", "SystemLogLevel": "WARN"}
# HTTP API integrations time out after 30 s; the function should give up first.
API_TIMEOUT = cdk.Duration.seconds(29)
WAKE_BATCH_SIZE = 10

# What each function's code calls, per resource (tests/test_infra_security.py records the AWS
# operations of each handler's flows on moto and checks they are exactly these). The store
# reads with GetItem and Query and commits with TransactWriteItems, which is authorised per
# contained Put/Update/ConditionCheck (it writes no Delete; only the worker's sleeps carry a
# ConditionCheck, "this key's document is absent", so only it may ConditionCheckItem); no
# Batch*, Scan or DescribeTable. Records over the offload threshold (64 KiB of JSON: results,
# delivered webhook bodies, submissions) go to S3 before the transaction; objects are
# content-addressed and never deleted or listed. Minting (worker), checking (signal) and
# listing (api) webhooks reads the webhook key secret. Loading a session queries its live
# tasks on the live index (worker, api; the signal function delivers without loading). Only
# the worker arms alarms (Create, then Update when one exists; Delete to disarm; it never
# reads one back) and sets poison wakes aside on the dead-letter queue.
TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem")
WORKER_TABLE_ACTIONS = (*TABLE_ACTIONS, "dynamodb:ConditionCheckItem")
# The signal function reads a binding, the owner or one task by key and never queries.
DELIVER_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
INDEX_ACTIONS = ("dynamodb:Query",)
# Tagging: values written for an ended session are created tagged, and finishing an end
# re-writes older ones tagged (CopyObject), for the bucket's lifecycle rule (bide.aws.retention).
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:PutObjectTagging")
SEND_ACTIONS = ("sqs:SendMessage",)
SCHEDULE_ACTIONS = (
    "scheduler:CreateSchedule",
    "scheduler:UpdateSchedule",
    "scheduler:DeleteSchedule",
)
KEY_ACTIONS = ("secretsmanager:GetSecretValue",)
# Bedrock's Converse and ConverseStream are authorised as InvokeModel and
# InvokeModelWithResponseStream on the model (or inference profile) resource
# (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-prereq.html). Only the
# worker runs the agent; only with ``model_access`` set, and only on those models.
MODEL_ACTIONS = ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream")
# Cross-region inference profile ids start with a geography
# (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-support.html).
_PROFILE_PREFIXES = ("us.", "us-gov.", "eu.", "apac.", "jp.", "au.", "ca.", "global.")
_MODEL_ID = re.compile(r"[a-z0-9][a-z0-9.:_-]{2,199}")
#: resource -> actions, for each function (``index`` is the table's live index).
FUNCTION_GRANTS: dict[str, dict[str, tuple[str, ...]]] = {
    c.FUNCTION_WORKER: {
        "table": WORKER_TABLE_ACTIONS,
        "index": INDEX_ACTIONS,
        "objects": OBJECT_ACTIONS,
        "queue": SEND_ACTIONS,
        "dead_letters": SEND_ACTIONS,
        "schedules": SCHEDULE_ACTIONS,
        "webhook_key": KEY_ACTIONS,
    },
    c.FUNCTION_SIGNAL: {
        "table": DELIVER_ACTIONS,
        "objects": OBJECT_ACTIONS,
        "queue": SEND_ACTIONS,
        "webhook_key": KEY_ACTIONS,
    },
    c.FUNCTION_API: {
        "table": TABLE_ACTIONS,
        "index": INDEX_ACTIONS,
        "objects": OBJECT_ACTIONS,
        "queue": SEND_ACTIONS,
        "webhook_key": KEY_ACTIONS,
    },
}


class Functions:
    """The dependency layer (``Dependencies``) and the ``worker``, ``signal`` and ``api``
    functions, each with ``<name>-logs`` and ``<name>-role``, granted on ``storage`` and
    ``wake``.

    Code comes from ``source_root``'s ``shared/bide`` (a checkout of the repository; None:
    the installed package) plus ``app_paths``; ``environment`` is given to all three (the
    worker also gets its safety margin).
    """

    def __init__(
        self,
        scope: Construct,
        *,
        bundling: Bundling,
        source_root: Path | None,
        app_paths: Sequence[Path],
        extra_requirements: Sequence[str],
        environment: Mapping[str, str],
        tracing: bool,
        storage: Storage,
        wake: WakePath,
        webhook_key: secretsmanager.ISecret,
        worker_timeout: cdk.Duration,
        worker_memory_size: int,
        handler_memory_size: int,
        removal: cdk.RemovalPolicy,
        log_retention: logs.RetentionDays,
        worker_max_concurrency: int = c.DEFAULT_WORKER_MAX_CONCURRENCY,
        reserved_concurrency: Mapping[str, int] | None = None,
        model_access: Sequence[str] = (),
    ) -> None:
        self._scope = scope
        self._model_arns = model_arns(model_access)
        self._worker_max_concurrency = worker_max_concurrency
        reserved = dict(reserved_concurrency or {})
        self._tracing = tracing
        self._storage = storage
        self._wake = wake
        self._webhook_key = webhook_key
        requirements = runtime_requirements(source_root, tracing=tracing, extra=extra_requirements)
        constraints = (
            installed_constraints(requirements)
            if source_root is None
            else lock_constraints(source_root)
        )
        self.layer = lambda_.LayerVersion(
            scope,
            "Dependencies",
            code=bundling.layer_code(requirements, constraints),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="bide dependencies (pydantic, Powertools, boto3), python3.12 arm64",
        )
        package_dir = PACKAGE_DIR if source_root is None else source_root / "shared" / "bide"

        def function(
            name: str, timeout: cdk.Duration, memory: int, **extra: str
        ) -> lambda_.Function:
            return self._function(
                name,
                code=bundling.function_code(name, package_dir, app_paths),
                timeout=timeout,
                memory_size=memory,
                environment={**environment, **extra},
                removal=removal,
                log_retention=log_retention,
                reserved_concurrency=reserved.get(name),
            )

        self.worker = function(
            c.FUNCTION_WORKER,
            worker_timeout,
            worker_memory_size,
            **{
                c.ENV_SAFETY_MARGIN_MS: str(c.DEFAULT_SAFETY_MARGIN_MS),
                # The worker dead-letters a wake on its last attempt itself, with the reason:
                # the same maxReceiveCount as the queue's redrive policy (the backstop).
                c.ENV_DEAD_LETTER_URL: wake.dead_letter_queue.queue_url,
                c.ENV_MAX_RECEIVE_COUNT: str(wake.max_receive_count),
                # Where Scheduler puts an alarm it could not deliver (bide.aws.scheduler).
                c.ENV_SCHEDULE_DLQ_ARN: wake.schedule_dead_letter_queue.queue_arn,
            },
        )
        self.signal_function = function(c.FUNCTION_SIGNAL, SIGNAL_TIMEOUT, handler_memory_size)
        self.api_function = function(c.FUNCTION_API, API_TIMEOUT, handler_memory_size)

        for name, fn in (
            (c.FUNCTION_SIGNAL, self.signal_function),
            (c.FUNCTION_API, self.api_function),
        ):
            self._grant(name, fn)
        self._grant_worker()

    @property
    def all(self) -> tuple[lambda_.Function, lambda_.Function, lambda_.Function]:
        """The worker, signal and API functions, in that order."""
        return self.worker, self.signal_function, self.api_function

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
        reserved_concurrency: int | None,
    ) -> lambda_.Function:
        scope = self._scope
        log_group = logs.LogGroup(
            scope, f"{name}-logs", retention=log_retention, removal_policy=removal
        )
        # Our own role instead of AWSLambdaBasicExecutionRole: it may write to its own log
        # group only.
        role = iam.Role(
            scope,
            f"{name}-role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"bide {name} function",
        )
        log_group.grant_write(role)
        return lambda_.Function(
            scope,
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
            tracing=lambda_.Tracing.ACTIVE if self._tracing else None,
            logging_format=lambda_.LoggingFormat(LOGGING_CONFIG["LogFormat"]),
            system_log_level_v2=lambda_.SystemLogLevel(LOGGING_CONFIG["SystemLogLevel"]),
            reserved_concurrent_executions=reserved_concurrency,
            # The worker re-arms its own session through the queue that invokes it; a long
            # session legitimately loops worker -> queue -> worker many times, and Lambda's
            # detection would stop it after about 16 rounds
            # (https://docs.aws.amazon.com/lambda/latest/dg/invocation-recursion.html). The
            # others keep the default, Terminate, stated so the template shows it; the
            # worker's loops are bounded by its maximum concurrency instead, and an agent's
            # by its run limits.
            recursive_loop=(
                lambda_.RecursiveLoop.ALLOW
                if name == c.FUNCTION_WORKER
                else lambda_.RecursiveLoop.TERMINATE
            ),
        )

    def _resources(self, kind: str) -> list[str]:
        table, wake = self._storage.table, self._wake
        return {
            "table": lambda: [table.table_arn],
            "index": lambda: [f"{table.table_arn}/index/{name}" for name in self._storage.indexes],
            "objects": lambda: [self._storage.bucket.arn_for_objects("*")],
            "queue": lambda: [wake.queue.queue_arn],
            "dead_letters": lambda: [wake.dead_letter_queue.queue_arn],
            "schedules": lambda: [wake.schedules_arn],
            "webhook_key": lambda: [self._webhook_key.secret_arn],
        }[kind]()

    def _grant(self, name: str, fn: lambda_.Function) -> None:
        """Exactly :data:`FUNCTION_GRANTS`' actions for ``name``, each on its resource."""
        for kind, actions in FUNCTION_GRANTS[name].items():
            fn.add_to_role_policy(
                iam.PolicyStatement(actions=list(actions), resources=self._resources(kind))
            )

    def _grant_worker(self) -> None:
        worker, wake = self.worker, self._wake
        self._grant(c.FUNCTION_WORKER, worker)
        if self._model_arns:
            worker.add_to_role_policy(
                iam.PolicyStatement(actions=list(MODEL_ACTIONS), resources=self._model_arns)
            )
            assert worker.role is not None
            acknowledge_models(worker.role, self._model_arns)
        # Consuming: the event source grants receive/delete/change-visibility on this queue
        # (the worker shortens a failed wake's visibility with ChangeMessageVisibility).
        worker.add_event_source(
            event_sources.SqsEventSource(
                wake.queue,
                batch_size=WAKE_BATCH_SIZE,
                report_batch_item_failures=True,
                # At most this many workers at once, whatever the backlog: the cap on what a
                # burst of wakes (or a runaway loop) can cost.
                max_concurrency=self._worker_max_concurrency,
            )
        )
        worker.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[wake.scheduler_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SCHEDULER_PRINCIPAL}},
            )
        )


def model_arns(models: Sequence[str]) -> list[str]:
    """The resources ``model_access`` grants :data:`MODEL_ACTIONS` on. A full ARN is taken as
    given (a foundation model, an inference profile, a provisioned model...). A foundation
    model id (``anthropic.claude-3-5-haiku-20241022-v1:0``) becomes that model in the stack's
    region. A cross-region inference profile id (``us.anthropic...``) becomes the profile in
    the stack's account and region and the model it routes to in any region (a profile sends
    a request to another region's model, and IAM checks that model there too:
    https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html).
    Anything else is refused, naming it."""
    arns: list[str] = []
    for model in models:
        if not isinstance(model, str) or model != model.strip() or not model:
            raise ValueError(f"model_access: {model!r} is not a Bedrock model id or ARN")
        if model.startswith("arn:"):
            if not re.fullmatch(r"arn:aws[a-z-]*:bedrock:[a-z0-9-]*:\d{0,12}:[a-z-]+/\S+", model):
                raise ValueError(f"model_access: {model!r} is not a Bedrock ARN")
            found = [model]
        elif not _MODEL_ID.fullmatch(model):
            raise ValueError(
                f"model_access: {model!r} is not a Bedrock model id (like "
                "'anthropic.claude-3-5-haiku-20241022-v1:0') or ARN"
            )
        elif model.startswith(_PROFILE_PREFIXES):
            base = model.split(".", 1)[1]
            found = [
                f"arn:{cdk.Aws.PARTITION}:bedrock:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}"
                f":inference-profile/{model}",
                f"arn:{cdk.Aws.PARTITION}:bedrock:*::foundation-model/{base}",
            ]
        else:
            found = [f"arn:{cdk.Aws.PARTITION}:bedrock:{cdk.Aws.REGION}::foundation-model/{model}"]
        arns.extend(a for a in found if a not in arns)
    return arns
