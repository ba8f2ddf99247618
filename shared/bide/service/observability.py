"""Logs, metrics and (opt-in) traces of the host services.

* :data:`logger`: the services' logger (JSON lines, :mod:`bide.service.logs`);
  :func:`correlated` adds ``session_id``/``task_id`` to every line logged inside it.
* :func:`count`: an EMF count metric (namespace :data:`~bide.constants.METRICS_NAMESPACE`),
  optionally with dimensions; :func:`flush` writes what was counted (the entry points in
  :mod:`bide.service.http` flush once per call), one document when the counts allow it
  (:mod:`bide.service.emf`).
* :class:`ObservedStore`: a store wrapper that counts commit conflicts.
* :func:`lambda_entry`: what every Lambda handler is wrapped in. The X-Ray tracer is added
  only when ``BIDE_TRACING=1``: importing and starting it costs hundreds of milliseconds of
  cold start, so nobody pays for it by default.

Neither logs nor metrics import Powertools (its package root alone is some 40 modules on
every cold start, issue 12 goal 7); the environment variables deployed stacks set for it
keep their meaning: ``POWERTOOLS_LOG_LEVEL`` (the level) and ``POWERTOOLS_METRICS_DISABLED``
(or ``POWERTOOLS_DEV``; no metrics written).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..constants import ENV_TRACING, METRICS_NAMESPACE, SERVICE_NAME
from ..engine.clock import SystemClock
from ..engine.errors import ConflictError
from ..engine.records import TaskRecord
from ..engine.store.base import Doc
from ..engine.store.wrapper import StoreWrapper
from ..tools.redaction import install_log_filter
from . import logs
from .emf import MetricBuffer

F = TypeVar("F", bound=Callable[..., Any])

logger, log_handler = logs.service_logger(SERVICE_NAME)
"""The services' logger (JSON lines on stdout through :data:`log_handler`; the level from
``AWS_LAMBDA_LOG_LEVEL``, ``POWERTOOLS_LOG_LEVEL`` or ``LOG_LEVEL``, INFO by default)."""
# No provider token reaches a log line, whichever logger wrote it (bide.tools.redaction).
install_log_filter(logger)
install_log_filter()

correlated = logs.correlated

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

#: The dimension on every metric :func:`count` writes (as Powertools' EMF provider, which
#: this replaced, put it on every blob): part of every metric's identity in CloudWatch, so an
#: alarm must name it too.
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


# What count() adds up until flush(): the service dimension on every metric.
_counts = MetricBuffer(
    METRICS_NAMESPACE, SystemClock().now, common={SERVICE_DIMENSION: SERVICE_NAME}
)


def count(name: str, value: float = 1, **dimensions: str) -> None:
    """Add ``value`` to the count metric ``name`` under ``dimensions`` (keep their values to a
    small fixed set: every distinct value is a separate CloudWatch metric). ValueError for a
    metric or dimensions :data:`METRICS` does not list."""
    _check(name, dimensions)
    _counts.add(name, value, dimensions)


def metrics_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment turns metrics off, as it did for Powertools:
    ``POWERTOOLS_METRICS_DISABLED`` true, or ``POWERTOOLS_DEV`` true with the former unset."""
    env = os.environ if environ is None else environ
    disabled = env.get("POWERTOOLS_METRICS_DISABLED")
    if disabled is not None:
        return _truthy(disabled)
    return _truthy(env.get("POWERTOOLS_DEV", "false"))


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "y", "on", "t")


def flush() -> None:
    """Write every counted metric as EMF to stdout (CloudWatch extracts it from the log) and
    start afresh. Nothing is written when nothing was counted or metrics are disabled."""
    documents = _counts.drain()
    if metrics_disabled():
        return
    for document in documents:
        print(json.dumps(document, separators=(",", ":")))


def bounded(value: str, allowed: frozenset[str], other: str = "other") -> str:
    """``value`` if it is one of ``allowed``, else ``other``: a dimension's values must stay
    few, whatever a message claims."""
    return value if value in allowed else other


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
    tracing = tracing_enabled()

    @functools.wraps(handler)
    def with_context(event: Any, context: Any) -> Any:
        trace = logs.trace_id(os.environ) if tracing else None
        with logs.invocation(context, trace_id=trace):
            return handler(event, context)

    wrapped: Any = with_context
    if tracing:
        # Imported here: the X-Ray SDK is the most expensive import of a cold start.
        from aws_lambda_powertools import Tracer

        wrapped = Tracer(service=SERVICE_NAME).capture_lambda_handler(wrapped)
    return wrapped  # type: ignore[no-any-return]
