"""The worker function's entry point: an SQS batch of session wakes, each run with
:func:`~bide.service.worker.run_session` until parked, answered with partial batch failures
(the queue's event source mapping reports ``ReportBatchItemFailures``)."""

from __future__ import annotations

from typing import Any

from ..aws.sqs import parse_wake
from ..constants import DEFAULT_SAFETY_MARGIN_MS
from . import observability as obs
from .deps import Deps
from .worker import run_session

# Wake reasons worth their own metric; anything else is counted as "other".
_WAKE_REASONS = frozenset(
    {
        "signal",
        "signal-stored",
        "alarm",
        "submit",
        "submitted",
        "stop",
        "stopped",
        "cancel",
        "cancelled",
        "still-active",
        "rearm",
    }
)


async def handle_worker(
    deps: Deps,
    event: dict[str, Any],
    context: Any,
    *,
    safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
) -> dict[str, Any]:
    """Run the session of each wake in an SQS batch, in order, until parked; answer with the
    partial batch failure response (``{"batchItemFailures": [{"itemIdentifier": id}]}``).

    A run stops starting new work ``safety_margin_ms`` before the invocation's deadline
    (``context.get_remaining_time_in_millis()``, when there is one); the session is then
    re-queued. Once a record fails, every later record of the batch is reported failed without
    running: the queue is FIFO, and SQS redelivers failed messages in their order.
    """
    failures: list[str] = []
    try:
        for record in event.get("Records") or []:
            message_id = str(record.get("messageId", ""))
            if failures or not await _wake_one(deps, record, context, safety_margin_ms):
                failures.append(message_id)
    finally:
        obs.flush()
    return {"batchItemFailures": [{"itemIdentifier": m} for m in failures]}


async def _wake_one(deps: Deps, record: dict[str, Any], context: Any, margin_ms: int) -> bool:
    """One wake; False when it failed and SQS must deliver it again."""
    try:
        session_id, reason = parse_wake(str(record.get("body", "")))
    except ValueError as exc:
        # No retry can make a malformed wake valid; failing it would hold back the rest of
        # the batch until it reached the dead-letter queue. Dropped, loudly.
        obs.logger.error(
            "dropping a malformed wake message",
            extra={"message_id": record.get("messageId"), "error": str(exc)},
        )
        obs.count(obs.MALFORMED_WAKES)
        return True
    with obs.correlated(session_id=session_id):
        obs.count(obs.WAKES, reason=obs.bounded(reason, _WAKE_REASONS))
        try:
            done = await run_session(deps, session_id, stop_at=_stop_at(deps, context, margin_ms))
        except Exception:
            obs.logger.exception("worker run failed; the wake will be delivered again")
            obs.count(obs.WORKER_FAILURES)
            return False
        obs.count(obs.WORKER_ACTIONS, action=done.action)
        if not done.wake.active:
            obs.count(obs.PARKS)
        obs.logger.info(
            "session parked" if not done.wake.active else "session still active",
            extra={"reason": reason, "action": done.action, "wake_at": done.wake.at},
        )
    return True


def _stop_at(deps: Deps, context: Any, margin_ms: int) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return deps.clock.now() + (float(remaining()) - margin_ms) / 1000.0
