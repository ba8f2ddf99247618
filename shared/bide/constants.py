"""Names shared by the CDK stack, the Lambda functions and the tests: one source of truth."""

from __future__ import annotations

# Environment variables every function reads (validated once by bide.aws.config).
ENV_APP = "BIDE_APP"  # module:attribute of the bide.App to run
ENV_TABLE = "BIDE_TABLE"  # DynamoDB table of sessions
ENV_BUCKET = "BIDE_BUCKET"  # S3 bucket for large values
ENV_QUEUE_URL = "BIDE_WAKE_QUEUE_URL"  # SQS FIFO queue of session wakes
ENV_QUEUE_ARN = "BIDE_WAKE_QUEUE_ARN"  # the same queue's ARN (Scheduler targets it)
ENV_SCHEDULE_GROUP = "BIDE_SCHEDULE_GROUP"  # EventBridge Scheduler group of session alarms
ENV_SCHEDULER_ROLE_ARN = "BIDE_SCHEDULER_ROLE_ARN"  # role Scheduler assumes to send to SQS
ENV_WEBHOOK_BASE_URL = "BIDE_WEBHOOK_BASE_URL"  # public base URL of the HTTP API
# Secrets Manager secret (name or ARN) holding the key webhook tokens are derived under.
ENV_WEBHOOK_KEY_SECRET = "BIDE_WEBHOOK_KEY_SECRET"
ENV_TRACING = "BIDE_TRACING"  # "1" turns on the X-Ray tracer (it costs cold-start time)
ENV_SAFETY_MARGIN_MS = "BIDE_SAFETY_MARGIN_MS"  # stop starting work this close to the timeout
# The wake queue's dead letters (worker only): the DLQ's URL and the redrive policy's
# maxReceiveCount (the CDK stack sets both from the prop that sets the redrive policy), so the
# worker dead-letters a wake on its last attempt itself, with the reason it failed.
ENV_DEAD_LETTER_URL = "BIDE_WAKE_DLQ_URL"
ENV_MAX_RECEIVE_COUNT = "BIDE_WAKE_MAX_RECEIVE_COUNT"

# Function names inside a stack (CDK construct ids and modules of bide.handlers).
FUNCTION_WORKER = "worker"
FUNCTION_SIGNAL = "signal"
FUNCTION_API = "api"
HANDLER = "handler.handler"  # module.function at the root of each function bundle

# Limits.
MAX_WEBHOOK_BODY_BYTES = 256 * 1024  # larger webhook bodies are refused with 413
# Request bodies nesting deeper than this are refused with 400. Stored values are read back by
# parsers with recursion limits of their own (pydantic's stops at about 200 levels): a value
# stored deeper would make its session unloadable. Defined with the other value limits in
# bide.engine.limits (constants may not import the engine); tests/test_value_limits.py checks
# the two agree.
MAX_JSON_DEPTH = 64
WEBHOOK_TOKEN_BYTES = 24  # 192 bits of randomness per capability webhook token
WEBHOOK_SIGNATURE_WINDOW_SECONDS = 300  # HMAC timestamps older or newer than this are refused
WORKER_TIMEOUT_SECONDS = 300
# How long a worker's hold on the tasks it runs lasts (the engine's lease): past the function's
# timeout, so no live invocation loses its tasks to a duplicate delivery of its wake; a worker
# that died without closing (not one cut at the deadline: that one closes) holds them this long.
WORKER_LEASE_SECONDS = WORKER_TIMEOUT_SECONDS + 30
DEFAULT_SAFETY_MARGIN_MS = 20_000
DEFAULT_MAX_RECEIVE_COUNT = 5  # the wake queue's redrive policy, unless the stack says otherwise

# The wake path (see docs/architecture.md, "Wake path on AWS").
# EventBridge Scheduler invokes targets with 60 second precision: an at() schedule for 1:00
# fires between 1:00:00 and 1:00:59
# (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html).
SCHEDULER_PRECISION_SECONDS = 60
# SQS FIFO drops a message whose deduplication id was sent in the last 5 minutes
# (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html).
FIFO_DEDUPLICATION_SECONDS = 300

# Metric namespace (Powertools EMF).
METRICS_NAMESPACE = "Bide"
SERVICE_NAME = "bide"

# Principals (comma-separated ARNs) allowed into every session besides its owner; an IAM role
# ARN admits every session of that role (see bide.service.owners).
ENV_ADMIN_PRINCIPALS = "BIDE_ADMIN_PRINCIPALS"

# EventBridge Scheduler's retry policy on every session alarm: the longest it allows, 24 hours
# and 185 attempts (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-scheduler-schedule-retrypolicy.html);
# after that the fire goes to the schedules' dead-letter queue (a standard queue).
SCHEDULE_MAX_EVENT_AGE_SECONDS = 86_400
SCHEDULE_MAX_RETRY_ATTEMPTS = 185
ENV_SCHEDULE_DLQ_ARN = "BIDE_SCHEDULE_DLQ_ARN"  # that dead-letter queue's ARN (worker only)

# Limits of a BideService (bide.cdk), overridable by construct props (docs/deploy.md).
# The wake queue's event source never runs more than this many workers at once (the SQS
# event source's ScalingConfig.MaximumConcurrency takes 2 to 1000).
DEFAULT_WORKER_MAX_CONCURRENCY = 10

# How long an ended session is kept before DynamoDB's TTL deletes it (seconds; 0 or unset:
# kept forever). Set by BideService's session_retention prop (bide.aws.retention,
# docs/deploy.md "Retention").
ENV_RETENTION_SECONDS = "BIDE_RETENTION_SECONDS"
DEFAULT_RETENTION_DAYS = 30

# The harness service a host gives workflow runs to report detected nondeterminism
# (bide.workflow.nondeterminism); here so a service can name it without importing workflow.
NONDETERMINISM_SINK = "workflow_nondeterminism"

# The harness service holding the moment (epoch seconds) the worker's invocation must stop
# (bide.agent.generation sizes model requests to it); here so the worker need not import agents.
STOP_AT_SERVICE = "invocation_stop_at"
#: The harness service under which a host passes its provider-token port
#: (:class:`bide.workflow.AuthProviders`; the service's own is bide.service.auth_tokens).
AUTH_PROVIDERS_SERVICE = "auth_providers"
