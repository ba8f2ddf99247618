"""The engine's decisions, as pure functions of task records and the time.

Nothing here reads a clock, a store or an id source: the harness passes ``now`` and the
records in, and writes what comes out. That keeps every rule testable in isolation and makes
the harness a thin loop around them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from .budgets import check_signal_budget
from .decisions import SignalDecision as SignalDecision  # decided here, defined there
from .decisions import Wake as Wake
from .decisions import Wakeup as Wakeup
from .errors import InvalidPark, InvalidWait
from .failures import SignalFailure, failure_errors
from .limits import check_signal_depth, check_signal_value
from .records import SignalSlot, TaskRecord
from .signals import InvalidSignalValue, SignalResult, SignalToken, slot_name
from .slots import SlotLookup, nothing_moved
from .state import (
    HOLDS_OUTCOME,
    Outcome,
    Pending,
    Running,
    Sleeping,
    Terminal,
    Waiting,
    WakeExpired,
    WakeHeartbeat,
    WakeSignal,
    WakeTasks,
    WakeTime,
)

OutcomeOf = Callable[[str], Outcome | None]
"""Looks up a task's outcome: None while the task is live (or completing)."""


def bump(record: TaskRecord, **changes: Any) -> TaskRecord:
    """A new revision of ``record`` with ``changes`` applied (records are never mutated)."""
    return record.replace(**{**changes, "rev": record.rev + 1})


# --- signals ---------------------------------------------------------------------------------


STREAM_SUFFIX = ".*"
"""A key ending in this names a stream of keys (see :func:`stream_key`)."""


def stream_key(
    record: TaskRecord | None, signal: str, key: str, now: float, moved: SlotLookup = nothing_moved
) -> str:
    """The key a value for ``key`` goes to: ``key`` itself, or for a stream (``<prefix>.*``)
    the first ``<prefix>.<n>`` of ``record`` still open for a value at ``now``: it holds no
    value, has not expired and no sleep on it has passed its deadline. One capability URL can
    so deliver many requests (a workflow webhook iterated with ``async for``) and none is
    answered ``duplicate``. The search starts at the record's mark for the stream (every member
    below it is taken for good); ``moved`` finds members whose slot left the record."""
    if not key.endswith(STREAM_SUFFIX) or record is None:
        return key
    prefix = key[: -len(STREAM_SUFFIX)]
    n = record.streams.get(slot_name(signal, prefix), 0)
    while True:
        candidate = f"{prefix}.{n}"
        name = slot_name(signal, candidate)
        slot = find_slot(record, name, moved)
        taken = slot is not None and (slot.has_value or slot.expired)
        # A slot whose wait just timed out is about to expire: a value there would be refused.
        if not taken and not deadline_passed_for(record, name, now):
            return candidate
        n += 1


def find_slot(record: TaskRecord, name: str, moved: SlotLookup) -> SignalSlot | None:
    """The slot ``name`` of ``record``: on the record, or moved to its document (read only
    when it may be there: a key the task sleeps on now cannot have moved, because the sleep
    was checked against the documents and only its own wake settles its keys)."""
    slot = record.signals.get(name)
    if slot is not None or sleeping_on(record, name):
        return slot
    return moved(name)


def sleeping_on(record: TaskRecord, name: str) -> bool:
    """True when the task sleeps now with ``name`` among its keys."""
    state = record.state
    return isinstance(state, Sleeping) and any(k.slot == name for k in state.signals)


