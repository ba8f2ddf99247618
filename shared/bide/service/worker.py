"""The worker: load a session, run it until every task is parked, act on ``wake()``, exit.

How the wake path meets AWS (see docs/architecture.md, "Wake path on AWS"):

* a deadline closer than the Scheduler's 60 second precision
  (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html) that fits in
  the invocation's remaining time is waited for in-process (``deps.sleep``), then the session
  runs again: no alarm could wake it on time;
* at ``stop_at`` (the invocation's deadline less the safety margin) running work is stopped
  cleanly (the harness puts running tasks back to pending) and the session is re-queued, so a
  long model call never runs into the function's timeout.

A signal's wake names its task (:func:`~bide.aws.sqs.wake_focus`). Every other due thing in
the session has a wake of its own coming (an armed alarm for the earliest deadline, or the
queued wake of whoever wrote), so that run is owed to the task alone: a *targeted pass*
reads the head, the task and its owner in one read and runs the task on that partial view
(:mod:`bide.engine.partial`; anything that needs more loads the whole session and the pass
goes on as a full one). A pass still partial at its end leaves the alarm alone, which belongs
to the other tasks, when the task had no deadline as loaded and has none now (nor is it still
active); otherwise a full pass follows at once and arms as ever. A spare alarm fire is
harmless; a lost one is not.
"""

from __future__ import annotations

import asyncio

from ..constants import SCHEDULER_PRECISION_SECONDS, STOP_AT_SERVICE
from ..engine.harness import Harness
from ..engine.partial import Focus
from ..engine.rules import Wake
from ..engine.state import Sleeping
from ..engine.values import FrozenValue, value_class
from . import whole_runs
from .deps import Deps
from .retention import finish_end

# While waiting in-process for a near deadline, look at the session this often: a signal that
# lands meanwhile runs at once rather than at the deadline (its own wake waits in the queue
# behind this invocation, in the same message group).
POLL_SECONDS = 5.0


@value_class
class WorkerRun(FrozenValue):
    """What one worker run did: the session's wake and what was armed."""

    __slots__ = ("action", "session_id", "wake")
    session_id: str
    wake: Wake
    # "requeued" | "armed" | "disarmed" | "idle" (no alarm existed, none needed) | "kept" (a
    # targeted pass: the alarm, if any, belongs to other tasks and was left as it was)
    action: str

    def __init__(self, session_id: str, wake: Wake, action: str) -> None:
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "wake", wake)
        object.__setattr__(self, "action", action)


@value_class
class _Pass(FrozenValue):
    __slots__ = ("loaded_at", "may_have_alarm", "partial", "seq", "stopped", "wake")
    wake: Wake
    seq: int
    may_have_alarm: bool
    loaded_at: float | None  # the earliest sleep deadline as loaded (what was last armed)
    stopped: bool  # cut off at stop_at: running work was put back
    partial: bool  # a targeted pass that never needed the whole session: its wake is the task's

    @property
    def keeps_alarm(self) -> bool:
        """A partial pass that cannot have changed what the alarm is for: the task had no
        deadline as loaded, has none now (nor a lease held elsewhere) and is not active."""
        return (
            self.partial and not (self.may_have_alarm or self.wake.active) and self.wake.at is None
        )

    def __init__(
        self,
        wake: Wake,
        seq: int,
        may_have_alarm: bool,
        loaded_at: float | None,
        stopped: bool,
        partial: bool,
    ) -> None:
        for name, value in (
            ("wake", wake),
            ("seq", seq),
            ("may_have_alarm", may_have_alarm),
            ("loaded_at", loaded_at),
            ("stopped", stopped),
            ("partial", partial),
        ):
            object.__setattr__(self, name, value)


async def run_session(
    deps: Deps,
    session_id: str,
    *,
    stop_at: float | None = None,
    fired_for: float | None = None,
    focus: Focus | None = None,
    hold_reservation: bool = False,
) -> WorkerRun:
    """Run ``session_id`` until parked (or until ``stop_at``), then make sure it runs again
    exactly when it must: at once when still active (or cut off at ``stop_at``), after an
    in-process wait for a deadline the Scheduler cannot meet, at ``wake().at``, or never
    (parked on signals only: no alarm at all).

    ``fired_for``: this run answers the fire of the alarm armed for that deadline (the
    ``at`` of its wake message, on its first delivery and attempt). When the session, as
    loaded, still waits for exactly that deadline, its schedule is the one that fired, and
    Scheduler deletes a one-time schedule itself once it fired (``ActionAfterCompletion``
    ``DELETE``): a run that ends with no deadline has nothing to delete. (Were that schedule
    not the session's latest after all, the one left fires once, finds nothing to do and
    deletes itself: a spare wake, never a lost one.)

    ``focus``: ``(task, owner or None)`` of a signal's wake (and the task's sealed pages'
    :data:`~bide.engine.partial.PageHint`, when the wake has one): the first pass is a targeted
    one (see the module), unless this process has not yet run the session whole
    (:mod:`bide.service.whole_runs`: its first run of a session reruns every parked gate).
    ``hold_reservation``: the first pass, when it starts one task alone, holds its
    reservation until the task's first commit (:mod:`bide.engine.deferred`): only on a
    wake's first delivery and attempt, so a run after a failed one reserves first and its
    crashes count as restarts."""
    hold = hold_reservation
    if focus is not None and not whole_runs.ran_whole(deps.store, session_id):
        focus = None  # this process's first run of the session: whole (gates rerun)
    may_have_alarm = False
    first = True
    while True:
        done = await _run_pass(deps, session_id, stop_at, focus, hold)
        hold = False
        if focus is None and not done.stopped:
            whole_runs.mark_whole(deps.store, session_id)
        focus = None  # any pass after the first is a full one
        fired = first and fired_for is not None and done.loaded_at == fired_for
        may_have_alarm = may_have_alarm or (done.may_have_alarm and not fired)
        first = False
        if done.stopped:
            deps.queue.wake(session_id, "still-active")
            return WorkerRun(session_id, done.wake, "requeued")
        if done.keeps_alarm:
            finish_end(deps, session_id)
            return WorkerRun(session_id, done.wake, "kept")
        if done.partial:
            continue  # its wake speaks for one task: a full pass decides the alarm
        if not await _waited_for_deadline(deps, session_id, done, stop_at):
            break
    # A session ended since (or an end whose stamping a crash cut short): finish it here, so
    # a failure retries with the wake. Free for every other session.
    finish_end(deps, session_id)
    action, undoes = _act(deps, session_id, done.wake, may_have_alarm)
    # Only replacing or deleting an alarm can undo another run's newer one: check then that
    # the session did not move on after this run's final commit (another worker may have run
    # it and armed for the newer state before this older call landed); if it did, run again
    # so the newest state decides the alarm. A schedule created where none existed undoes
    # nothing: if it is stale, it fires once, finds the session as it is, and deletes itself.
    if undoes and deps.store.head(session_id) != done.seq:
        deps.queue.wake(session_id, "rearm")
        action = "requeued"
    return WorkerRun(session_id, done.wake, action)


