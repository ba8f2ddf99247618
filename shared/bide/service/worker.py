"""The worker: load a session, run it until every task is parked, act on ``wake()``, exit."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.harness import Harness
from ..engine.rules import Wake
from ..engine.state import Sleeping
from .deps import Deps


@dataclass(frozen=True)
class WorkerRun:
    """What one worker run did: the session's wake and what was armed."""

    session_id: str
    wake: Wake
    action: str  # "requeued" | "armed" | "disarmed" | "idle" (no alarm existed, none needed)


async def run_session(deps: Deps, session_id: str, *, stop_at: float | None = None) -> WorkerRun:
    """Run ``session_id`` until parked (or until ``stop_at``), then make sure it runs again
    exactly when it must: at once when still active, at ``wake().at``, or never (parked on
    signals only: no alarm at all)."""
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        services=deps.harness_services(),
    )
    await harness.open()
    # Each run leaves the schedule matching its final wake, so an alarm can exist now only if
    # some sleep had a deadline when we loaded. (A run that died before disarming leaves a
    # one-time schedule that fires once, finds nothing, and deletes itself.)
    may_have_alarm = any(
        isinstance(r.state, Sleeping) and r.state.until is not None
        for r in harness.live_tasks.values()
    )
    try:
        wake = await harness.run_until_parked(stop_at=stop_at)
    finally:
        await harness.close()
    action = act_on_wake(deps, session_id, wake, may_have_alarm=may_have_alarm)
    if action in ("armed", "disarmed") and deps.store.head(session_id) != harness.seq:
        # The session moved on after this run's final check: another worker may have run it
        # and armed for the newer state before this (older) arming replaced that alarm.
        # Run again, so the newest state decides the alarm.
        deps.queue.wake(session_id, "rearm")
        action = "requeued"
    return WorkerRun(session_id, wake, action)


def act_on_wake(deps: Deps, session_id: str, wake: Wake, *, may_have_alarm: bool = True) -> str:
    """Re-arm the session as its wake says. No lost wakeup: a signal that lands after the
    harness's final check queues its own wake after its value is stored."""
    if wake.active:
        deps.queue.wake(session_id, "still-active")
        return "requeued"
    if wake.at is not None:
        deps.alarms.arm(session_id, wake.at)
        return "armed"
    if may_have_alarm:
        deps.alarms.disarm(session_id)
        return "disarmed"
    return "idle"
