"""API Gateway HTTP API (payload 2.0) plumbing shared by every route group and entry point:
running an ``async`` entry point from synchronous code, reading a request's body, JSON
answers and the "store is busy" answer.

Nothing here routes; :mod:`bide.service.http` does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from .deps import Deps
from .json_body import JsonRefused, strict_json
from .webhooks import WebhookRejected

T = TypeVar("T")

#: Headers of every 503 answer: the store was busy, the request may be sent again at once.
RETRY_AFTER: dict[str, str] = {"Retry-After": "1"}


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run an entry point from synchronous code (a Lambda handler): a fresh event loop per
    call, closed afterwards, so nothing outlives the invocation."""
    return asyncio.run(coro)


def request_body(event: dict[str, Any]) -> bytes:
    """The request body as sent (base64 decoded when the event says so); raises
    :class:`WebhookRejected` (400) for a body marked base64 that is not."""
    raw = event.get("body")
    if raw is None:
        return b""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise WebhookRejected(400, "body is marked base64 but is not valid base64") from None
    return str(raw).encode("utf-8")


def unreadable_body(event: dict[str, Any]) -> str | None:
    """Why a request body cannot be read as text, or None. (Powertools decodes a body as
    UTF-8 when a route takes one, and fails with a 500 on one that is not.)"""
    try:
        request_body(event).decode("utf-8")
    except WebhookRejected as exc:
        return exc.message
    except UnicodeDecodeError as exc:
        return f"body is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
    return None


def hostile_json(event: dict[str, Any]) -> str | None:
    """Why a readable request body is JSON the service refuses (too deep, a number too long
    or not finite), or None. Bodies that are simply not JSON are left to the route, which
    answers them as it always has."""
    text = request_body(event).decode("utf-8")
    if not text.strip():
        return None
    try:
        strict_json(text)
    except JsonRefused as exc:
        return f"body refused: {exc}"
    except json.JSONDecodeError:
        return None
    return None


def json_text(value: Any) -> str:
    """``value`` as compact JSON, the way every hand-built answer is written."""
    return json.dumps(value, separators=(",", ":"))


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A proxy result with a JSON body, for answers given without the router (a request
    refused before routing, a crash)."""
    return {
        "statusCode": int(status),
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json_text(body),
        "isBase64Encoded": False,
    }


#: The error text of every 503. It never carries the exception's own text: webhook callers
#: are unauthenticated, and what the store said is for the logs (which get it), not for them.
BUSY_ERROR = "the session store is busy; try again"


def require(deps: Deps | None) -> Deps:
    """The deps a route runs with; a resolver built without them (for its OpenAPI document)
    refuses to run any route."""
    if deps is None:
        raise RuntimeError("this resolver was built for its OpenAPI document only")
    return deps
