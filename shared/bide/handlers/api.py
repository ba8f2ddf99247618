"""Lambda entry point of the sessions API: API Gateway HTTP API (payload 2.0) routes under
``/sessions`` (IAM), documented in docs/openapi.json."""

from __future__ import annotations

import functools
from typing import Any

from ..service.config import deps_from_env
from ..service.deps import Deps
from ..service.http import handle_api, run
from ..service.observability import lambda_entry


@functools.cache
def configured() -> Deps:
    """Deps, built once per cold start on first use (importing needs no env)."""
    return deps_from_env()


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Route, validate and answer one sessions API request."""
    return run(handle_api(configured(), event, context))
