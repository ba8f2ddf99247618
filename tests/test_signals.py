"""Design 001 ch. II-IV: the signal() check table, the deadline race, consumed keys."""

from __future__ import annotations

import pytest
from kit import ANSWER, HOUR, SLEEPER, Kit, run, sleeper

from bide import (
    Completed,
    DefinitionError,
    InvalidPark,
    SignalResult,
    Sleeping,
    Terminal,
    define_signal,
    define_task,
)
from bide.engine.slots import task_prefix, task_slots

D, DUP, INV, CLOSED, NF = (
    SignalResult.DELIVERED,
    SignalResult.DUPLICATE,
    SignalResult.INVALID,
    SignalResult.CLOSED,
    SignalResult.NOT_FOUND,
)


async def parked_sleeper() -> tuple[Kit, str]:
    """A session whose one task sleeps on the key ``a`` (no deadline)."""
    k = Kit(SLEEPER)
    await k.h.open()
    t = await k.h.create_task(SLEEPER, {"keys": ["a"]})
    await k.h.run_until_parked()
    return k, t


def test_no_such_task_is_not_found():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        assert await k.h.signal("t-missing", ANSWER, "a", {"text": "x"}) == NF

    run(go())


async def _complete(k: Kit, t: str) -> None:
    """The task ends: a value wakes it and it completes."""
    assert await k.h.signal(t, ANSWER, "a", {"text": "hi"}) == D
    await k.h.run_until_parked()
    assert k.h.outcome(t).status == "completed"


async def _mark_aborted(k: Kit, t: str) -> None:
    """The task is marked for abort; its abort handling has not run yet."""
    await k.h.abort(t, "stop")


@pytest.mark.parametrize(
    ("close", "status"),
    [(_complete, "completed"), (_mark_aborted, "aborted")],
    ids=["terminal", "abort-marked"],
)
def test_a_closed_task_is_closed_before_the_schema_check(close, status: str):
    async def go():
        k, t = await parked_sleeper()
        await close(k, t)
        assert await k.h.signal(t, ANSWER, "a", {"text": "hi"}) == CLOSED
        # closed comes before invalid in the check order
        assert await k.h.signal(t, ANSWER, "a", {"nope": 1}) == CLOSED
        assert await k.h.signal(t, ANSWER, "b", {"text": "x"}) == CLOSED
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == status

    run(go())


def test_invalid_value_is_not_stored_and_says_which_field():
    async def go():
        k, t = await parked_sleeper()
        seq = k.h.seq
        decision = await k.h.deliver(t, ANSWER, "a", {"text": 3})
        assert decision.result == INV
        assert decision.errors[0]["field"] == "text"
        assert k.h.seq == seq, "nothing is written for an invalid value"
        assert k.store.get_task("s1", t).signals == {}
        # invalid comes before duplicate: a valid value afterwards is still delivered
        assert await k.h.signal(t, ANSWER, "a", {"text": "ok"}) == D

    run(go())


def test_duplicate_keeps_the_first_value():
    async def go():
        k, t = await parked_sleeper()
        assert await k.h.signal(t, ANSWER, "a", {"text": "first"}) == D
        assert await k.h.signal(t, ANSWER, "a", {"text": "second"}) == DUP
        assert await k.h.signal(t, ANSWER, "a", {"bad": 1}) == INV  # invalid before duplicate
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["values"] == {"a": "first"}

    run(go())


@pytest.mark.parametrize("woken_first", [True, False])
def test_deadline_race(woken_first: bool):
    """before the deadline: delivered, wakes with signal; after: closed, wakes with expired."""

    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        on_time = await k.h.create_task(SLEEPER, {"keys": ["a"], "for": HOUR})
        late = await k.h.create_task(SLEEPER, {"keys": ["a"], "for": HOUR})
        await k.h.run_until_parked()
        k.clock.advance(HOUR - 1)
        assert await k.h.signal(on_time, ANSWER, "a", {"text": "in time"}) == D
        k.clock.advance(1)
        if woken_first:
            await k.h.run_until_parked()
        # the deadline passed: closed even if the scheduler has not woken the task yet
        assert await k.h.signal(late, ANSWER, "a", {"text": "too late"}) == CLOSED
        assert await k.h.signal(on_time, ANSWER, "a", {"text": "again"}) in (DUP, CLOSED)
        await k.h.run_until_parked()
        assert k.h.outcome(on_time).result == {
            "wake": {"reason": "signal", "signal": "test.answer", "key": "a"},
            "values": {"a": "in time"},
        }
        assert k.h.outcome(late).result == {
            "wake": {"reason": "expired"},
            "values": {"a": "expired"},
        }

    run(go())


