"""Failures on a wait (issue 13): a SignalFailure takes a key exactly like a value.

The same check order as the signal table (not_found, closed, invalid naming the field,
duplicate, closed by a deadline, delivered), first wins between values and failures, a sleep
wakes with WakeSignal, and read_signal says SignalFailed, also once the consumed slot moved
to its document. On the SQLite store, through the harness, deliver_signal and tx.signal.
"""

from __future__ import annotations

import pytest
from kit import ANSWER, HOUR, SLEEPER, Kit, run

from bide import (
    Completed,
    FailureReceived,
    SignalFailed,
    SignalFailure,
    SignalResult,
    SignalValue,
    Sleeping,
    Terminal,
    define_task,
    deliver_signal,
)
from bide.engine.limits import MAX_JSON_DEPTH, ValueRefused
from bide.engine.slots import from_body, task_prefix, task_slots, to_body

D, DUP, INV, CLOSED, NF = (
    SignalResult.DELIVERED,
    SignalResult.DUPLICATE,
    SignalResult.INVALID,
    SignalResult.CLOSED,
    SignalResult.NOT_FOUND,
)
BROKEN = SignalFailure("BuildFailed", "3 tests failed", {"failed": ["a", "b", "c"]})


async def _sleep(task, rt):
    until = task.input.get("for")
    await rt.commit(
        Sleeping(
            checkpoint="woke",
            signals=(ANSWER.key("a"),),
            until=None if until is None else rt.now() + until,
        )
    )


async def _woke(task, rt):
    state = await rt.read_signal(ANSWER, "a")
    if isinstance(state, SignalFailed):
        seen = {"failed": [state.type, state.message, state.data]}
    else:
        seen = {"value": state.value.text if isinstance(state, SignalValue) else str(state)}
    wake = task.wake.to_dict() if task.wake else None
    await rt.commit(Terminal(outcome=Completed(result={"wake": wake, **seen})))


READER = define_task("test.failure_reader", 1, lambda _: "sleep", {"sleep": _sleep, "woke": _woke})


async def _parked(**input) -> tuple[Kit, str]:
    k = Kit(READER, SLEEPER)
    await k.h.open()
    t = await k.h.create_task(READER, input)
    await k.h.run_until_parked()
    return k, t


def test_a_failure_wakes_the_sleep_and_reads_back_as_failed_after_the_slot_moved():
    async def go():
        k, t = await _parked()
        assert await k.h.signal(t, ANSWER, "a", BROKEN) == D
        await k.h.run_until_parked()
        result = k.h.outcome(t).result
        assert result["wake"] == {"reason": "signal", "signal": "test.answer", "key": "a"}
        assert result["failed"] == ["BuildFailed", "3 tests failed", {"failed": ["a", "b", "c"]}]
        # Consumed: the slot left the record for its document and still holds the failure.
        held = task_slots(k.h.task(t), k.h.list_docs(task_prefix(t)))
        assert held["test.answer/a"].failure == BROKEN.to_json()
        assert held["test.answer/a"].consumed

    run(go())


@pytest.mark.parametrize("first", ["value", "failure"])
def test_first_wins_between_values_and_failures(first: str):
    async def go():
        k, t = await _parked()
        value, failure = {"text": "ok"}, SignalFailure("Oops", "no")
        one, two = (value, failure) if first == "value" else (failure, value)
        assert await k.h.signal(t, ANSWER, "a", one) == D
        assert await k.h.signal(t, ANSWER, "a", two) == DUP
        assert await k.h.signal(t, ANSWER, "a", SignalFailure("Other", "later")) == DUP
        await k.h.run_until_parked()
        result = k.h.outcome(t).result
        if first == "value":
            assert result["value"] == "ok"
        else:
            assert result["failed"] == ["Oops", "no", None]
        # The task ended with what woke it: any later delivery is closed.
        assert await k.h.signal(t, ANSWER, "a", failure) == CLOSED  # the task ended

    run(go())


