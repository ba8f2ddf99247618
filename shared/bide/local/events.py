"""Lambda-shaped events for the local stack: what API Gateway and SQS would hand the handlers.

The local stack calls the *same* handlers the Lambda functions call, so it builds the same
events: API Gateway HTTP API payload-2.0 events for requests (routed by the same route table
the CDK stack declares) and SQS batch events for wakes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from ..engine.clock import Clock

LOCAL_ACCOUNT = "000000000000"
LOCAL_QUEUE_NAME = "bide-local-wakes.fifo"


def local_region() -> str:
    """The region named in events (only cosmetic locally)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


@dataclass(frozen=True)
class Route:
    """One HTTP API route: ``method`` (or ``ANY``), a path template and the function behind
    it (``"api"`` or ``"signal"``)."""

    method: str
    template: str
    target: str

    @property
    def key(self) -> str:
        """The route key as API Gateway writes it into events (``"POST /hooks/{token}"``)."""
        return f"{self.method} {self.template}"

    @property
    def greedy(self) -> bool:
        """Whether the template ends in a greedy ``{name+}`` parameter."""
        return self.template.endswith("+}")

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The path parameters when this route takes the request, else None."""
        if self.method not in ("ANY", method):
            return None
        parts = self.template.strip("/").split("/")
        segments = path.strip("/").split("/") if path.strip("/") else []
        params: dict[str, str] = {}
        for index, part in enumerate(parts):
            if part.startswith("{") and part.endswith("+}"):
                rest = segments[index:]
                if not rest or any(not s for s in rest):
                    return None
                params[part[1:-2]] = unquote("/".join(rest))
                return params
            if index >= len(segments):
                return None
            segment = segments[index]
            if part.startswith("{") and part.endswith("}"):
                if not segment:
                    return None
                params[part[1:-1]] = unquote(segment)
            elif part != segment:
                return None
        return params if len(segments) == len(parts) else None


# The routes of the deployed HTTP API (bide/cdk/api.py), in API Gateway's order of
# precedence: exact templates before greedy ones, so the signal route wins over
# /sessions/{proxy+} exactly as it does on AWS.
ROUTES: tuple[Route, ...] = (
    Route("POST", "/hooks/{token}", "signal"),
    Route("POST", "/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}", "signal"),
    # The failure forms (bide.service.failure_body).
    Route("POST", "/hooks/{token}/failure", "signal"),
    Route(
        "POST", "/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/failure", "signal"
    ),
    Route("POST", "/hooks/{token}/heartbeat", "signal"),
    Route(
        "POST", "/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/heartbeat", "signal"
    ),
    Route("ANY", "/sessions", "api"),
    Route("ANY", "/sessions/{proxy+}", "api"),
)


def find_route(
    method: str, path: str, routes: Sequence[Route] = ROUTES
) -> tuple[Route, dict[str, str]] | None:
    """The route taking ``method path`` and its path parameters, or None (API Gateway: 404)."""
    for greedy in (False, True):
        for route in routes:
            if route.greedy is not greedy:
                continue
            params = route.match(method, path)
            if params is not None:
                return route, params
    return None


def _joined(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    # API Gateway v2 joins repeated headers and query parameters with commas.
    joined: dict[str, str] = {}
    for name, value in pairs:
        joined[name] = f"{joined[name]},{value}" if name in joined else value
    return joined


def http_api_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    route: Route | None,
    path_parameters: dict[str, str] | None,
    source_ip: str,
    domain: str,
    request_id: str,
    now: float,
    principal: str | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API payload-2.0 event for one request. ``principal``: the IAM
    caller of an IAM-authorised route, written where API Gateway writes it
    (``requestContext.authorizer.iam.userArn``).

    Header names are lowercased and repeats comma-joined; cookies move to ``cookies``; a body
    that is not UTF-8 is base64-encoded with ``isBase64Encoded``; ``body`` is absent when the
    request had none (as on AWS).
    """
    lowered = [(name.lower(), value) for name, value in headers]
    cookies = [c.strip() for n, v in lowered if n == "cookie" for c in v.split(";") if c.strip()]
    header_map = _joined((n, v) for n, v in lowered if n != "cookie")
    moment = datetime.fromtimestamp(now, tz=UTC)
    route_key = route.key if route is not None else "$default"
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": header_map,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": "local",
            "domainName": domain,
            "domainPrefix": domain.split(".")[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": header_map.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": route_key,
            "stage": "$default",
            "time": moment.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if principal is not None:
        event["requestContext"]["authorizer"] = {
            "iam": {"accountId": LOCAL_ACCOUNT, "callerId": principal, "userArn": principal}
        }
    if cookies:
        event["cookies"] = cookies
    if raw_query:
        query = parse_qsl(raw_query, keep_blank_values=True)
        event["queryStringParameters"] = _joined(query)
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
    return event


@dataclass(frozen=True)
class WakeMessage:
    """One queued wake, as the SQS FIFO queue would deliver it."""

    message_id: str
    session_id: str
    body: str
    sent_at: float
    receive_count: int


def sqs_event(messages: Sequence[WakeMessage], now: float) -> dict[str, Any]:
    """An SQS batch event (the shape Lambda's event source mapping sends) for ``messages``."""
    region = local_region()
    arn = f"arn:aws:sqs:{region}:{LOCAL_ACCOUNT}:{LOCAL_QUEUE_NAME}"
    records = []
    for m in messages:
        records.append(
            {
                "messageId": m.message_id,
                "receiptHandle": f"local-{m.message_id}",
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": str(m.receive_count),
                    "SentTimestamp": str(int(m.sent_at * 1000)),
                    "SenderId": LOCAL_ACCOUNT,
                    "ApproximateFirstReceiveTimestamp": str(int(now * 1000)),
                    "SequenceNumber": m.message_id.rjust(20, "0"),
                    "MessageGroupId": m.session_id,
                    "MessageDeduplicationId": m.message_id,
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(m.body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


_FUNCTION_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class LocalContext:
    """What a Lambda handler reads from its ``context``, for one local invocation.

    The remaining time counts down on the stack's clock, so a worker stops starting new work
    near the "timeout" exactly as it would on Lambda.
    """

    function_name: str
    aws_request_id: str
    timeout_seconds: float
    clock: Clock
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    started_at: float = field(init=False)
    _now: Callable[[], float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.function_name = _FUNCTION_NAME.sub("-", self.function_name)
        self._now = self.clock.now
        self.started_at = self._now()

    @property
    def invoked_function_arn(self) -> str:
        """A function ARN in the local account."""
        return f"arn:aws:lambda:{local_region()}:{LOCAL_ACCOUNT}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        """The log group Lambda would use."""
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        """A log stream name (cosmetic)."""
        return f"local/{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before this invocation's "timeout"."""
        left = self.started_at + self.timeout_seconds - self._now()
        return max(0, int(left * 1000))
