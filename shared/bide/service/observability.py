"""Logs, metrics and (opt-in) traces of the host services, on Powertools.

* :data:`logger`: a Powertools Logger; :func:`correlated` adds ``session_id``/``task_id`` to
  every line logged inside it.
* :func:`count`: an EMF count metric (namespace :data:`~bide.constants.METRICS_NAMESPACE`),
  optionally with dimensions; :func:`flush` writes what was counted (the entry points in
  :mod:`bide.service.http` flush once per call).
* :class:`ObservedStore`: a store wrapper that counts commit conflicts.
* :func:`lambda_entry`: what every Lambda handler is wrapped in. The X-Ray tracer is added
  only when ``BIDE_TRACING=1``: importing and starting it costs hundreds of milliseconds of
  cold start, so nobody pays for it by default.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from ..constants import ENV_TRACING, METRICS_NAMESPACE, SERVICE_NAME
from ..engine.errors import ConflictError
from ..engine.records import TaskRecord
from ..engine.store.base import Doc
from ..engine.store.wrapper import StoreWrapper
from ..tools.redaction import install_log_filter

F = TypeVar("F", bound=Callable[..., Any])

logger = Logger(service=SERVICE_NAME)
"""The services' logger (JSON lines; level from ``POWERTOOLS_LOG_LEVEL``)."""
# No provider token reaches a log line, whichever logger wrote it (bide.tools.redaction).
install_log_filter(logging.getLogger(logger.name))
install_log_filter()

# Metric names, so dashboards and alarms (bide.cdk) and the code agree.
WAKES = "Wakes"  # dimension reason: why a worker ran
PARKS = "Parks"  # worker runs that ended with nothing runnable
WORKER_ACTIONS = "WorkerActions"  # dimension action: requeued | armed | disarmed | idle | kept
WORKER_FAILURES = "WorkerFailures"  # runs that raised; SQS redelivers their wake
MALFORMED_WAKES = "MalformedWakes"  # wake messages that could never run (dropped)
DEAD_LETTERED_WAKES = "DeadLetteredWakes"  # wakes the worker dead-lettered on their last try
SIGNAL_RESULTS = "SignalResults"  # dimensions result, route
COMMIT_CONFLICTS = "CommitConflicts"  # commits refused because another writer got there first
HANDLER_FAILURES = "HandlerFailures"  # dimension function: api | signal; requests answered 500
WORKFLOW_NONDETERMINISM = "WorkflowNondeterminism"  # workflow runs failed: body != history

#: Every metric :func:`count` may emit: name -> the names of the dimensions it is counted
#: under. :func:`count` refuses anything else, so this is the whole set of custom metrics the
#: code writes, and the alarms of :mod:`bide.cdk.monitoring` are checked against it
#: (tests/test_infra_monitoring.py): an alarm cannot watch a metric nothing emits.
METRICS: dict[str, frozenset[str]] = {
    WAKES: frozenset({"reason"}),
    PARKS: frozenset(),
    WORKER_ACTIONS: frozenset({"action"}),
    WORKER_FAILURES: frozenset(),
    MALFORMED_WAKES: frozenset(),
    DEAD_LETTERED_WAKES: frozenset(),
    SIGNAL_RESULTS: frozenset({"result", "route"}),
    COMMIT_CONFLICTS: frozenset(),
    HANDLER_FAILURES: frozenset({"function"}),
    WORKFLOW_NONDETERMINISM: frozenset(),
}

#: The dimension Powertools adds to every EMF blob that has a service name
#: (``AmazonCloudWatchEMFProvider.serialize_metric_set``): part of every metric's identity in
#: CloudWatch, so an alarm must name it too.
SERVICE_DIMENSION = "service"


def emitted_dimensions(name: str, **dimensions: str) -> dict[str, str]:
    """The full dimension set CloudWatch files ``count(name, **dimensions)`` under (the
    service dimension included): what an alarm on that count must name. ValueError for a
    metric or dimensions :data:`METRICS` does not list."""
    _check(name, dimensions)
    return {SERVICE_DIMENSION: SERVICE_NAME, **dimensions}