def refuse_key(
    record: TaskRecord, name: str, now: float, *, moved: SlotLookup
) -> SignalDecision | None:
    """Design 001's checks of a delivery (a value, a failure, a beat) to the key stored as
    ``name``, in order, but for ``invalid`` (the caller checks its value after the task):
    ``closed`` (the task ended, is ending or is abort-marked), ``duplicate`` (the key holds a
    value), ``closed`` (it expired, or a sleep on it passed its deadline: then with the record
    marking it expired). None: the key is open; what the delivery does there is the caller's."""
    if record.state.status in HOLDS_OUTCOME or record.abort_marked:
        return SignalDecision(SignalResult.CLOSED)
    slot = find_slot(record, name, moved)
    if slot is not None and slot.has_value:
        return SignalDecision(SignalResult.DUPLICATE)
    if slot is not None and slot.expired:
        return SignalDecision(SignalResult.CLOSED)
    if deadline_passed_for(record, name, now):
        # The sender is told "closed": make it so for good, even if another listed key wakes
        # the task, so no later delivery to this key can contradict that answer.
        expired = (slot or SignalSlot()).replace(expired=True)
        return SignalDecision(
            SignalResult.CLOSED, bump(record, signals={**record.signals, name: expired})
        )
    return None


def decide_signal(
    record: TaskRecord | None,
    token: SignalToken[Any],
    key: str,
    value: Any,
    now: float,
    *,
    moved: SlotLookup,
) -> SignalDecision:
    """Apply design 001's delivery checks, in their order.

    Every delivery path decides here (``Harness.signal`` and ``deliver``, ``deliver_signal``,
    a commit's ``tx.signal``, webhooks), so a key means the same everywhere: a stream key
    (``<prefix>.*``) is resolved with :func:`stream_key` against the same record and time as
    the checks. A value over the limits of :mod:`bide.engine.limits` (too deep, too large, over
    the task's budget) raises :class:`~bide.engine.limits.ValueRefused` instead: no result
    of design 001 says "refused, try something else", so nothing is decided or stored.
    ``moved`` reads the task's slots that left its record (:mod:`bide.engine.slots`): a
    consumed key answers ``duplicate`` and an expired one ``closed`` wherever it is kept."""
    if record is None:
        return SignalDecision(SignalResult.NOT_FOUND)
    if record.state.status in HOLDS_OUTCOME or record.abort_marked:
        return SignalDecision(SignalResult.CLOSED)
    if isinstance(value, SignalFailure):  # a failure takes the key like a value (failures.py)
        check = check_failure(value, token, key)
        if isinstance(check, SignalDecision):
            return check
        dumped, size, failure = None, check[1], check[0]
    else:
        # Limits before the schema: a hostile value is refused, never stored (ValueRefused).
        check_signal_depth(value, token.name, key, token.envelope)
        try:
            validated = token.validate(value)
        except InvalidSignalValue as exc:
            return SignalDecision(SignalResult.INVALID, errors=tuple(exc.errors))
        dumped = token.dump(validated)
        size, failure = check_signal_value(dumped, token.name, key, token.envelope), None
    chosen = stream_key(record, token.name, key, now, moved)
    name = slot_name(token.name, chosen)
    refused = refuse_key(record, name, now, moved=moved)
    if refused is not None:
        return refused
    check_signal_budget(record, name, size)
    stored = SignalSlot(version=token.version, value=dumped, has_value=True, failure=failure)
    streams = record.streams
    if chosen != key:  # a stream member: the members up to this one are taken for good
        stream = slot_name(token.name, key[: -len(STREAM_SUFFIX)])
        streams = {**streams, stream: int(chosen.rsplit(".", 1)[1]) + 1}
    return SignalDecision(
        SignalResult.DELIVERED,
        bump(record, signals={**record.signals, name: stored}, streams=streams),
    )


def check_failure(
    failure: SignalFailure, token: SignalToken[Any], key: str
) -> SignalDecision | tuple[dict[str, Any], int]:
    """A failure's ``invalid`` decision (which field, why), or its stored form and size.
    Its ``data`` has a value's limits; ``type`` and ``message`` count as one envelope level
    around it. Raises :class:`~bide.engine.limits.ValueRefused` like a value over them."""
    errors = failure_errors(failure)
    if errors:
        return SignalDecision(SignalResult.INVALID, errors=tuple(errors))
    check_signal_depth(failure.data, token.name, key, token.envelope)
    check_signal_value(failure.data, token.name, key, token.envelope)  # a value's limits
    stored = failure.to_json()
    return stored, check_signal_value(stored, token.name, key, token.envelope + 1)