def test_second_copy_after_wake_is_duplicate_and_value_unchanged():
    async def go():
        probe = define_task(
            "test.probe",
            1,
            lambda _: "sleep",
            {"sleep": _sleep_then("again"), "again": _sleep_on_new_key},
        )
        k = Kit(probe)
        await k.h.open()
        t = await k.h.create_task(probe)
        await k.h.run_until_parked()
        assert await k.h.signal(t, ANSWER, "a", {"text": "one"}) == D
        await k.h.run_until_parked()  # woke on a, consumed it, sleeps on b
        assert await k.h.signal(t, ANSWER, "a", {"text": "two"}) == DUP
        rec = k.h.task(t)
        held = task_slots(rec, k.h.list_docs(task_prefix(t)))
        assert held["test.answer/a"].consumed
        assert held["test.answer/a"].value == {"text": "one"}

    run(go())


async def _sleep_on_new_key(task, rt):
    await rt.commit(Sleeping(checkpoint="done", signals=(ANSWER.key("b"),)))


def _sleep_then(next_phase: str):
    async def sleep(task, rt):
        await rt.commit(Sleeping(checkpoint=next_phase, signals=(ANSWER.key("a"),)))

    return sleep


@pytest.mark.parametrize(
    ("caught", "status"), [(True, "completed"), (False, "faulted")], ids=["caught", "uncaught"]
)
def test_sleeping_again_on_a_consumed_key_is_rejected(caught: bool, status: str):
    """The phase may catch InvalidPark and go on; uncaught, it faults the task."""
    seen: list[str] = []

    async def again(task, rt):
        try:
            await rt.commit(Sleeping(checkpoint="again", signals=(ANSWER.key("a"),)))
        except InvalidPark as exc:
            if not caught:
                raise
            seen.append(str(exc))
            await rt.commit(Terminal(outcome=Completed(result="refused")))

    async def go():
        kind = define_task(
            "test.reuse", 1, lambda _: "sleep", {"sleep": _sleep_then("again"), "again": again}
        )
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        await k.h.signal(t, ANSWER, "a", {"text": "x"})
        await k.h.run_until_parked()
        outcome = k.h.outcome(t)
        assert outcome.status == status
        if caught:
            assert outcome.result == "refused"
            assert "one key serves one wait" in seen[0]
        else:
            assert "InvalidPark" in outcome.error

    run(go())


def test_sleeping_on_an_expired_key_is_rejected():
    seen: list[str] = []

    async def sleep(task, rt):
        await rt.commit(
            Sleeping(checkpoint="again", signals=(ANSWER.key("a"),), until=rt.now() + 10)
        )

    async def again(task, rt):
        assert task.wake.reason == "expired"
        try:
            await rt.commit(Sleeping(checkpoint="again", signals=(ANSWER.key("a"),)))
        except InvalidPark as exc:
            seen.append(str(exc))
        await rt.commit(Terminal(outcome=Completed()))

    async def go():
        kind = define_task("test.expired", 1, lambda _: "sleep", {"sleep": sleep, "again": again})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        k.clock.advance(10)
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "completed"
        assert "expired" in seen[0]
        assert await k.h.signal(t, ANSWER, "a", {"text": "x"}) == CLOSED

    run(go())


def test_early_signal_wakes_the_sleep_at_once():
    """A value stored while the task still runs is kept; its sleep wakes at once."""
    early = sleeper("test.early")

    async def go():
        k = Kit(early)
        await k.h.open()
        t = await k.h.create_task(early, {"keys": ["a"], "for": 4 * HOUR})
        assert k.h.task(t).status == "pending"
        assert await k.h.signal(t, ANSWER, "a", {"text": "early"}) == D
        wake = await k.h.run_until_parked()
        assert k.h.outcome(t).result["wake"]["reason"] == "signal"
        assert k.h.outcome(t).result["values"] == {"a": "early"}
        assert wake.active is False and wake.at is None

    run(go())


