"""The worker: load a session, run it until every task is parked, act on ``wake()``, exit."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness import Harness
from ..rules import Wake
from .deps import Deps


@dataclass(frozen=True)
class WorkerRun:
    """What one worker run did: the session's wake and what was armed."""

    session_id: str
    wake: Wake
    action: str  # "requeued" | "armed" | "disarmed"


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
    try:
        wake = await harness.run_until_parked(stop_at=stop_at)
    finally:
        await harness.close()
    return WorkerRun(session_id, wake, act_on_wake(deps, session_id, wake))


def act_on_wake(deps: Deps, session_id: str, wake: Wake) -> str:
    """Re-arm the session as its wake says. No lost wakeup: a signal that lands after the
    harness's final check has already queued its own wake (arm before signal)."""
    if wake.active:
        deps.queue.wake(session_id, "still-active")
        return "requeued"
    if wake.at is not None:
        deps.alarms.arm(session_id, wake.at)
        return "armed"
    deps.alarms.disarm(session_id)
    return "disarmed"
