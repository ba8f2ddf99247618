"""Synthetic Lambda inputs of the handler tests: API Gateway HTTP API (payload 2.0) events
for the signal and API functions, and the parts of a Lambda context the handlers read."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

ACCOUNT = "123456789012"
#: The IAM caller of every synthetic API event unless a test names another.
PRINCIPAL = f"arn:aws:iam::{ACCOUNT}:user/alice"

__all__ = [
    "ACCOUNT",
    "PRINCIPAL",
    "FakeContext",
    "hook_event",
    "http_event",
    "response_json",
    "signal_event",
]


@dataclass
class FakeContext:
    """The parts of a Lambda context the handlers and their log lines read."""

    remaining_ms: int = 300_000
    function_name: str = "bide-test"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:bide-test"
    aws_request_id: str = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


_request_ids = itertools.count(1)


def http_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    raw: bytes | str | None = None,
    headers: dict[str, str] | None = None,
    base64_body: bool = False,
    route_key: str = "$default",
    principal: str | None = PRINCIPAL,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event. ``body`` is sent as JSON; ``raw`` as is.
    ``principal`` is the IAM caller (``requestContext.authorizer.iam.userArn``; None for
    none, as on the webhook route); ``query`` the query string parameters."""
    all_headers = {"content-type": "application/json"} if body is not None else {}
    all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    payload: bytes | None = None
    if body is not None:
        payload = json.dumps(body).encode()
    elif raw is not None:
        payload = raw if isinstance(raw, bytes) else raw.encode()
    text: str | None = None
    if payload is not None:
        text = base64.b64encode(payload).decode() if base64_body else payload.decode()
    number = next(_request_ids)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": urlencode(query or {}),
        "headers": all_headers,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "api",
            "domainName": "api.example.test",
            "domainPrefix": "api",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.1",
                "userAgent": "pytest",
            },
            "requestId": f"r{number}",
            "routeKey": route_key,
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1_767_225_600_000,
        },
        "body": text,
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = dict(query)
    if principal is not None:
        event["requestContext"]["authorizer"] = {
            "iam": {"accountId": ACCOUNT, "callerId": "AIDATEST", "userArn": principal}
        }
    return event


def signal_event(
    session_id: str, task_id: str, signal: str, key: str, value: Any = None, **kw: Any
) -> dict[str, Any]:
    """``POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}``."""
    path = f"/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}"
    route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}"
    return http_event("POST", path, body=value, route_key=route, **kw)


def hook_event(token: str, raw: bytes | str | None, **kw: Any) -> dict[str, Any]:
    """``POST /hooks/{token}`` (no IAM caller: the token is the credential)."""
    kw.setdefault("principal", None)
    return http_event("POST", f"/hooks/{token}", raw=raw, route_key="POST /hooks/{token}", **kw)


def response_json(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])