def test_multi_key_sleep_wakes_on_first_listed_key_and_leaves_others_open():
    log: list[tuple[str, str]] = []

    async def first(task, rt):
        await rt.commit(Sleeping(checkpoint="second", signals=(ANSWER.key("a"), ANSWER.key("b"))))

    async def second(task, rt):
        log.append((task.wake.reason, task.wake.key))
        await rt.commit(Sleeping(checkpoint="third", signals=(ANSWER.key("b"),)))

    async def third(task, rt):
        log.append((task.wake.reason, task.wake.key))
        await rt.commit(Terminal(outcome=Completed()))

    async def go():
        kind = define_task(
            "test.multi", 1, lambda _: "first", {"first": first, "second": second, "third": third}
        )
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        # both keys hold values before the sleep: listed order decides, not arrival order
        assert await k.h.signal(t, ANSWER, "b", {"text": "B"}) == D
        assert await k.h.signal(t, ANSWER, "a", {"text": "A"}) == D
        await k.h.run_until_parked()
        assert log == [("signal", "a"), ("signal", "b")]
        assert k.h.outcome(t).status == "completed"

    run(go())


def test_multi_key_deadline_expires_only_keys_without_value():
    async def go():
        kind = sleeper("test.multi-expire")
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind, {"keys": ["a", "b"], "for": 60})
        await k.h.run_until_parked()
        k.clock.advance(60)
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {
            "wake": {"reason": "expired"},
            "values": {"a": "expired", "b": "expired"},
        }

    run(go())


def test_signal_token_definitions_are_checked():
    with pytest.raises(DefinitionError):
        define_signal("a/b", 1, str)
    with pytest.raises(DefinitionError):
        define_signal("ok", 0, str)
    with pytest.raises(DefinitionError):
        ANSWER.key("")
    assert ANSWER.key("k").slot == "test.answer/k"


def test_read_signal_migrates_older_versions():
    v1 = define_signal("test.mig", 1, str)
    v2 = define_signal("test.mig", 2, dict, migrate=lambda value, old: {"text": value, "from": old})

    async def sleep(task, rt):
        await rt.commit(Sleeping(checkpoint="read", signals=(v1.key("k"),)))

    async def read(task, rt):
        state = await rt.read_signal(v2, "k")
        await rt.commit(Terminal(outcome=Completed(result=state.value)))

    async def go():
        old = define_task("test.mig", 1, lambda _: "sleep", {"sleep": sleep, "read": read})
        k = Kit(old)
        await k.h.open()
        t = await k.h.create_task(old)
        await k.h.run_until_parked()
        assert await k.h.signal(t, v1, "k", "hello") == D  # stored by version 1
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {"text": "hello", "from": 1}

    run(go())


def test_in_commit_signal_to_another_task():
    results: list[str] = []

    async def send(task, rt):
        target = task.input["to"]

        def build(tx):
            results.append(tx.signal(target, ANSWER, "a", {"text": "from a task"}))
            return Terminal(outcome=Completed())

        await rt.commit(build)

    async def go():
        sender = define_task("test.sender", 1, lambda _: "send", {"send": send})
        k = Kit(SLEEPER, sender)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"keys": ["a"]})
        await k.h.run_until_parked()
        await k.h.create_task(sender, {"to": t})
        await k.h.run_until_parked()
        assert results == [D]
        assert k.h.outcome(t).result["values"] == {"a": "from a task"}

    run(go())


def test_values_are_gone_when_the_task_ends():
    async def go():
        k, t = await parked_sleeper()
        await k.h.signal(t, ANSWER, "a", {"text": "x"})
        await k.h.run_until_parked()
        stored = k.store.get_task("s1", t)
        assert stored.status == "terminal" and stored.signals == {} and stored.memos == {}

    run(go())


def test_deliver_signal_without_loading_the_session_follows_the_same_table():
    from bide import deliver_signal

    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"keys": ["a"], "for": HOUR})
        await k.h.run_until_parked()

        def send(task, key, value):
            return deliver_signal(k.store, "s1", task, ANSWER, key, value, k.clock).result

        assert send("t-none", "a", {"text": "x"}) == NF
        assert send(t, "a", {"text": 1}) == INV
        assert send(t, "a", {"text": "one"}) == D
        assert send(t, "a", {"text": "two"}) == DUP
        k.clock.advance(HOUR)
        assert send(t, "b", {"text": "other key, not listed"}) == D
        other = await k.h.create_task(SLEEPER, {"keys": ["a"], "for": 1})
        await k.h.run_until_parked()
        k.clock.advance(1)
        assert send(other, "a", {"text": "late"}) == CLOSED  # deadline passed, not yet woken
        await k.h.run_until_parked()  # the harness sees the store moved on, reloads
        assert k.h.outcome(t).result["values"] == {"a": "one"}
        assert send(t, "a", {"text": "x"}) == CLOSED

    run(go())