def deadline_passed_for(record: TaskRecord, slot: str, now: float) -> bool:
    """True when the task sleeps on ``slot`` and that sleep's deadline (``until``, or a
    missed heartbeat's ``beat_by``) has passed: a value arriving now would contradict the
    ``expired`` or ``heartbeat`` wake the task is about to get."""
    state = record.state
    if not isinstance(state, Sleeping) or not state.expire_on_deadline:
        return False  # the deadline leaves the keys open: nothing to contradict
    deadline = state.deadline
    return deadline is not None and deadline <= now and any(k.slot == slot for k in state.signals)


# --- parking ---------------------------------------------------------------------------------


def check_sleep(record: TaskRecord, sleep: Sleeping, *, moved: SlotLookup) -> None:
    """Refuse a sleep that could never be honoured. Raises :class:`InvalidPark`. A listed
    key that is not on the record is looked up with ``moved`` (the harness passes
    :meth:`~bide.engine.kernel.Draft.moved_unread`: a condition on the commit, not a read)."""
    if sleep.until is None and not sleep.signals:
        raise InvalidPark(f"task {record.id!r}: a sleep needs 'until', 'signals', or both")
    if sleep.heartbeat is not None and not sleep.signals:
        raise InvalidPark(
            f"task {record.id!r}: a sleep with a heartbeat needs a listed key to beat on "
            "(a beat names the key); list one, or sleep without 'heartbeat'"
        )
    if sleep.heartbeat is not None and not sleep.expire_on_deadline:
        raise InvalidPark(
            f"task {record.id!r}: a missed heartbeat expires the keys; a sleep with a "
            "heartbeat cannot set expire_on_deadline=False"
        )
    seen: set[str] = set()
    for key in sleep.signals:
        if key.slot in seen:
            raise InvalidPark(f"task {record.id!r}: key {key.slot!r} is listed twice")
        seen.add(key.slot)
        if key.key.endswith(STREAM_SUFFIX):
            # Deliveries to a stream key land on its members, never on the key itself.
            prefix = key.key[: -len(STREAM_SUFFIX)]
            raise InvalidPark(
                f"task {record.id!r}: key {key.key!r} names a stream (it ends in "
                f"{STREAM_SUFFIX!r}); its values go to {prefix + '.0'!r}, {prefix + '.1'!r}, "
                "...: sleep on those"
            )
        slot = record.signals.get(key.slot) or moved(key.slot)
        if slot is not None and slot.consumed:
            raise InvalidPark(
                f"task {record.id!r}: key {key.slot!r} already woke this task; "
                "one key serves one wait, use a new key"
            )
        if slot is not None and slot.expired:
            raise InvalidPark(
                f"task {record.id!r}: key {key.slot!r} expired at an earlier deadline; "
                "use a new key"
            )


def check_wait(
    record: TaskRecord,
    wait: Waiting,
    live: Mapping[str, TaskRecord],
    exists: Callable[[str], bool],
) -> None:
    """Refuse a wait on nothing, on itself, on a missing task, on its owner chain, or one that
    closes a cycle of waits. Raises :class:`InvalidWait`."""
    if not wait.on:
        raise InvalidWait(f"task {record.id!r}: a wait needs at least one task in 'on'")
    if len(set(wait.on)) != len(wait.on):
        raise InvalidWait(f"task {record.id!r}: a wait lists the same task twice")
    ancestors = set(owner_chain(record, live))
    for member in wait.on:
        if member == record.id:
            raise InvalidWait(f"task {record.id!r} cannot wait on itself")
        if member in ancestors:
            raise InvalidWait(
                f"task {record.id!r} cannot wait on {member!r}: it owns this task, "
                "so it cannot end first"
            )
        if member not in live and not exists(member):
            raise InvalidWait(f"task {record.id!r}: no task {member!r} in this session")
    # A cycle: some member (transitively) waits on this task.
    stack, seen = list(wait.on), set()
    while stack:
        current = stack.pop()
        if current == record.id:
            raise InvalidWait(f"task {record.id!r}: this wait would close a cycle of waits")
        if current in seen:
            continue
        seen.add(current)
        other = live.get(current)
        if other is not None and isinstance(other.state, Waiting):
            stack.extend(other.state.on)