def _check(name: str, dimensions: dict[str, str]) -> None:
    expected = METRICS.get(name)
    if expected is None:
        raise ValueError(f"metric {name!r} is not in observability.METRICS")
    if set(dimensions) != expected:
        raise ValueError(
            f"metric {name!r} is counted under dimensions {sorted(expected)}, "
            f"not {sorted(dimensions)}"
        )


# One EMF provider per distinct dimension set: a dimension applies to a whole EMF blob, so
# counts with different dimensions must be separate blobs. Built on first use, dropped at flush.
_blobs: dict[tuple[tuple[str, str], ...], AmazonCloudWatchEMFProvider] = {}


def count(name: str, value: float = 1, **dimensions: str) -> None:
    """Add ``value`` to the count metric ``name`` under ``dimensions`` (keep their values to a
    small fixed set: every distinct value is a separate CloudWatch metric). ValueError for a
    metric or dimensions :data:`METRICS` does not list."""
    _check(name, dimensions)
    key = tuple(sorted(dimensions.items()))
    blob = _blobs.get(key)
    if blob is None:
        blob = AmazonCloudWatchEMFProvider(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)
        for dimension, dimension_value in key:
            blob.add_dimension(name=dimension, value=dimension_value)
        _blobs[key] = blob
    blob.add_metric(name=name, unit=MetricUnit.Count, value=value)


def flush() -> None:
    """Write every counted metric as EMF to stdout (CloudWatch picks it up from the log) and
    start afresh. Nothing is written when nothing was counted."""
    blobs = list(_blobs.values())
    _blobs.clear()
    for blob in blobs:
        if blob.metric_set:
            blob.flush_metrics()


def bounded(value: str, allowed: frozenset[str], other: str = "other") -> str:
    """``value`` if it is one of ``allowed``, else ``other``: a dimension's values must stay
    few, whatever a message claims."""
    return value if value in allowed else other


@contextmanager
def correlated(**keys: str | None) -> Iterator[None]:
    """Log lines inside carry ``keys`` (None values are skipped); earlier values of the same
    keys come back afterwards."""
    present = {k: v for k, v in keys.items() if v is not None}
    before = logger.get_current_keys()
    logger.append_keys(**present)
    try:
        yield
    finally:
        logger.remove_keys(list(present))
        restore = {k: before[k] for k in present if k in before}
        if restore:
            logger.append_keys(**restore)


class ObservedStore(StoreWrapper):
    """A :class:`~bide.engine.store.Store` that counts commit conflicts (a concurrent writer won;
    the caller reloads). Everything else passes straight through."""

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """See :meth:`bide.engine.store.Store.commit`; a conflict is counted, then raised."""
        try:
            return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        except ConflictError:
            count(COMMIT_CONFLICTS)
            raise


def workflow_nondeterminism(session_id: str, details: dict[str, Any]) -> None:
    """The harness service :data:`bide.workflow.nondeterminism.NONDETERMINISM_SINK`: a workflow run
    failed because its body no longer replays its history (a deploy changed a body with runs
    in flight). One error log line and one count of :data:`WORKFLOW_NONDETERMINISM`."""
    logger.error(
        "workflow non-determinism",
        extra={"session_id": session_id, "nondeterminism": details},
    )
    count(WORKFLOW_NONDETERMINISM)


def tracing_enabled() -> bool:
    """Whether ``BIDE_TRACING=1`` asks for X-Ray tracing."""
    return os.environ.get(ENV_TRACING, "").strip() == "1"


def lambda_entry(handler: F) -> F:
    """Wrap a Lambda handler: Lambda context in every log line (state cleared per
    invocation) and, only when :func:`tracing_enabled`, an X-Ray trace of the invocation."""
    wrapped: Any = logger.inject_lambda_context(handler, clear_state=True)
    if tracing_enabled():
        # Imported here: the X-Ray SDK is the most expensive import of a cold start.
        from aws_lambda_powertools import Tracer

        wrapped = Tracer(service=SERVICE_NAME).capture_lambda_handler(wrapped)
    return wrapped  # type: ignore[no-any-return]