@pytest.mark.parametrize(
    ("failure", "field"),
    [
        (SignalFailure("", "m"), "type"),
        (SignalFailure("   ", "m"), "type"),
        (SignalFailure("x" * 129, "m"), "type"),
        (SignalFailure(7, "m"), "type"),  # type: ignore[arg-type]
        (SignalFailure("T", None), "message"),  # type: ignore[arg-type]
        (SignalFailure("T", "m" * (16 * 1024 + 1)), "message"),
    ],
)
def test_a_malformed_failure_is_invalid_names_the_field_and_is_not_stored(failure, field):
    async def go():
        k, t = await _parked()
        decision = await k.h.deliver(t, ANSWER, "a", failure)
        assert decision.result == INV
        assert decision.errors[0]["field"] == field
        assert "test.answer/a" not in k.h.task(t).signals
        assert await k.h.signal(t, ANSWER, "a", {"text": "then a value"}) == D

    run(go())


def test_the_check_order_holds_for_failures():
    async def go():
        k, t = await _parked(**{"for": HOUR})
        bad = SignalFailure("", "m")
        assert await k.h.signal("t-none", ANSWER, "a", bad) == NF  # not_found before invalid
        assert await k.h.signal(t, ANSWER, "a", BROKEN) == D
        assert await k.h.signal(t, ANSWER, "a", bad) == INV  # invalid before duplicate
        await k.h.run_until_parked()
        assert await k.h.signal(t, ANSWER, "a", bad) == CLOSED  # closed before invalid
        # The deadline race: past the deadline, not yet woken -> closed, nothing stored.
        late, t2 = await _parked(**{"for": 1})
        late.clock.advance(1)
        assert await late.h.signal(t2, ANSWER, "a", BROKEN) == CLOSED
        await late.h.run_until_parked()
        assert late.h.outcome(t2).result["wake"]["reason"] == "expired"

    run(go())


def test_failure_data_has_the_value_limits():
    async def go():
        k, t = await _parked()
        deep: object = 1
        for _ in range(MAX_JSON_DEPTH + 1):
            deep = [deep]
        decision = await k.h.deliver(t, ANSWER, "a", SignalFailure("T", "m", deep))
        assert decision.result == INV and decision.errors[0]["field"] == "data"
        with pytest.raises(ValueRefused):
            await k.h.signal(t, ANSWER, "a", SignalFailure("T", "m", float("nan")))
        with pytest.raises(ValueRefused):
            await k.h.signal(t, ANSWER, "a", SignalFailure("T", "m", "x" * 300_000))
        assert "test.answer/a" not in k.h.task(t).signals

    run(go())


def test_deliver_signal_and_tx_signal_take_failures_too():
    async def go():
        k, t = await _parked()

        def send(value):
            return deliver_signal(k.store, "s1", t, ANSWER, "a", value, k.clock).result

        assert send(SignalFailure("", "m")) == INV
        assert send(BROKEN) == D
        assert send({"text": "late value"}) == DUP
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["failed"][0] == "BuildFailed"

        # A commit's tx.signal: another task sends the failure in its own commit.
        decisions: list[SignalResult] = []

        async def send_failure(task, rt):
            def build(tx):
                decisions.append(tx.signal(task.input["to"], ANSWER, "a", BROKEN))
                return Terminal(outcome=Completed())

            await rt.commit(build)

        sender = define_task("test.failure_sender", 1, lambda _: "send", {"send": send_failure})
        k2 = Kit(READER, sender)
        await k2.h.open()
        t2 = await k2.h.create_task(READER, {})
        await k2.h.run_until_parked()
        await k2.h.create_task(sender, {"to": t2})
        await k2.h.run_until_parked()
        assert decisions == [D]
        assert k2.h.outcome(t2).result["failed"][1] == "3 tests failed"

    run(go())


def test_slot_documents_keep_failures_and_old_bodies_read_as_before():
    from bide.engine.records import SignalSlot

    slot = SignalSlot(version=1, has_value=True, failure=BROKEN.to_json(), consumed=True)
    assert from_body(to_body("s/k", slot)) == slot
    plain = SignalSlot(version=1, value={"text": "v"}, has_value=True, consumed=True)
    assert "failure_json" not in to_body("s/k", plain)
    assert from_body(to_body("s/k", plain)) == plain


def test_the_failed_state_raises_a_received_failure():
    state = SignalFailed("T", "went wrong", {"n": 1})
    exc = state.error()
    assert isinstance(exc, FailureReceived)
    assert (exc.type, exc.message, exc.data) == ("T", "went wrong", {"n": 1})
    assert "T: went wrong" in str(exc)
