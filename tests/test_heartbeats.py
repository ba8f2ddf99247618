"""Heartbeats on the SQLite store: a sleep's ``heartbeat``, the beats that move its
``beat_by``, the missed beat that wakes it (``WakeHeartbeat``), and the deadline race for
``beat_by`` (issue 13; bide.engine.heartbeats)."""

from __future__ import annotations

import json

import pytest
from kit import ANSWER, Kit, run

from bide import (
    Completed,
    InvalidPark,
    SignalResult,
    SignalSlot,
    SignalValue,
    Sleeping,
    TaskRuntime,
    TaskView,
    Terminal,
    define_task,
    deliver_beat,
    deliver_signal,
)
from bide.engine.forms import FormError
from bide.engine.heartbeats import decide_beat
from bide.engine.slots import nothing_moved
from bide.engine.state_forms import state_from_dict

D, DUP, CLOSED, NF = (
    SignalResult.DELIVERED,
    SignalResult.DUPLICATE,
    SignalResult.CLOSED,
    SignalResult.NOT_FOUND,
)


async def _sleep(task: TaskView, rt: TaskRuntime) -> None:
    until = task.input.get("for")
    await rt.commit(
        Sleeping(
            checkpoint="woke",
            signals=tuple(ANSWER.key(k) for k in task.input.get("keys", ["a"])),
            until=None if until is None else rt.now() + until,
            heartbeat=task.input.get("heartbeat"),
            beat_by=task.input.get("beat_by"),  # a phase's own value must be ignored
        )
    )


async def _woke(task: TaskView, rt: TaskRuntime) -> None:
    state = await rt.read_signal(ANSWER, "a")
    value = state.value.text if isinstance(state, SignalValue) else (state and "expired")
    wake = task.wake.to_dict() if task.wake else None
    await rt.commit(Terminal(outcome=Completed(result={"wake": wake, "a": value})))


BEATER = define_task("test.beater", 1, lambda _: "sleep", {"sleep": _sleep, "woke": _woke})


async def parked(**input: object) -> tuple[Kit, str]:
    k = Kit(BEATER)
    await k.h.open()
    t = await k.h.create_task(BEATER, {"heartbeat": 30.0, **input})
    await k.h.run_until_parked()
    return k, t


def state_of(k: Kit, t: str) -> Sleeping:
    state = k.h.task(t).state
    assert isinstance(state, Sleeping)
    return state


def test_the_heartbeat_clock_starts_when_the_sleep_parks():
    async def go():
        k, t = await parked(**{"for": 3600.0, "beat_by": 99999.0})
        state = state_of(k, t)
        assert state.beat_by == k.clock.now() + 30.0  # not the phase's 99999
        assert state.deadline == state.beat_by
        assert k.h.wake().at == state.beat_by  # the alarm: min(until, beat_by)

    run(go())


def test_a_beat_moves_beat_by_and_the_alarm_and_is_stored():
    async def go():
        k, t = await parked(**{"for": 3600.0})
        k.clock.advance(20)
        assert await k.h.beat(t, ANSWER, "a") == D
        assert state_of(k, t).beat_by == k.clock.now() + 30.0
        assert k.h.wake().at == k.clock.now() + 30.0
        # Durable: a new harness on the same store sees the moved deadline.
        h = await k.reopen()
        assert h.task(t).state.beat_by == k.clock.now() + 30.0
        # Beating keeps the task asleep far past its first beat_by.
        for _ in range(10):
            k.clock.advance(25)
            assert await k.h.beat(t, ANSWER, "a") == D
            await k.h.run_until_parked()
            assert k.h.task(t).state.status == "sleeping"
        assert await k.h.signal(t, ANSWER, "a", {"text": "done"}) == D
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {
            "wake": {"reason": "signal", "signal": "test.answer", "key": "a"},
            "a": "done",
        }

    run(go())


def test_a_missed_beat_wakes_with_its_own_reason_and_expires_the_key():
    async def go():
        k, t = await parked(**{"for": 3600.0})
        missed = state_of(k, t).beat_by
        k.clock.advance(31)
        # The deadline race holds for beat_by as for until: a value now is refused.
        assert await k.h.signal(t, ANSWER, "a", {"text": "late"}) == CLOSED
        assert await k.h.beat(t, ANSWER, "a") == CLOSED
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {
            "wake": {"reason": "heartbeat", "missed_at": missed},
            "a": "expired",
        }

    run(go())


