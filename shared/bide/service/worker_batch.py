"""The worker function's entry point: an SQS batch of session wakes, each run with
:func:`~bide.service.worker.run_session` until parked, answered with partial batch failures
(the queue's event source mapping reports ``ReportBatchItemFailures``).

Failures are handled as the FIFO queue behaves:

* ordering holds per message group (= session): "Messages within the same message group are
  always processed one at a time, in strict order"
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html).
  So a failed record fails the later records of its own session only; other sessions run.
* a failed wake is retried in-process first (a short backoff within the invocation's time);
  still failing, its visibility is shortened to seconds, because a failed FIFO message
  otherwise blocks its group for the whole visibility timeout
  (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html,
  https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned).
* on its last attempt (ApproximateReceiveCount reached the queue's maxReceiveCount) the wake
  goes to the dead-letter queue with the reason and the record counts as done.
"""

from __future__ import annotations

from typing import Any

from ..aws.sqs import parse_wake, read_wake
from ..constants import DEFAULT_SAFETY_MARGIN_MS
from ..engine.partial import Focus
from . import observability as obs
from .deps import Deps
from .worker import run_session

# Wake reasons worth their own metric; anything else is counted as "other".
_WAKE_REASONS = frozenset(
    {
        "signal",
        "signal-retried",
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

# In-process retries of a failed wake: delays before the 2nd and 3rd attempt (seconds).
RETRY_BACKOFF_SECONDS = (0.5, 2.0)
# Then the message comes back after this many seconds, doubling per receive, capped.
REDELIVERY_BASE_SECONDS = 5
REDELIVERY_CAP_SECONDS = 120


async def handle_worker(
    deps: Deps,
    event: dict[str, Any],
    context: Any,
    *,
    safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
) -> dict[str, Any]:
    """Run the session of each wake in an SQS batch, in order, until parked; answer with the
    partial batch failure response (``{"batchItemFailures": [{"itemIdentifier": id}]}``).

    A run stops ``safety_margin_ms`` before the invocation's deadline
    (``context.get_remaining_time_in_millis()``, when there is one); the session is then
    re-queued. Once a record fails, the later records of the same session are reported
    failed without running (FIFO order holds per message group); other sessions run.
    """
    stop_at = _stop_at(deps, context, safety_margin_ms)
    failures: list[str] = []
    failed_groups: dict[str, int] = {}  # session -> redelivery delay of its failed records
    try:
        for record in event.get("Records") or []:
            message_id = str(record.get("messageId", ""))
            group = _group(record)
            if group in failed_groups:
                _redeliver_in(deps, record, failed_groups[group])
                failures.append(message_id)
                continue
            if not await _wake_one(deps, record, stop_at):
                failed_groups[group] = _redelivery_delay(record)
                _redeliver_in(deps, record, failed_groups[group])
                failures.append(message_id)
    finally:
        obs.flush()
    return {"batchItemFailures": [{"itemIdentifier": m} for m in failures]}


def _group(record: dict[str, Any]) -> str:
    """The record's message group (its session); the body's session id when the record has
    no attributes, the message id when it has neither (a malformed wake is its own group)."""
    group = (record.get("attributes") or {}).get("MessageGroupId")
    if group:
        return str(group)
    try:
        return parse_wake(str(record.get("body", "")))[0]
    except ValueError:
        return f"message:{record.get('messageId', '')}"


def _receive_count(record: dict[str, Any]) -> int:
    try:
        return max(1, int((record.get("attributes") or {}).get("ApproximateReceiveCount", 1)))
    except (TypeError, ValueError):
        return 1


def _redelivery_delay(record: dict[str, Any]) -> int:
    backoff = REDELIVERY_BASE_SECONDS * 2 ** (_receive_count(record) - 1)
    return int(min(REDELIVERY_CAP_SECONDS, backoff))


def _redeliver_in(deps: Deps, record: dict[str, Any], seconds: int) -> None:
    """Shorten a failed record's visibility (the local queue keeps its own retry delay)."""
    change = getattr(deps.queue, "change_visibility", None)
    handle = record.get("receiptHandle")
    if not callable(change) or not handle:
        return
    try:
        change(str(handle), seconds)
    except Exception:
        # Not fatal: the message then comes back after the queue's visibility timeout.
        obs.logger.exception("could not shorten a failed wake's visibility")


async def _wake_one(deps: Deps, record: dict[str, Any], stop_at: float | None) -> bool:
    """One wake; False when it failed and SQS must deliver it again."""
    body = str(record.get("body", ""))
    try:
        wake = read_wake(body)  # read once: every field the run needs
    except ValueError as exc:
        # No retry can make a malformed wake valid; failing it would hold back the rest of
        # its group until it reached the dead-letter queue. Dropped, loudly.
        obs.logger.error(
            "dropping a malformed wake message",
            extra={"message_id": record.get("messageId"), "error": str(exc)},
        )
        obs.count(obs.MALFORMED_WAKES)
        return True
    session_id, reason = wake.session_id, wake.reason
    with obs.correlated(session_id=session_id):
        obs.count(obs.WAKES, reason=obs.bounded(reason, _WAKE_REASONS))
        # The fired schedule is known gone only on the wake's first delivery and attempt: an
        # attempt that failed or died may already have armed a new one.
        first_delivery = _receive_count(record) == 1
        # A signal's wake names its task: the run is owed to that task alone (worker.py). Each
        # record of a batch runs on its own, so one wake never stands for another's.
        # With the task, its sealed pages' count: the targeted read fetches them with it.
        focus: Focus | None = None if wake.focus is None else (*wake.focus, wake.pages)
        attempt = 0
        while True:
            attempt += 1
            fired = wake.fired_at if first_delivery and attempt == 1 else None
            try:
                done = await run_session(
                    deps,
                    session_id,
                    stop_at=stop_at,
                    fired_for=fired,
                    focus=focus,
                    # Held only on a first try: a retry's crashes then count as restarts.
                    hold_reservation=first_delivery and attempt == 1,
                )
                break
            except Exception as exc:
                obs.logger.exception("worker run failed", extra={"attempt": attempt})
                obs.count(obs.WORKER_FAILURES)
                if attempt <= len(RETRY_BACKOFF_SECONDS):
                    delay = RETRY_BACKOFF_SECONDS[attempt - 1]
                    if stop_at is None or deps.clock.now() + delay < stop_at:
                        await deps.sleep(delay)
                        continue
                return _dead_lettered(deps, record, session_id, body, exc, attempt)
        obs.count(obs.WORKER_ACTIONS, action=done.action)
        if not done.wake.active:
            obs.count(obs.PARKS)
        obs.logger.info(
            "session parked" if not done.wake.active else "session still active",
            extra={"reason": reason, "action": done.action, "wake_at": done.wake.at},
        )
    return True


def _dead_lettered(
    deps: Deps, record: dict[str, Any], session_id: str, body: str, exc: Exception, tries: int
) -> bool:
    """On the wake's last delivery, send it to the dead-letter queue with why (True: the
    record is done). Otherwise False: SQS delivers it again."""
    receives = _receive_count(record)
    limit = deps.max_receive_count
    if deps.dead_letters is None or limit is None or receives < limit:
        return False
    reason = {
        "error_type": type(exc).__name__,
        "error": str(exc)[:2000],
        "receives": receives,
        "attempts_last_delivery": tries,
        "at": deps.clock.now(),
        "message_id": record.get("messageId"),
    }
    try:
        deps.dead_letters.dead_letter(session_id, body, reason)
    except Exception:
        obs.logger.exception("could not dead-letter the wake; SQS's redrive will")
        return False
    obs.logger.error("wake dead-lettered after its last attempt", extra=reason)
    obs.count(obs.DEAD_LETTERED_WAKES)
    return True


def _stop_at(deps: Deps, context: Any, margin_ms: int) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return deps.clock.now() + (float(remaining()) - margin_ms) / 1000.0
