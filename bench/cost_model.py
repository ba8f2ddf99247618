"""Prices and metering rules for ``bench_cost.py``: what each counted thing costs, and how the
AWS services meter it. List prices, us-east-1, USD, no free tier; each with where it was found.

Metering rules used (AWS's documented units):

* DynamoDB on-demand: a write request unit per 1 KB of the item written (rounded up; the larger
  of the item before and after the write), two per KB inside ``TransactWriteItems``; a read
  request unit per 4 KB read strongly consistent (half that eventually consistent), two per
  4 KB inside ``TransactGetItems``; a Query is rounded up over the sum of the items it returns
  (docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html and
  .../transaction-apis.html#transaction-capacity-handling). A local secondary index costs one
  more write per KB of its entry when a write puts, updates or removes an item in it, two when
  the index key changes (.../LSI.html#LSI.ThroughputConsiderations.Writes); we price those index
  writes once each, not doubled inside a transaction (AWS does not say).
* SQS: every request is billed per 64 KB chunk of its payload (aws.amazon.com/sqs/pricing/).
* Lambda: requests, and duration in GB-seconds rounded up to 1 ms per invocation
  (aws.amazon.com/lambda/pricing/). A function gets CPU in proportion to its memory, one vCPU at
  1,769 MB (docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html), so CPU time measured
  on one full core becomes ``cpu * 1769 / memory`` of billed time below 1,769 MB.
* API Gateway HTTP API: per request, metered in 512 KB increments.
* CloudWatch Logs: per GB ingested (Standard log class).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MILLION = 1_000_000
FOUND_ON = "2026-11-30 (API Gateway, CloudWatch Logs: 2026-12-01)"
FULL_CORE_MB = 1769  # Lambda: memory at which a function has one vCPU


@dataclass(frozen=True)
class Price:
    usd: float  # per unit
    unit: str
    source: str


PRICES: dict[str, Price] = {
    "dynamodb_wru": Price(
        0.625 / MILLION,
        "DynamoDB on-demand write request unit",
        "airbyte.com/data-engineering-resources/dynamodb-pricing (2025-07-21, after the Nov 2024 "
        "on-demand price cut); unit rules: docs.aws.amazon.com/whitepapers/latest/"
        "how-aws-pricing-works/dynamodb.html",
    ),
    "dynamodb_rru": Price(0.125 / MILLION, "DynamoDB on-demand read request unit", "as above"),
    "sqs_fifo": Price(
        0.50 / MILLION,
        "SQS FIFO request (per 64 KB chunk)",
        "cloudburn.io/blog/amazon-sqs-pricing (March 2026); factualminds.com/blog/"
        "amazon-sqs-pricing-64kb-rule-fifo-vs-standard (June 2026)",
    ),
    "scheduler_invocation": Price(
        1.00 / MILLION,
        "EventBridge Scheduler invocation",
        "cloudburn.io/blog/amazon-eventbridge-pricing (March 2026; 14M/month free not applied)",
    ),
    "lambda_request": Price(
        0.20 / MILLION,
        "Lambda request",
        "aws.amazon.com/lambda/pricing as transcribed by api-evangelist/aws-lambda "
        "plans/aws-lambda-plans-pricing.yml (read 2026-09-20)",
    ),
    "lambda_arm_gb_s": Price(
        0.0000133334,
        "Lambda GB-second, Arm (the stack's architecture)",
        "git.mcrn.ar/mariano/lambda_local_runner docs/lambdas-md/lambda-13-cost.md "
        "(2026-05-11; x86 $0.0000166667 matches the AWS page transcription above)",
    ),
    "apigw_http": Price(
        1.00 / MILLION,
        "API Gateway HTTP API request (first 300M a month, per 512 KB)",
        "docs.aws.amazon.com/whitepapers/latest/best-practices-api-gateway-private-apis-integration/"
        "cost-optimization.html (table 4: us-east-1, first 300 million $1.00 per million; "
        "metered in 512 KB increments)",
    ),
    "logs_ingest": Price(
        0.50 / 1024**3,
        "CloudWatch Logs ingestion, Standard (per byte; $0.50 per GB)",
        "c3x.dev/blog/cloudwatch-logs-cost-optimization (us-east-1, June 2026: Standard "
        "ingestion $0.50 per GB)",
    ),
    "s3_put": Price(
        0.005 / 1000,
        "S3 Standard PUT/COPY/POST/LIST",
        "aws.amazon.com/s3/pricing/ (not re-checked: priced only if a wait makes one)",
    ),
    "s3_get": Price(0.0004 / 1000, "S3 Standard GET and others", "as above"),
    "secrets_api": Price(
        0.05 / 10_000,
        "Secrets Manager API call",
        "aws.amazon.com/secrets-manager/pricing/ (not re-checked: the key is cached 15 min)",
    ),
    "durable_operation": Price(
        8.00 / MILLION,
        "Lambda durable functions operation",
        "aws.amazon.com/lambda/pricing as transcribed by api-evangelist/aws-lambda "
        "(read 2026-09-20, labelled 'Durable Functions operations (example rate) $8.00/M')",
    ),
}

_ROOT = Path(__file__).resolve().parent.parent / "shared" / "bide"


def _call_defaults(path: Path, function: str) -> dict[str, Any]:
    """Literal keyword defaults of ``function`` (any class) in ``path``, read without
    importing it (importing the CDK takes seconds)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            args = node.args
            pairs = list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
            return {
                a.arg: ast.literal_eval(d)
                for a, d in pairs
                if d is not None and isinstance(d, ast.Constant)
            }
    raise LookupError(f"{function} not found in {path}")


