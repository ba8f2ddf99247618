"""Lambda entry point of the worker: batches of session wakes from the SQS FIFO queue (message
group = session), answered with partial batch failures (enable ReportBatchItemFailures)."""

from __future__ import annotations

import functools
from typing import Any

from ..service.config import Settings, deps_from_env, settings_from_env
from ..service.deps import Deps
from ..service.http import handle_worker, run
from ..service.observability import lambda_entry


@functools.cache
def configured() -> tuple[Settings, Deps]:
    """Settings and deps, built once per cold start on first use (importing needs no env)."""
    settings = settings_from_env(require_alarms=True)  # the worker arms alarms
    return settings, deps_from_env(settings=settings)


@lambda_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run each woken session until parked; report the records SQS must deliver again."""
    settings, deps = configured()
    return run(handle_worker(deps, event, context, safety_margin_ms=settings.safety_margin_ms))
