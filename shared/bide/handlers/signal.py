"""Lambda entry point of signal delivery: API Gateway HTTP API (payload 2.0) routes
``POST /hooks/{token}`` (capability webhooks) and
``POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}`` (IAM)."""

from __future__ import annotations

import functools
from typing import Any

from ..service.config import deps_from_env
from ..service.deps import Deps
from ..service.http import handle_signal, run
from ..service.observability import lambda_entry


@functools.cache
def configured() -> Deps:
    """Deps, built once per cold start on first use (importing needs no env)."""
    return deps_from_env()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Deliver the request's signal; the answer carries the SignalResult."""
    return run(handle_signal(configured(), event, context))