def test_a_value_after_a_missed_beat_is_closed_even_before_the_wake_runs():
    async def go():
        k, t = await parked()
        k.clock.advance(30)  # exactly at beat_by: passed
        decision = deliver_signal(k.store, "s1", t, ANSWER, "a", {"text": "late"}, k.clock)
        assert decision.result == CLOSED
        await k.reopen()
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["wake"]["reason"] == "heartbeat"

    run(go())


def test_a_delivery_after_the_deadline_marks_the_key_expired_in_the_store():
    # "closed" is an answer for good: the refusal writes the key's expiry before any wake
    # runs, so no later delivery (a value, a failure, a beat) can contradict it.
    for deliver in ("beat", "value"):

        async def go(deliver: str = deliver) -> None:
            k, t = await parked()
            k.clock.advance(31)  # past beat_by; the wake has not run
            seq = k.store.head("s1")
            if deliver == "beat":
                result = deliver_beat(k.store, "s1", t, ANSWER.name, "a", k.clock).result
            else:
                late = {"text": "late"}
                result = deliver_signal(k.store, "s1", t, ANSWER, "a", late, k.clock).result
            assert result == CLOSED
            assert k.store.head("s1") == seq + 1  # the expiry was written
            stored = k.store.get_task("s1", t)
            assert stored is not None
            assert stored.signals[ANSWER.key("a").slot].expired
            later = deliver_signal(k.store, "s1", t, ANSWER, "a", {"text": "x"}, k.clock)
            assert later.result == CLOSED
            assert k.store.head("s1") == seq + 1  # already expired: nothing more written

        run(go())


def test_until_stays_the_hard_deadline():
    async def go():
        k, t = await parked(**{"for": 50.0})
        for _ in range(3):  # beats push beat_by past until (at 15, 30, 45)
            k.clock.advance(15)
            assert await k.h.beat(t, ANSWER, "a") == D
        assert state_of(k, t).beat_by > state_of(k, t).until
        assert k.h.wake().at == state_of(k, t).until
        k.clock.advance(6)  # until (50) passed; beat_by (75) not
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {"wake": {"reason": "expired"}, "a": "expired"}

    run(go())


def test_a_beat_is_not_a_value_and_a_value_wins_over_a_missed_beat():
    async def go():
        k, t = await parked()
        assert await k.h.beat(t, ANSWER, "a") == D
        assert "test.answer/a" not in k.h.task(t).signals  # the key stays open
        assert await k.h.signal(t, ANSWER, "a", {"text": "v"}) == D
        assert await k.h.beat(t, ANSWER, "a") == DUP  # the wait is over
        k.clock.advance(100)  # the value is first: no heartbeat wake
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["wake"]["reason"] == "signal"
        assert k.h.outcome(t).result["a"] == "v"

    run(go())


def test_beat_results():
    async def go():
        k, t = await parked()
        assert await k.h.beat("t-missing", ANSWER, "a") == NF
        # A key the task does not sleep on: acknowledged, nothing written.
        rev = k.h.task(t).rev
        assert await k.h.beat(t, ANSWER, "other") == D
        assert k.h.task(t).rev == rev
        await k.h.abort(t, "stop")
        assert await k.h.beat(t, ANSWER, "a") == CLOSED
        await k.h.run_until_parked()
        assert await k.h.beat(t, ANSWER, "a") == CLOSED  # ended

    run(go())


def test_a_beat_before_the_sleep_parks_moves_nothing():
    async def go():
        k = Kit(BEATER)
        await k.h.open()
        t = await k.h.create_task(BEATER, {"heartbeat": 30.0})
        rev = k.h.task(t).rev
        assert await k.h.beat(t, ANSWER, "a") == D  # pending: nothing to move
        assert k.h.task(t).rev == rev
        await k.h.run_until_parked()
        assert state_of(k, t).beat_by == k.clock.now() + 30.0

    run(go())


def test_a_wait_without_heartbeat_is_not_moved_by_a_beat():
    async def go():
        k, t = await parked(heartbeat=None, **{"for": 60.0})
        rev = k.h.task(t).rev
        assert await k.h.beat(t, ANSWER, "a") == D
        assert k.h.task(t).rev == rev and state_of(k, t).beat_by is None

    run(go())


def test_an_expired_key_is_closed_to_beats():
    async def go():
        k, t = await parked()
        record = k.h.task(t)
        # The key expired at an earlier deadline (a lost race, an earlier wait on it).
        expired = record.replace(signals={ANSWER.key("a").slot: SignalSlot(expired=True)})
        now = k.clock.now()
        assert decide_beat(expired, ANSWER.name, "a", now, moved=nothing_moved).result == CLOSED
        assert decide_beat(record, ANSWER.name, "a", now, moved=nothing_moved).result == D

    run(go())


