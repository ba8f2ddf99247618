"""The harness: wake(), restarts, close mid-run, memos, progress rules, keys, races."""

from __future__ import annotations

import asyncio

import pytest
from kit import ANSWER, HOUR, SLEEPER, Kit, run, sleeper

from bide import (
    DAY,
    Completed,
    ConflictError,
    Harness,
    KeyReuseError,
    Pending,
    Running,
    SequentialIds,
    Sleeping,
    SQLiteStore,
    Terminal,
    Wake,
    define_task,
)
from bide.engine.delivery import deliver_signal


def test_wake_cases():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        assert k.h.wake() == Wake(active=False, at=None)  # nothing at all
        a = await k.h.create_task(SLEEPER, {"keys": ["a"]})
        assert k.h.wake() == Wake(active=True, at=None)  # pending
        assert await k.h.run_until_parked() == Wake(active=False, at=None)  # signals only
        b = await k.h.create_task(SLEEPER, {"for": 2 * HOUR})
        c = await k.h.create_task(SLEEPER, {"keys": ["c"], "for": HOUR})
        wake = await k.h.run_until_parked()
        assert wake == Wake(active=False, at=k.clock.now() + HOUR)  # earliest until
        await k.h.signal(a, ANSWER, "a", {"text": "x"})
        assert k.h.wake().active is True  # a listed key holds an unused value
        await k.h.run_until_parked()
        k.clock.advance(HOUR)
        assert k.h.wake().active is True  # c's until passed
        wake = await k.h.run_until_parked()
        assert wake == Wake(active=False, at=k.clock.now() + HOUR)  # b remains
        k.clock.advance(HOUR)
        assert await k.h.run_until_parked() == Wake(active=False, at=None)
        assert k.h.outcome(b).result["wake"] == {"reason": "time"}
        assert k.h.outcome(c).result["wake"] == {"reason": "expired"}

    run(go())


def test_seven_day_sleep_runs_in_milliseconds():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"for": 7 * DAY})
        wake = await k.h.run_until_parked()
        assert wake.at == k.clock.now() + 7 * DAY
        k.clock.advance(7 * DAY - 0.001)
        assert (await k.h.run_until_parked()).active is False
        assert k.h.outcome(t) is None
        k.clock.advance(0.001)
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["wake"] == {"reason": "time"}

    run(go())


def test_crash_while_running_returns_task_to_pending_with_its_wake():
    gate = asyncio.Event()
    runs: list[dict] = []

    async def sleep(task, rt):
        await rt.commit(Sleeping(checkpoint="work", signals=(ANSWER.key("a"),)))

    async def work(task, rt):
        runs.append(task.wake.to_dict())
        if len(runs) == 1:
            await gate.wait()  # the process dies here
        await rt.commit(Terminal(outcome=Completed(result=len(runs))))

    async def go():
        kind = define_task("test.crashy", 1, lambda _: "sleep", {"sleep": sleep, "work": work})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        await k.h.signal(t, ANSWER, "a", {"text": "x"})
        job = asyncio.ensure_future(k.h.run_until_parked())
        while not runs:
            await asyncio.sleep(0)
        assert k.store.get_task("s1", t).state.status == "running"
        job.cancel()  # the old process is gone; its harness is never closed
        h2 = await k.reopen()
        rec = h2.task(t)
        assert isinstance(rec.state, Pending) and rec.restarts == 1
        assert rec.state.wake.reason == "signal"
        await h2.run_until_parked()
        assert h2.outcome(t).result == 2
        assert runs[0] == runs[1] == {"reason": "signal", "signal": "test.answer", "key": "a"}

    run(go())


def test_parked_tasks_stay_parked_across_restart_without_counting_one():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"keys": ["a"], "for": HOUR})
        await k.h.run_until_parked()
        for _ in range(10):
            h = await k.reopen()
            assert h.task(t).status == "sleeping" and h.task(t).restarts == 0
            assert h.wake() == Wake(active=False, at=k.clock.now() + HOUR)
        await k.h.signal(t, ANSWER, "a", {"text": "still here"})
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["values"] == {"a": "still here"}

    run(go())


def test_restart_limit_faults_a_task_that_keeps_crashing():
    async def hang(task, rt):
        await asyncio.Event().wait()

    async def go():
        kind = define_task("test.hang", 1, lambda _: "go", {"go": hang})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        for _ in range(6):
            job = asyncio.ensure_future(k.h.run_until_parked())
            for _ in range(5):
                await asyncio.sleep(0)
            job.cancel()
            await k.reopen()
        assert k.h.outcome(t).status == "faulted"
        assert "restart limit" in k.h.outcome(t).error

    run(go())