def owner_chain(record: TaskRecord, live: Mapping[str, TaskRecord]) -> Iterable[str]:
    """The ids of the task's owner, its owner's owner, and so on."""
    seen: set[str] = set()
    owner = record.owner
    while owner is not None and owner not in seen:
        seen.add(owner)
        yield owner
        parent = live.get(owner)
        owner = parent.owner if parent is not None else None


# --- waking ----------------------------------------------------------------------------------


def sleep_wakeup(record: TaskRecord, now: float) -> Wakeup | None:
    """First listed key holding an unused value wins; otherwise the deadline, which expires
    every listed key with no value: ``until`` (:class:`WakeExpired`, also when a missed beat
    falls at the same time) or a missed heartbeat's ``beat_by`` (:class:`WakeHeartbeat`). A
    sleep with ``expire_on_deadline=False`` wakes at its deadline with :class:`WakeTime` and
    leaves its keys open."""
    state = record.state
    if not isinstance(state, Sleeping):
        return None
    for key in state.signals:
        slot = record.signals.get(key.slot)
        if slot is not None and slot.has_value and not slot.consumed:
            consumed = slot.replace(consumed=True)
            return Wakeup(
                WakeSignal(signal=key.signal, key=key.key), {**record.signals, key.slot: consumed}
            )
    deadline = state.deadline
    if deadline is None or deadline > now:
        return None
    if not state.signals or not state.expire_on_deadline:
        return Wakeup(WakeTime(), record.signals)
    signals = dict(record.signals)
    for key in state.signals:
        slot = signals.get(key.slot) or SignalSlot()
        if not slot.has_value:
            signals[key.slot] = slot.replace(expired=True)
    if state.until is not None and state.until <= now:
        return Wakeup(WakeExpired(), signals)
    assert state.beat_by is not None  # the deadline that passed, since until did not
    return Wakeup(WakeHeartbeat(missed_at=state.beat_by), signals)


def wait_wakeup(record: TaskRecord, outcome_of: OutcomeOf) -> Wakeup | None:
    """``any``: the first member that ended; ``all_settled``: all ended; ``fail_fast``: all
    ended or one ended other than completed. The wake lists every ended member."""
    state = record.state
    if not isinstance(state, Waiting):
        return None
    outcomes = {m: outcome_of(m) for m in state.on}
    ended = tuple(m for m in state.on if outcomes[m] is not None)
    ready = {
        "any": bool(ended),
        "all_settled": len(ended) == len(state.on),
        "fail_fast": len(ended) == len(state.on)
        or any(o is not None and o.status != "completed" for o in outcomes.values()),
    }[state.policy]
    return Wakeup(WakeTasks(ended=ended), record.signals) if ready else None


def wakeup(record: TaskRecord, now: float, outcome_of: OutcomeOf) -> Wakeup | None:
    """Why a parked task may run now, or None while it stays parked."""
    return sleep_wakeup(record, now) or wait_wakeup(record, outcome_of)


def live_children(task_id: str, live: Mapping[str, TaskRecord]) -> list[TaskRecord]:
    """Live tasks owned by ``task_id``."""
    return [r for r in live.values() if r.owner == task_id]