def test_deliver_beat_is_one_conditional_write_and_matches_the_harness():
    async def go():
        k, t = await parked()
        seq = k.store.head("s1")
        k.clock.advance(10)
        assert deliver_beat(k.store, "s1", t, ANSWER.name, "a", k.clock).result == D
        assert k.store.head("s1") == seq + 1
        assert deliver_beat(k.store, "s1", t, ANSWER.name, "zz", k.clock).result == D
        assert k.store.head("s1") == seq + 1  # nothing to move: nothing written
        h = await k.reopen()
        assert h.task(t).state.beat_by == k.clock.now() + 30.0

    run(go())


@pytest.mark.parametrize("heartbeat", [0, -1.0, float("inf"), float("nan")])
def test_a_heartbeat_must_be_positive_seconds(heartbeat):
    with pytest.raises(FormError, match="heartbeat"):
        Sleeping(checkpoint="x", signals=(ANSWER.key("a"),), heartbeat=heartbeat)


def test_a_heartbeat_needs_a_listed_key():
    async def go():
        k = Kit(BEATER)
        await k.h.open()
        t = await k.h.create_task(BEATER, {"heartbeat": 5.0, "keys": [], "for": 60.0})
        await k.h.run_until_parked()
        outcome = k.h.outcome(t)
        assert outcome.status == "faulted" and "heartbeat needs a listed key" in outcome.error

    run(go())


def test_check_sleep_refuses_a_heartbeat_without_keys():
    from bide.engine.rules import check_sleep

    async def go():
        k, t = await parked()
        sleep = Sleeping(checkpoint="x", until=10.0, heartbeat=5.0)
        with pytest.raises(InvalidPark, match="heartbeat needs a listed key"):
            check_sleep(k.h.task(t), sleep, moved=nothing_moved)

    run(go())


# --- a deadline that leaves the keys open (workflow races; issue 13 part 3) -----------------


async def _sleep_open(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(
        Sleeping(
            checkpoint="woke",
            signals=(ANSWER.key("a"),),
            until=rt.now() + 60,
            expire_on_deadline=task.input.get("expire", True),
        )
    )


OPEN = define_task("test.open", 1, lambda _: "sleep", {"sleep": _sleep_open, "woke": _woke})


def test_a_deadline_that_keeps_keys_open_wakes_with_time_and_takes_later_values():
    async def go():
        k = Kit(OPEN)
        await k.h.open()
        t = await k.h.create_task(OPEN, {"expire": False})
        await k.h.run_until_parked()
        assert k.h.wake().at == k.clock.now() + 60
        k.clock.advance(60)
        # The deadline passed, no worker ran: the key is open, so the value is delivered
        # (nothing will report it timed out) and the phase the deadline wakes reads it.
        assert await k.h.signal(t, ANSWER, "a", {"text": "after"}) == D
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["wake"]["reason"] == "signal"  # the value came first

        t2 = await k.h.create_task(OPEN, {"expire": False}, key="two")
        await k.h.run_until_parked()
        k.clock.advance(60)
        await k.h.run_until_parked()
        assert k.h.outcome(t2).result == {"wake": {"reason": "time"}, "a": None}

    run(go())


def test_a_heartbeat_sleep_must_expire_its_keys():
    from bide.engine.rules import check_sleep

    async def go():
        k, t = await parked()
        sleep = Sleeping(
            checkpoint="x", signals=(ANSWER.key("b"),), heartbeat=5.0, expire_on_deadline=False
        )
        with pytest.raises(InvalidPark, match="cannot set expire_on_deadline=False"):
            check_sleep(k.h.task(t), sleep, moved=nothing_moved)

    run(go())


def test_a_sleep_without_heartbeat_is_stored_as_before_and_fields_round_trip():
    plain = Sleeping(checkpoint="x", signals=(ANSWER.key("a"),), until=5.0)
    assert set(plain.to_dict()) == {"status", "checkpoint", "until", "signals"}
    beating = Sleeping(checkpoint="x", signals=(ANSWER.key("a"),), heartbeat=30.0, beat_by=40.0)
    assert state_from_dict(json.loads(json.dumps(beating.to_dict()))) == beating
    kept_open = Sleeping(checkpoint="x", until=5.0, expire_on_deadline=False)
    assert kept_open.to_dict()["expire_on_deadline"] is False
    assert state_from_dict(json.loads(json.dumps(kept_open.to_dict()))) == kept_open