def test_close_mid_run_then_reopen_and_continue():
    started = asyncio.Event()
    calls: list[str] = []

    async def first(task, rt):
        calls.append("first")
        await rt.commit(Running(checkpoint="second"))

    async def second(task, rt):
        calls.append("second")
        if calls.count("second") == 1:
            started.set()
            await asyncio.Event().wait()  # still working when the host closes
        await rt.commit(Terminal(outcome=Completed(result=calls.copy())))

    async def go():
        kind = define_task("test.close", 1, lambda _: "first", {"first": first, "second": second})
        store = SQLiteStore()
        k = Kit(kind, store=store)
        await k.h.open()
        t = await k.h.create_task(kind)
        job = asyncio.ensure_future(k.h.run_until_parked())
        await started.wait()
        await k.h.close()
        await job
        rec = store.get_task("s1", t)
        assert isinstance(rec.state, Pending) and rec.state.checkpoint == {"phase": "second"}
        assert rec.restarts == 0  # a close is not a crash
        h2 = k.harness()
        await h2.open()
        await h2.run_until_parked()
        assert h2.outcome(t).result == ["first", "second", "second"]

    run(go())


def test_memos_are_first_writer_wins_and_durable():
    seen: list = []

    async def go_phase(task, rt):
        seen.append(await rt.memo("run", f"candidate-{len(seen)}"))
        seen.append(await rt.memo("run", "later"))
        if len(seen) == 2:
            await asyncio.Event().wait()  # crash after the memo
        await rt.commit(Terminal(outcome=Completed(result=await rt.memo("run"))))

    async def go():
        kind = define_task("test.memo", 1, lambda _: "go", {"go": go_phase})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        job = asyncio.ensure_future(k.h.run_until_parked())
        while len(seen) < 2:
            await asyncio.sleep(0)
        job.cancel()
        h2 = await k.reopen()
        await h2.run_until_parked()
        assert seen == ["candidate-0"] * 4
        assert h2.outcome(t).result == "candidate-0"

    run(go())


async def _touch_a_memo(task, rt):
    await rt.memo("touched", True)  # memos are not progress


async def _raise(task, rt):
    raise RuntimeError("kaput")


async def _only_yield(task, rt):
    await rt.commit(Pending(checkpoint="go"))  # back to this very phase


@pytest.mark.parametrize(
    ("phase", "error"),
    [
        (_touch_a_memo, "without durable progress"),
        (_raise, "RuntimeError: kaput"),
        (_only_yield, "without progress"),  # faulted instead of spinning
    ],
    ids=["memo-only", "uncaught-error", "only-yields"],
)
def test_a_phase_without_progress_or_with_an_uncaught_error_faults_the_task(phase, error: str):
    async def go():
        kind = define_task("test.faulty", 1, lambda _: "go", {"go": phase})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "faulted"
        assert error in k.h.outcome(t).error

    run(go())


def test_unknown_kind_is_orphaned():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"keys": ["a"]})
        other = Harness(k.store, "s1", [], clock=k.clock, ids=k.ids)  # a deploy without it
        await other.open()
        await other.run_until_parked()
        assert other.outcome(t).status == "orphaned"

    run(go())


def test_create_task_is_idempotent_by_key():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        a = await k.h.create_task(SLEEPER, {"keys": ["a"]}, key="req-1")
        seq = k.h.seq
        assert await k.h.create_task(SLEEPER, {"keys": ["a"]}, key="req-1") == a
        assert k.h.seq == seq
        with pytest.raises(KeyReuseError):
            await k.h.create_task(SLEEPER, {"keys": ["b"]}, key="req-1")
        other = sleeper("test.other-kind")
        k.h.register(other)
        with pytest.raises(KeyReuseError):
            await k.h.create_task(other, {"keys": ["a"]}, key="req-1")

    run(go())


def test_two_harnesses_racing_keep_one_consistent_history():
    """A stale harness is rejected by the store, reloads and decides again."""

    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        t = await k.h.create_task(SLEEPER, {"keys": ["a", "b"]})
        await k.h.run_until_parked()
        other = k.harness()
        await other.open()
        # Both hold seq N. Each delivers a different key; the second must notice the first.
        assert await k.h.signal(t, ANSWER, "a", {"text": "from h1"}) == "delivered"
        assert await other.signal(t, ANSWER, "a", {"text": "from h2"}) == "duplicate"
        assert await other.signal(t, ANSWER, "b", {"text": "b from h2"}) == "delivered"
        record = k.store.get_task("s1", t)
        assert record.signals["test.answer/a"].value == {"text": "from h1"}
        assert record.signals["test.answer/b"].value == {"text": "b from h2"}
        # the store itself refuses a stale writer
        with pytest.raises(ConflictError):
            k.store.commit("s1", k.h.seq, [record])
        await k.h.run_until_parked()
        assert k.h.outcome(t).result["values"] == {"a": "from h1", "b": "b from h2"}

    run(go())