async def _run_pass(
    deps: Deps,
    session_id: str,
    stop_at: float | None,
    focus: Focus | None,
    hold: bool = False,
) -> _Pass:
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        # A model request started now learns how long it may take (bide.agent.generation).
        services={
            **deps.harness_services(),
            **({} if stop_at is None else {STOP_AT_SERVICE: stop_at}),
        },
        lease_seconds=deps.lease_seconds,
        # Every writer queues a wake after its write lands (signals, the sessions API,
        # alarms), and the queue runs this session again after this run: no need to read
        # the head once more before parking.
        woken_after_writes=True,
        focus=focus,
        hold_reservation=hold,
    )
    await harness.open()
    run = asyncio.ensure_future(harness.run_until_parked(stop_at=stop_at))
    timer = None
    if stop_at is not None:
        timer = asyncio.ensure_future(deps.sleep(max(0.0, stop_at - deps.clock.now())))
    try:
        await asyncio.wait({run, timer} if timer else {run}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if not run.done():
        # The invocation's deadline (less the margin) came first: stop running work now so
        # the function returns before its timeout. close() cancels the running phases and
        # puts their tasks back to pending (no restart counted); the session is re-queued.
        await harness.close()
        await asyncio.gather(run, return_exceptions=True)
        return _finished(harness, Wake(active=True, at=None), stopped=True)
    try:
        wake = run.result()
    finally:
        await harness.close()
    return _finished(harness, wake, stopped=False)


def _finished(harness: Harness, wake: Wake, *, stopped: bool) -> _Pass:
    # Each run leaves the schedule matching its final wake, so an alarm can exist now only if
    # some sleep had a deadline when we loaded. (A run that died before disarming leaves a
    # one-time schedule that fires once, finds nothing, and deletes itself.) A targeted pass
    # that loaded the whole session on its way counts every task as that load found it.
    deadlines = [
        r.state.deadline  # until, or a heartbeat's beat_by when earlier
        for r in harness.loaded_tasks.values()
        if isinstance(r.state, Sleeping) and r.state.deadline is not None
    ]
    return _Pass(
        wake, harness.seq, bool(deadlines), min(deadlines, default=None), stopped, harness.partial
    )


async def _waited_for_deadline(
    deps: Deps, session_id: str, done: _Pass, stop_at: float | None
) -> bool:
    """Wait in-process for a deadline under the Scheduler's precision that fits before
    ``stop_at``; True when the session should run again now. False: arm as usual."""
    at = done.wake.at
    if done.wake.active or at is None or stop_at is None:
        return False
    now = deps.clock.now()
    if at - now >= SCHEDULER_PRECISION_SECONDS or at > stop_at:
        return False
    while (now := deps.clock.now()) < at:
        await deps.sleep(min(POLL_SECONDS, at - now))
        if deps.clock.now() <= now:
            # The clock did not move while we slept: sleep and clock are not one time
            # source (e.g. a test's manual clock). Waiting could never end; arm instead.
            return False
        if deps.store.head(session_id) != done.seq:
            break  # a signal or command landed: run now
    return True


def act_on_wake(deps: Deps, session_id: str, wake: Wake, *, may_have_alarm: bool = True) -> str:
    """Re-arm the session as its wake says. No lost wakeup: a signal that lands after the
    harness's final check queues its own wake after its value is stored."""
    return _act(deps, session_id, wake, may_have_alarm)[0]


def _act(deps: Deps, session_id: str, wake: Wake, may_have_alarm: bool) -> tuple[str, bool]:
    """:func:`act_on_wake`, and whether the call may have undone another run's alarm (it
    replaced or deleted one)."""
    if wake.active:
        deps.queue.wake(session_id, "still-active")
        return "requeued", False
    if wake.at is not None:
        return "armed", deps.alarms.arm(session_id, wake.at) is not False
    if may_have_alarm:
        deps.alarms.disarm(session_id)
        return "disarmed", True
    return "idle", False