def stack_memory_mb() -> dict[str, int]:
    """The stack's default memory sizes (``BideService``'s keyword defaults)."""
    found = _call_defaults(_ROOT / "cdk" / "service.py", "__init__")
    handler = int(found["handler_memory_size"])
    return {"worker": int(found["worker_memory_size"]), "signal": handler, "api": handler}


def _constant(path: Path, name: str) -> ast.expr:
    """The expression module-level ``name`` is assigned in ``path``, read without importing it."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return node.value
    raise LookupError(f"{name} not found in {path}")


def access_log_format() -> dict[str, str]:
    """The API stage's access log format (``bide.cdk.api.ACCESS_LOG_FORMAT``), read from
    source: each request writes one line of it."""
    call = _constant(_ROOT / "cdk" / "api.py", "ACCESS_LOG_FORMAT")
    assert isinstance(call, ast.Call)
    value = ast.literal_eval(call.args[0])
    assert isinstance(value, dict)
    return value


def lambda_logging() -> dict[str, str]:
    """The functions' advanced logging controls (``bide.cdk.functions.LOGGING_CONFIG``, in
    CloudFormation's ``LoggingConfig`` names), read from source."""
    value = ast.literal_eval(_constant(_ROOT / "cdk" / "functions.py", "LOGGING_CONFIG"))
    assert isinstance(value, dict)
    return value


# Lambda's system log levels, most detailed first, and the level Lambda gives each record of an
# invocation that succeeds: start and report INFO, runtimeDone (the END line) DEBUG; they are
# WARN only when the invocation fails
# (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html,
# "System log level event mapping"). Level filtering needs the JSON format; in Text format
# Lambda writes START, END and REPORT whatever the level.
SYSTEM_LEVELS = ("DEBUG", "INFO", "WARN")
SUCCESS_RECORD_LEVELS = {
    "platform.start": "INFO",
    "platform.runtimeDone": "DEBUG",
    "platform.report": "INFO",
}
PLATFORM_TIME = "2026-12-01T12:00:00.000Z"


def platform_log(
    logging: dict[str, str], request_id: str, billed: int, memory_mb: int, max_used_mb: int = 112
) -> str:
    """What Lambda itself writes to a function's log group for one invocation that succeeds,
    under ``logging`` (:func:`lambda_logging`): the three text lines in Text format, else the
    JSON records at or above the system log level, shaped as the Telemetry API's
    (https://docs.aws.amazon.com/lambda/latest/dg/telemetry-schema-reference.html). ``billed``
    stands in for the measured duration too."""
    if logging.get("LogFormat", "Text").upper() != "JSON":
        return (
            f"START RequestId: {request_id} Version: $LATEST\nEND RequestId: {request_id}\n"
            f"REPORT RequestId: {request_id}\tDuration: {billed:.2f} ms\tBilled Duration: "
            f"{billed} ms\tMemory Size: {memory_mb} MB\tMax Memory Used: {max_used_mb} MB\t\n"
        )
    level = logging.get("SystemLogLevel", "INFO")
    if level not in SYSTEM_LEVELS:
        raise ValueError(f"SystemLogLevel {level!r} is not one of {SYSTEM_LEVELS}")
    records = {
        "platform.start": {"requestId": request_id, "version": "$LATEST"},
        "platform.runtimeDone": {
            "requestId": request_id,
            "status": "success",
            "metrics": {"durationMs": float(billed), "producedBytes": 0},
        },
        "platform.report": {
            "requestId": request_id,
            "metrics": {
                "durationMs": float(billed),
                "billedDurationMs": billed,
                "memorySizeMB": memory_mb,
                "maxMemoryUsedMB": max_used_mb,
            },
            "status": "success",
        },
    }
    lines = [
        json.dumps({"time": PLATFORM_TIME, "type": kind, "record": record}, separators=(",", ":"))
        for kind, record in records.items()
        if SYSTEM_LEVELS.index(SUCCESS_RECORD_LEVELS[kind]) >= SYSTEM_LEVELS.index(level)
    ]
    return "".join(f"{line}\n" for line in lines)


def billed_ms(cpu_seconds: float, memory_mb: int) -> int:
    """Lambda's billed milliseconds for ``cpu_seconds`` of one full core's CPU work: scaled to
    the function's CPU share below 1,769 MB, rounded up to 1 ms."""
    share = min(1.0, memory_mb / FULL_CORE_MB)
    return max(1, math.ceil(cpu_seconds / share * 1000))


def lambda_usd(invocations: int, billed_ms_total: int, memory_mb: int) -> float:
    """Requests plus GB-seconds at ``memory_mb``."""
    gb_s = memory_mb / 1024 * billed_ms_total / 1000
    return invocations * PRICES["lambda_request"].usd + gb_s * PRICES["lambda_arm_gb_s"].usd


def sqs_chunks(payload_bytes: int) -> int:
    """SQS bills a request per 64 KB chunk of its payload (at least one)."""
    return max(1, math.ceil(payload_bytes / 65_536))


def write_units(size: int) -> int:
    """Write request units of one item of ``size`` bytes (1 KB each, rounded up)."""
    return max(1, math.ceil(size / 1024))


def read_units(size: int) -> int:
    """Read request units of ``size`` bytes read strongly consistent (4 KB each)."""
    return max(1, math.ceil(size / 4096))