def test_signal_arriving_mid_run_does_not_interrupt_the_running_phase():
    """A delivery from another process conflicts with the running phase's commit; the harness
    reloads and re-evaluates, so the phase is not rerun and the early value wakes the sleep."""
    entered: list[int] = []
    proceed = asyncio.Event()

    async def first(task, rt):
        entered.append(1)
        await proceed.wait()
        await rt.commit(Sleeping(checkpoint="second", signals=(ANSWER.key("late"),)))

    async def second(task, rt):
        state = await rt.read_signal(ANSWER, "late")
        await rt.commit(Terminal(outcome=Completed(result=state.value.text)))

    async def go():
        kind = define_task("test.midrun", 1, lambda _: "first", {"first": first, "second": second})
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        job = asyncio.ensure_future(k.h.run_until_parked())
        while not entered:
            await asyncio.sleep(0)
        seq = k.store.head("s1")
        decision = deliver_signal(k.store, "s1", t, ANSWER, "late", {"text": "kept"}, k.clock)
        assert decision.result == "delivered" and k.store.head("s1") == seq + 1
        proceed.set()
        await job
        assert entered == [1], "the running phase was not interrupted or rerun"
        assert k.h.outcome(t).result == "kept"

    run(go())


def test_seven_days_of_history_do_not_slow_loading():
    """Loading reads live tasks only: ended tasks stay in the store but not in the view."""

    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        for i in range(50):
            t = await k.h.create_task(SLEEPER, {"keys": ["a"]})
            await k.h.run_until_parked()
            await k.h.signal(t, ANSWER, "a", {"text": str(i)})
            await k.h.run_until_parked()
        snapshot = k.store.load("s1")
        assert snapshot.tasks == {}
        assert k.store.get_task("s1", t).status == "terminal"

    run(go())


def test_a_repeating_id_source_never_overwrites_a_task():
    async def go():
        k = Kit(SLEEPER)
        await k.h.open()
        first = await k.h.create_task(SLEEPER, {"keys": ["a"]})
        await k.h.run_until_parked()
        k.ids = SequentialIds()  # a restarted process whose ids start again at 1
        h = await k.reopen()
        second = await h.create_task(SLEEPER, {"keys": ["b"]})
        assert second != first
        assert h.task(first).status == "sleeping" and h.task(first).input == {"keys": ["a"]}

    run(go())


def test_more_runnable_tasks_than_one_commit_holds():
    """Reservations are split over commits: a store writes at most 99 items at once."""

    async def go():
        kind = sleeper("test.many")
        k = Kit(kind)
        await k.h.open()
        for _ in range(150):
            await k.h.create_task(kind, {"for": HOUR})
        wake = await k.h.run_until_parked()
        assert len(k.h.live_tasks) == 150
        assert all(r.status == "sleeping" for r in k.h.live_tasks.values())
        k.clock.advance(HOUR)
        assert k.h.wake().active
        await k.h.run_until_parked()
        assert k.h.live_tasks == {} and wake.at is not None

    run(go())


def test_aborting_an_owner_of_many_tasks_reaches_them_all():
    async def spawn(task, rt):
        for chunk in range(3):  # one commit holds at most 99 items: create in chunks

            def build(tx, chunk=chunk):
                for i in range(chunk * 45, chunk * 45 + 45):
                    tx.create_task(SLEEPER, {"keys": ["a"]}, key=str(i))

            await rt.commit(build)
        await rt.commit(Sleeping(checkpoint="never", signals=(ANSWER.key("x"),)))

    async def go():
        owner = define_task("test.big-owner", 1, lambda _: "spawn", {"spawn": spawn})
        k = Kit(owner, SLEEPER)
        await k.h.open()
        t = await k.h.create_task(owner)
        await k.h.run_until_parked()
        assert len(k.h.live_tasks) == 136
        await k.h.abort(t, "Stop")
        await k.h.run_until_parked()
        assert k.h.live_tasks == {}
        assert k.h.outcome(t).status == "aborted"

    run(go())
