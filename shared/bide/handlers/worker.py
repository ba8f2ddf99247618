"""Lambda entry point of the worker: batches of session wakes from the SQS FIFO queue (message
group = session), answered with partial batch failures (enable ReportBatchItemFailures)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from ..service.config import Settings, deps_from_env, settings_from_env
from ..service.deps import Deps
from ..service.observability import lambda_entry

# From its own module, not bide.service.http's re-export: the HTTP router, its request body
# checks and the webhook tokens are the HTTP functions' path, which the worker never takes.
from ..service.worker_batch import handle_worker


@functools.cache
def configured() -> tuple[Settings, Deps]:
    """Settings and deps, built once per cold start on first use (importing needs no env)."""
    settings = settings_from_env(require_alarms=True)  # the worker arms alarms
    return settings, deps_from_env(settings=settings)


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run each woken session until parked; report the records SQS must deliver again."""
    settings, deps = configured()
    # asyncio.run, as bide.service.transport.run is: a fresh event loop per call, closed
    # afterwards (that module is the HTTP functions' plumbing, not imported here).
    return asyncio.run(
        handle_worker(deps, event, context, safety_margin_ms=settings.safety_margin_ms)
    )
