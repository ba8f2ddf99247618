"""BideService: the serverless shape of bide as one construct you can put in any CDK app.

DynamoDB holds sessions (one partition each), S3 holds large values, an SQS FIFO queue (message
group = session) wakes the worker, EventBridge Scheduler holds one ``at`` alarm per session
and sends it to that queue, and an HTTP API fronts the signal and sessions functions.
Each function gets its own role with only the permissions it uses.

This module checks the props and wires the concerns together; each concern has its module:
``storage`` (table, buckets), ``wake`` (queues, Scheduler), ``functions`` (layer, functions,
roles, grants), ``api`` (HTTP API, stage, routes) and ``monitoring`` (alarms). They create
their resources directly in this construct, not in child constructs: a resource's logical id
comes from its construct path, and a new id would make CloudFormation replace a deployed
table or queue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from .. import constants as c
from .api import ACCESS_LOG_FORMAT, DEFAULT_WEBHOOK_THROTTLE, Api
from .bundling import Bundling, checkout_root, skip_bundling_requested
from .functions import (
    API_TIMEOUT,
    FUNCTION_GRANTS,
    OBJECT_ACTIONS,
    SCHEDULE_ACTIONS,
    SIGNAL_TIMEOUT,
    TABLE_ACTIONS,
    WAKE_BATCH_SIZE,
    Functions,
)
from .monitoring import Watched, alarms, dashboard
from .nag import acknowledge_alarm_topic, acknowledge_service
from .storage import Storage
from .wake import SCHEDULER_PRINCIPAL, VISIBILITY_TIMEOUT_FACTOR, WakePath

# The constants that lived here before the split, for code that imports them from here.
__all__ = [
    "ACCESS_LOG_FORMAT",
    "API_TIMEOUT",
    "DEFAULT_SOURCE_ROOT",
    "FUNCTION_GRANTS",
    "OBJECT_ACTIONS",
    "SCHEDULER_PRINCIPAL",
    "SCHEDULE_ACTIONS",
    "SIGNAL_TIMEOUT",
    "TABLE_ACTIONS",
    "VISIBILITY_TIMEOUT_FACTOR",
    "WAKE_BATCH_SIZE",
    "BideService",
]

#: CDK context key: an e-mail address subscribed to the alarms (the ``alarm_email`` prop).
ALARM_EMAIL_CONTEXT = "bide:alarmEmail"
#: How old the oldest wake in the queue may get before it alarms, by default.
DEFAULT_WAKE_AGE_ALARM = cdk.Duration.minutes(15)
#: How long an ended session is kept by default (the ``session_retention`` prop).
DEFAULT_SESSION_RETENTION = cdk.Duration.days(c.DEFAULT_RETENTION_DAYS)

#: The repository checkout this package lives in (``shared/bide``, pyproject.toml,
#: requirements.lock.txt), or None when bide is an installed distribution.
DEFAULT_SOURCE_ROOT = checkout_root()


class BideService(Construct):
    """Everything a bide deployment runs, pointed at one app (``BIDE_APP=module:attribute``).

    ``app_paths`` are folders or files copied into every function next to ``bide/`` so that
    ``app_module`` can be imported there (``examples`` for ``examples.agent_app:app``, or your
    own package). ``source_root`` is a checkout of the bide repository to bundle from
    (``shared/bide``, and pyproject.toml and requirements.lock.txt for the layer); by default
    the checkout this package was imported from, or for an installed bide the package itself
    with its declared dependencies pinned to the versions installed here.

    ``admin_principals`` are IAM principal ARNs let into every session besides its owner
    (``BIDE_ADMIN_PRINCIPALS``; an IAM role ARN admits every session of that role): see
    :mod:`bide.service.owners`.

    Alarms (:mod:`bide.cdk.monitoring`) notify ``alarm_topic``, or a topic created for
    ``alarm_email`` (default: the ``bide:alarmEmail`` context value); ``wake_age_alarm`` is
    how old the oldest queued wake may get. Limits: ``worker_max_concurrency`` (2-1000) caps
    the workers the wake queue runs at once; ``reserved_concurrency`` maps function names
    (``worker``, ``signal``, ``api``) to reserved concurrency; ``value_expiration`` expires
    offloaded values (None: kept, since a live session may still need them).

    ``session_retention`` is how long an ended session (``POST /sessions/{id}/end``) is kept:
    then DynamoDB's TTL deletes its items and an S3 lifecycle rule its offloaded values
    (:mod:`bide.aws.retention`; default 30 days; None or zero: kept forever; at least a day).

    ``throttle`` limits the stage's IAM-authorised routes; ``webhook_throttle`` the
    unauthenticated ``POST /hooks/{token}`` route on its own (lower by default), so a flood of
    webhook requests cannot use up the sessions API's budget. The key webhook tokens are
    derived under is a Secrets Manager secret made here (``webhook_key``).

    ``model_access`` lists the Bedrock models (ids, inference profile ids or ARNs) the worker
    may invoke (Converse, ConverseStream); default none: the worker gets no Bedrock permission.
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
        webhook_throttle: apigw.ThrottleSettings = DEFAULT_WEBHOOK_THROTTLE,
        alarm_topic: sns.ITopic | None = None,
        admin_principals: Sequence[str] = (),
        alarm_email: str | None = None,
        wake_age_alarm: cdk.Duration = DEFAULT_WAKE_AGE_ALARM,
        worker_max_concurrency: int = c.DEFAULT_WORKER_MAX_CONCURRENCY,
        reserved_concurrency: Mapping[str, int] | None = None,
        value_expiration: cdk.Duration | None = None,
        session_retention: cdk.Duration | None = DEFAULT_SESSION_RETENTION,
        model_access: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        _check_limits(worker_max_concurrency, reserved_concurrency)
        retention_seconds = _retention_seconds(session_retention)
        email = alarm_email or self.node.try_get_context(ALARM_EMAIL_CONTEXT)
        if email is not None and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", str(email)):
            raise ValueError(
                f"alarm_email ({ALARM_EMAIL_CONTEXT}) is not an e-mail address: {email!r}"
            )
        module, _, attribute = app_module.partition(":")
        if not module or not attribute:
            raise ValueError(f"app_module must look like 'package.module:app', not {app_module!r}")
        root = Path(source_root).resolve() if source_root else DEFAULT_SOURCE_ROOT
        if root is not None and not (root / "shared" / "bide").is_dir():
            raise FileNotFoundError(f"source_root {root} has no shared/bide package to bundle")
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

        # The order below is the order of the resources in the template.
        storage = Storage(
            self,
            removal=removal,
            retain=retain_data,
            value_expiration=value_expiration,
            session_retention=session_retention if retention_seconds else None,
        )
        self.table = storage.table
        self.access_log_bucket = storage.access_log_bucket
        self.bucket = storage.bucket

        wake = WakePath(self, worker_timeout=worker_timeout, max_receive_count=max_receive_count)
        self.dead_letter_queue, self.queue = wake.dead_letter_queue, wake.queue
        self.schedule_group, self.scheduler_role = wake.schedule_group, wake.scheduler_role
        self.schedule_dead_letter_queue = wake.schedule_dead_letter_queue
        self._wake = wake

        api = Api(self)
        self.http_api = api.http_api

        # The key webhook tokens are derived under (bide.aws.webhook_keys): generated by
        # Secrets Manager, never in the template, the table or a backup of either.
        self.webhook_key = secretsmanager.Secret(
            self,
            "WebhookKey",
            description="bide: the key capability webhook tokens are derived under",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template='{"previous": []}',
                generate_string_key="current",
                password_length=64,
                exclude_punctuation=True,
            ),
            removal_policy=removal,
        )

        # What every function is told about the rest of the service.
        env = {
            c.ENV_APP: app_module,
            c.ENV_TABLE: self.table.table_name,
            c.ENV_BUCKET: self.bucket.bucket_name,
            c.ENV_QUEUE_URL: self.queue.queue_url,
            c.ENV_QUEUE_ARN: self.queue.queue_arn,
            c.ENV_SCHEDULE_GROUP: self.schedule_group.ref,
            c.ENV_SCHEDULER_ROLE_ARN: self.scheduler_role.role_arn,
            c.ENV_WEBHOOK_BASE_URL: self.http_api.api_endpoint,
            c.ENV_WEBHOOK_KEY_SECRET: self.webhook_key.secret_arn,
            c.ENV_TRACING: "1" if tracing else "0",
            # How long ended sessions are kept (bide.aws.retention); 0: forever.
            c.ENV_RETENTION_SECONDS: str(retention_seconds),
            # Principals let into every session besides its owner (bide.service.owners).
            **({c.ENV_ADMIN_PRINCIPALS: _admins(admin_principals)} if admin_principals else {}),
            "POWERTOOLS_SERVICE_NAME": c.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": c.METRICS_NAMESPACE,
            **(environment or {}),
        }
        functions = Functions(
            self,
            bundling=Bundling(skip=skip),
            source_root=root,
            app_paths=paths,
            extra_requirements=extra_requirements,
            environment=env,
            tracing=tracing,
            storage=storage,
            wake=wake,
            webhook_key=self.webhook_key,
            worker_timeout=worker_timeout,
            worker_memory_size=worker_memory_size,
            handler_memory_size=handler_memory_size,
            removal=removal,
            log_retention=log_retention,
            worker_max_concurrency=worker_max_concurrency,
            reserved_concurrency=reserved_concurrency,
            model_access=model_access,
        )
        self.layer = functions.layer
        self.worker = functions.worker
        self.signal_function = functions.signal_function
        self.api_function = functions.api_function

        self.stage, self.webhook_route = api.add_routes(
            signal_function=self.signal_function,
            api_function=self.api_function,
            log_retention=log_retention,
            removal=removal,
            throttle=throttle,
            webhook_throttle=webhook_throttle,
        )
        self.webhook_failure_route = api.webhook_failure_route  # the same route's failure form
        self.webhook_beat_route = api.webhook_beat_route  # and its heartbeat
        if alarm_topic is None and email:
            alarm_topic = sns.Topic(
                self, "AlarmTopic", display_name="bide alarms", enforce_ssl=True
            )
            alarm_topic.add_subscription(subscriptions.EmailSubscription(str(email)))
            acknowledge_alarm_topic(alarm_topic)
        self.alarm_topic = alarm_topic
        watched = Watched(
            wake_queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
            schedule_dead_letter_queue=self.schedule_dead_letter_queue,
            schedule_group=self.schedule_group,
            stage=self.stage,
            api_function=self.api_function,
            signal_function=self.signal_function,
        )
        self.alarms = alarms(
            self,
            watched=watched,
            functions=functions.all,
            topic=alarm_topic,
            wake_age=wake_age_alarm,
        )
        self.dashboard = dashboard(
            self, watched=watched, functions=functions.all, alarms=self.alarms
        )
        acknowledge_service(self)

    @property
    def schedules_arn(self) -> str:
        """ARN pattern of the schedules in this service's group (and no other group)."""
        return self._wake.schedules_arn

    @property
    def api_url(self) -> str:
        """Base URL of the HTTP API (the ``$default`` stage has no path prefix)."""
        return self.http_api.api_endpoint


