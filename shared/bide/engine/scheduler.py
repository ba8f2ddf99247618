"""The scheduler: reserve every eligible task in one commit, run each reserved task's
phases (or abort handler) as an invocation, and end or release what an invocation held.

These functions are the harness's internals, kept apart from its public commands; they read
and write the harness's adopted view and commit only through its ``_apply``, seeing the
harness as a :class:`~bide.engine.kernel.Kernel` (so this module does not import it back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from .errors import InvocationEnded
from .kernel import IN_INVOCATION, Draft, Kernel
from .records import SignalSlot, TaskRecord
from .rules import (
    abandoned,
    bump,
    cascade_pending,
    live_children,
    ready_to_settle,
    runnable_for_abort,
    wakeup,
)
from .runtime import Runtime
from .slots import MOVE_BUDGET, doc_key, split_final, to_body
from .state import (
    Aborted,
    Completing,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    Sleeping,
    Terminal,
    Waiting,
)
from .store.base import MAX_COMMIT_ITEMS
from .tasks import TaskDefinition, TaskView

_RESERVE_BUDGET = MAX_COMMIT_ITEMS - 9  # leave room; marks and reservations share a commit
MARK_BUDGET = 60  # descendants marked in the commit that ends or aborts their owner


def lease_until(h: Kernel, now: float) -> float | None:
    """When a lease taken (or renewed) now expires; None when the harness takes no leases."""
    return None if h.lease_seconds is None else now + h.lease_seconds


def recovery_cost(record: TaskRecord, live: dict[str, TaskRecord]) -> int:
    """At most how many records recovering ``record`` writes: itself, and when the restart
    limit ends it, the abort marks of its direct children."""
    return 1 + min(MARK_BUDGET, len(live_children(record.id, live)))


def recover(h: Kernel, d: Draft, record: TaskRecord) -> None:
    """A running task nobody holds any more (its worker died, or its lease expired) goes back
    to ``pending`` with its wake, counting a restart; past the restart limit it is faulted."""
    state = record.state
    assert isinstance(state, Running)
    restarts = record.restarts + 1
    if restarts > h.restart_limit:
        h._finish(d, record, Faulted(error="restart limit reached"))
    else:
        pending = Pending(checkpoint=state.checkpoint, wake=state.wake)
        d.put(bump(record, state=pending, restarts=restarts))


def recover_abandoned(h: Kernel, d: Draft, *, at_open: bool) -> bool:
    """Recover every abandoned running task (see :func:`~bide.engine.rules.abandoned`) that
    fits this commit; True when some were left for another commit. Each commit is complete
    in itself, so a crash between two leaves the rest for the next run to recover."""
    now = h.clock.now()
    live = d.loaded()
    for record in live.values():
        if record.id in h._inflight or record.id in d.writes:
            continue
        if not abandoned(record, now, h._mine, at_open=at_open):
            continue
        if len(d.writes) + recovery_cost(record, live) > MAX_COMMIT_ITEMS:
            return True
        recover(h, d, record)
    return False


def recover_mine(h: Kernel, d: Draft) -> bool:
    """Recover the running tasks this (dead) harness held, as many as fit one commit, as the
    next run would once their leases expired; True when some were left for another commit."""
    live = d.loaded()
    for record in live.values():
        state = record.state
        if isinstance(state, Running) and state.invocation in h._mine:
            if len(d.writes) + recovery_cost(record, live) > MAX_COMMIT_ITEMS:
                return True
            recover(h, d, record)
    return False


def release_mine(h: Kernel, d: Draft) -> bool:
    """Put running tasks this harness holds back to ``pending`` (no restart counted: a clean
    stop), as many as fit one commit; True when some were left for another commit."""
    for record in d.loaded().values():
        state = record.state
        if isinstance(state, Running) and state.invocation in h._mine:
            if len(d.writes) >= MAX_COMMIT_ITEMS:
                return True
            d.put(bump(record, state=Pending(checkpoint=state.checkpoint, wake=state.wake)))
    return False


# --- scheduling --------------------------------------------------------------------------


def reserve(h: Kernel, d: Draft) -> list[tuple[str, str]]:
    """One commit that settles finished owners and reserves every eligible task."""
    now = h.clock.now()
    live = d.loaded()
    started: list[tuple[str, str]] = []
    propagate_aborts(h, d, live)
    lease = lease_until(h, now)
    for record in live.values():
        if len(d.writes) + len(d.docs) >= _RESERVE_BUDGET:
            # A store writes at most MAX_COMMIT_ITEMS items at once; the rest are
            # reserved by the next pass of the run loop.
            h._truncated = True
            break
        if record.id in h._inflight or record.id in d.writes:
            continue
        state = record.state
        if abandoned(record, now, h._mine, at_open=False):
            # Its lease expired while this harness was open: its holder is presumed dead.
            if len(d.writes) + recovery_cost(record, live) <= MAX_COMMIT_ITEMS:
                recover(h, d, record)
            h._truncated = True  # reserved (or recovered) by the next pass
            continue
        if ready_to_settle(record, live):
            assert isinstance(state, Completing)
            d.put(
                bump(
                    record,
                    state=Terminal(outcome=state.outcome),
                    memos={},
                    memo_pages=0,
                    signals={},
                )
            )
            # A task waiting on this one can only be woken by the next pass.
            h._truncated = True
            continue
        if cascade_pending(record, live):
            # Its owner is aborting but the mark has not reached it yet (a cascade larger
            # than one commit): start nothing before it arrives, as one big commit would.
            h._truncated = True
            continue
        running = start(h, d, record, now, lease, live)
        if running is not None and running.invocation is not None:
            started.append((record.id, running.invocation))
    return started


def start(
    h: Kernel,
    d: Draft,
    record: TaskRecord,
    now: float,
    lease: float | None,
    live: Mapping[str, TaskRecord],
    invocation: str | None = None,
) -> Running | None:
    """Stage ``record`` running when it may start now (its abort handler once its owned work
    in ``live`` ended; a pending task; a parked one woken or asking to rerun), with the final
    slots its wake leaves moved off (:func:`move_final`), under ``invocation`` (a new one when
    None). The running state staged, or None (nothing staged) when it may not start."""
    state = record.state
    if record.abort_marked:
        if not runnable_for_abort(record, live):
            return None
        checkpoint = state.checkpoint  # type: ignore[union-attr]
        wake = state.wake if isinstance(state, Pending) else None
        signals = record.signals
    elif isinstance(state, Pending):
        checkpoint, wake, signals = state.checkpoint, state.wake, record.signals
    elif isinstance(state, Sleeping | Waiting):
        found = wakeup(record, now, h.outcome)
        if found is not None:
            checkpoint, wake = state.checkpoint, found.wake
            signals = move_final(h, d, record.id, found.signals)
        elif h._reruns(record):
            checkpoint, wake, signals = state.checkpoint, None, record.signals
        else:
            return None
    else:
        return None
    invocation = invocation or h.ids.new_id("i-")
    running = Running(checkpoint=checkpoint, wake=wake, invocation=invocation, lease_until=lease)
    d.put(bump(record, state=running, signals=signals))
    return running


def move_final(
    h: Kernel, d: Draft, task_id: str, signals: Mapping[str, SignalSlot]
) -> dict[str, SignalSlot]:
    """Stage the documents of the final (consumed, expired) slots a wake leaves, as many as
    the commit has room for, and return the slots that stay on the record. In the commit that
    consumes them: a crash keeps both or neither (see :mod:`bide.engine.slots`)."""
    room = min(MOVE_BUDGET, _RESERVE_BUDGET - len(d.writes) - len(d.docs) - 1)
    kept, moved = split_final(signals, max(0, room))
    for name, slot in moved.items():
        d.put_doc(doc_key(task_id, name), to_body(name, slot))
    return kept


def propagate_aborts(h: Kernel, d: Draft, live: dict[str, TaskRecord]) -> None:
    """Finish cascades that did not fit one commit: work owned by an abort-marked task,
    or (unless in the background) by a task that ended, gets its abort mark."""
    for record in live.values():
        if len(d.writes) >= _RESERVE_BUDGET // 2:
            h._truncated = True
            return
        if cascade_pending(record, live):
            owner = live[record.owner]  # type: ignore[index]
            reason = owner.abort_reason if owner.abort_marked else "owner ended"
            d.put(bump(record, abort_marked=True, abort_reason=reason))
            # Marked in this commit, so not reserved by it: its abort (or the next level
            # of the cascade) needs another pass before the session is parked.
            h._truncated = True


def spawn(h: Kernel, task_id: str, invocation: str) -> None:
    h._mine.add(invocation)
    h._inflight[task_id] = asyncio.ensure_future(invoke(h, task_id, invocation))


def held(h: Kernel, task_id: str, invocation: str) -> TaskRecord | None:
    record = h._live.get(task_id)
    state = record.state if record is not None else None
    if isinstance(state, Running) and state.invocation == invocation:
        return record
    return None


async def invoke(h: Kernel, task_id: str, invocation: str) -> None:
    # This asyncio task's own context: store errors from here on stop the run like a crash.
    IN_INVOCATION.set(True)
    try:
        while (record := held(h, task_id, invocation)) is not None:
            definition = h._defs.get((record.kind, record.version))
            if definition is None:
                why = f"no definition of task kind {record.kind!r} v{record.version}"
                end_held(h, task_id, invocation, Orphaned(reason=why))
            elif record.abort_marked and live_children(task_id, h._live):
                release_held(h, task_id, invocation)  # its abort waits for owned work
            elif record.abort_marked:
                await run_abort(h, definition, record, invocation)
            else:
                await run_phase(h, definition, record, invocation)
    finally:
        h._inflight.pop(task_id, None)
        h._changed.set()


async def run_phase(
    h: Kernel, definition: TaskDefinition, record: TaskRecord, invocation: str
) -> None:
    state = record.state
    assert isinstance(state, Running)
    name = state.checkpoint["phase"]
    phase = definition.phases.get(name)
    if phase is None:
        end_held(h, record.id, invocation, Faulted(error=f"no phase named {name!r}"))
        return
    runtime = Runtime(h, record, invocation, aborting=False)
    try:
        await phase(_view(record), runtime)
    except InvocationEnded:
        return
    except Exception as exc:
        if not record.abort_marked and not aborted(h, record.id):
            error = f"phase {name!r} raised {type(exc).__name__}: {exc}"
            end_held(h, record.id, invocation, Faulted(error=error))
        return
    still_held = held(h, record.id, invocation) is not None
    if still_held and not aborted(h, record.id) and not runtime.progressed:
        error = f"phase {name!r} returned without durable progress"
        end_held(h, record.id, invocation, Faulted(error=error))


async def run_abort(
    h: Kernel, definition: TaskDefinition, record: TaskRecord, invocation: str
) -> None:
    if definition.abort is None:
        end_held(h, record.id, invocation, Aborted(reason=record.abort_reason))
        return
    runtime = Runtime(h, record, invocation, aborting=True)
    try:
        await definition.abort(_view(record), runtime)
    except InvocationEnded:
        return
    except Exception as exc:
        error = f"abort handler raised {type(exc).__name__}: {exc}"
        end_held(h, record.id, invocation, Faulted(error=error))
        return
    if held(h, record.id, invocation) is not None:
        error = "abort handler returned without committing a terminal state"
        end_held(h, record.id, invocation, Faulted(error=error))


def aborted(h: Kernel, task_id: str) -> bool:
    record = h._live.get(task_id)
    return record is not None and record.abort_marked


def release_held(h: Kernel, task_id: str, invocation: str) -> None:
    def release(d: Draft) -> None:
        record = d.get(task_id)
        state = record.state if record is not None else None
        if isinstance(state, Running) and state.invocation == invocation:
            assert record is not None
            d.put(bump(record, state=Pending(checkpoint=state.checkpoint, wake=state.wake)))

    h._apply(release)


def end_held(h: Kernel, task_id: str, invocation: str, outcome: Outcome) -> None:
    def end(d: Draft) -> None:
        record = d.get(task_id)
        state = record.state if record is not None else None
        if isinstance(state, Running) and state.invocation == invocation:
            assert record is not None
            h._finish(d, record, outcome)

    h._apply(end)


def _view(record: TaskRecord) -> TaskView:
    state = record.state
    assert isinstance(state, Running)
    return TaskView(
        id=record.id,
        session_id=record.session_id,
        kind=record.kind,
        input=record.input,
        checkpoint=state.checkpoint,
        wake=state.wake,
        owner=record.owner,
        abort_reason=record.abort_reason,
        created_at=record.created_at,
    )