def descendants(task_id: str, live: Mapping[str, TaskRecord]) -> list[TaskRecord]:
    """Every live task owned, directly or not, by ``task_id``."""
    by_owner: dict[str, list[TaskRecord]] = {}
    for r in live.values():
        if r.owner is not None:
            by_owner.setdefault(r.owner, []).append(r)
    found, stack = [], [task_id]
    while stack:
        for child in by_owner.get(stack.pop(), []):
            found.append(child)
            stack.append(child.id)
    return found


def runnable_for_abort(record: TaskRecord, live: Mapping[str, TaskRecord]) -> bool:
    """An abort-marked task runs its abort handler once its owned work has ended."""
    return (
        record.abort_marked
        and record.state.status in ("pending", "waiting", "sleeping")
        and not live_children(record.id, live)
    )


def cascade_pending(record: TaskRecord, live: Mapping[str, TaskRecord]) -> bool:
    """An abort mark (or an owner's end) that has not reached this task yet: the scheduler
    still has to pass it on, so the session is not idle."""
    if record.abort_marked or record.owner is None:
        return False
    owner = live.get(record.owner)
    return owner is not None and (
        owner.abort_marked or (owner.status == "completing" and not record.background)
    )


def ready_to_settle(record: TaskRecord, live: Mapping[str, TaskRecord]) -> bool:
    """A completing task becomes terminal once its owned work has ended."""
    return record.state.status == "completing" and not live_children(record.id, live)


# --- leases ----------------------------------------------------------------------------------


def held_elsewhere(record: TaskRecord, now: float, mine: Collection[str]) -> bool:
    """A running task another harness holds under a lease that has not expired: it is
    presumed to be running there, so it is neither taken over nor run here."""
    state = record.state
    return (
        isinstance(state, Running)
        and state.invocation not in mine
        and state.lease_until is not None
        and state.lease_until > now
    )


def abandoned(record: TaskRecord, now: float, mine: Collection[str], *, at_open: bool) -> bool:
    """A running task no live invocation holds: its lease expired, or (``at_open``, the old
    rule for records without a lease) it carries none. It is recovered as after a crash."""
    state = record.state
    if not isinstance(state, Running) or state.invocation in mine:
        return False
    if state.lease_until is None:
        return at_open
    return state.lease_until <= now


# --- liveness --------------------------------------------------------------------------------


def compute_wake(
    live: Mapping[str, TaskRecord],
    now: float,
    outcome_of: OutcomeOf,
    reruns: Callable[[TaskRecord], bool] = lambda _: False,
    mine: Collection[str] = (),
) -> Wake:
    """Design 001 ch. IV "When parked work counts as active". ``reruns`` says whether a
    parked task's definition asks it to run again now (a tool registry change). A task
    another harness holds under a live lease (``mine``: this harness's invocations) is not
    active here, but its lease's expiry is an ``at``: if that holder died, the session must
    run then to take the task over."""
    active = False
    at: float | None = None
    for record in live.values():
        state = record.state
        elsewhere = held_elsewhere(record, now, mine)
        if elsewhere:
            assert isinstance(state, Running) and state.lease_until is not None
            until = state.lease_until
            at = until if at is None else min(at, until)
        if (
            (isinstance(state, Pending | Running) and not elsewhere)
            or cascade_pending(record, live)
            or runnable_for_abort(record, live)
            or ready_to_settle(record, live)
            or (
                isinstance(state, Sleeping | Waiting)
                and (wakeup(record, now, outcome_of) is not None or reruns(record))
            )
        ):
            active = True
        deadline = state.deadline if isinstance(state, Sleeping) else None
        if deadline is not None and not record.abort_marked:
            at = deadline if at is None else min(at, deadline)
    return Wake(active=active, at=at)


def ended_outcome(record: TaskRecord | None) -> Outcome | None:
    """A terminal task's outcome; None for a live (or completing) task."""
    if record is not None and isinstance(record.state, Terminal):
        return record.state.outcome
    return None