def _check_limits(max_concurrency: int, reserved: Mapping[str, int] | None) -> None:
    """Refuse limits AWS would refuse at deploy time, naming the prop."""
    # ScalingConfig.MaximumConcurrency: 2 to 1000
    # (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html).
    if not 2 <= max_concurrency <= 1000:
        raise ValueError(f"worker_max_concurrency must be 2 to 1000, not {max_concurrency}")
    names = {c.FUNCTION_WORKER, c.FUNCTION_SIGNAL, c.FUNCTION_API}
    for name, value in (reserved or {}).items():
        if name not in names:
            raise ValueError(f"reserved_concurrency: {name!r} is not one of {sorted(names)}")
        if value < 0:
            raise ValueError(f"reserved_concurrency[{name!r}] must be >= 0, not {value}")


def _retention_seconds(retention: cdk.Duration | None) -> int:
    """``session_retention`` in whole seconds (0: forever), refused naming the prop when the
    functions' configuration would refuse it or the lifecycle rule could not follow it."""
    if retention is None:
        return 0
    seconds = retention.to_seconds()
    if seconds == 0:
        return 0
    if not 86_400 <= seconds <= 10 * 366 * 86_400:
        raise ValueError(
            f"session_retention must be at least 1 day and at most 10 years (or zero or None "
            f"to keep ended sessions forever), not {seconds} seconds"
        )
    return int(seconds)


def _admins(principals: Sequence[str]) -> str:
    """``admin_principals`` as ``BIDE_ADMIN_PRINCIPALS`` holds them (comma-separated ARNs)."""
    for arn in principals:
        if not arn.startswith("arn:") or "," in arn or not arn.strip() == arn:
            raise ValueError(f"admin_principals: {arn!r} is not an IAM principal ARN")
    return ",".join(principals)
