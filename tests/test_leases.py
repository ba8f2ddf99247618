"""Leases on running tasks: a harness leaves a task another one is running alone until its
lease expires, then takes it over as after a crash (docs/reliability.md, Known limits)."""

from __future__ import annotations

import asyncio

import pytest
from kit import run
from pydantic import BaseModel

from bide import (
    Completed,
    DefinitionError,
    Harness,
    ManualClock,
    Pending,
    Running,
    SequentialIds,
    SQLiteStore,
    Terminal,
    Wake,
    define_task,
)
from bide.constants import WORKER_TIMEOUT_SECONDS
from bide.tools import ToolRegistry, define_tool


class NoArgs(BaseModel):
    pass


LEASE = WORKER_TIMEOUT_SECONDS + 30.0  # what a worker passes: its timeout plus some slack


class Gate:
    """Holds a phase (or a tool's execute) until released: a worker that is still working."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.runs = 0

    async def hold(self) -> None:
        self.runs += 1
        self.entered.set()
        await self.go.wait()


def slow_kind(gate: Gate):
    async def work(task, rt):
        await gate.hold()
        await rt.commit(Terminal(outcome=Completed(result="done")))

    return define_task("lease.slow", 1, lambda _: "work", {"work": work})


class World:
    def __init__(self, *kinds) -> None:
        self.store = SQLiteStore()
        self.clock = ManualClock()
        self.ids = SequentialIds()
        self.kinds = kinds

    async def worker(self, lease: float | None = LEASE) -> Harness:
        h = Harness(
            self.store, "s1", self.kinds, clock=self.clock, ids=self.ids, lease_seconds=lease
        )
        await h.open()
        return h


async def started(h: Harness, gate: Gate) -> asyncio.Future:
    """Run ``h`` until the gated phase is inside its work; the run goes on in the background."""
    runner = asyncio.ensure_future(h.run_until_parked())
    await asyncio.wait({runner, asyncio.ensure_future(gate.entered.wait())}, timeout=5)
    assert gate.entered.is_set() and not runner.done()
    return runner


async def one_running(
    lease: float | None = LEASE,
) -> tuple[Gate, World, Harness, str, asyncio.Future]:
    """A world whose first worker runs one gated task and is inside its phase: the gate, the
    world, that worker, the task's id and the run going on in the background."""
    gate = Gate()
    w = World(slow_kind(gate))
    first = await w.worker(lease=lease)
    t = await first.create_task(w.kinds[0])
    return gate, w, first, t, await started(first, gate)


def test_a_second_harness_leaves_a_leased_task_alone_and_arms_for_its_expiry():
    async def go():
        gate, w, first, t, runner = await one_running()
        state = first.task(t).state
        assert isinstance(state, Running) and state.lease_until == w.clock.now() + LEASE

        w.clock.advance(LEASE - 1)  # the lease is still live
        second = await w.worker()
        record = second.task(t)
        assert record.state == state and record.restarts == 0  # not taken over
        # Nothing to run here; run again when the lease expires, in case its holder died.
        assert await second.run_until_parked() == Wake(active=False, at=state.lease_until)
        assert second.task(t).state == state and gate.runs == 1
        await second.close()  # closing releases only what it holds
        assert first.task(t).state == state

        gate.go.set()
        assert await runner == Wake(active=False, at=None)
        assert first.outcome(t) == Completed(result="done")
        assert first.task(t).restarts == 0 and gate.runs == 1

    run(go())


def test_other_work_keeps_the_session_active_while_a_lease_is_held():
    async def go():
        gate, w, first, _t, runner = await one_running()
        observer = Harness(w.store, "s1", w.kinds, clock=w.clock, ids=w.ids, lease_seconds=LEASE)
        await observer.attach()
        await observer.create_task(w.kinds[0])
        assert observer.wake().active is True  # the new task is pending
        assert first.wake().active is True  # its own running task counts as active
        gate.go.set()
        await runner

    run(go())


def test_an_expired_lease_is_taken_over_as_after_a_crash():
    async def go():
        gate, w, _dead, t, runner = await one_running()
        w.clock.advance(LEASE)  # exactly at expiry: the holder is presumed dead
        second = await w.worker()
        assert second.task(t).restarts == 1
        assert isinstance(second.task(t).state, Pending)
        gate.go.set()  # the next run of the phase passes at once
        assert await second.run_until_parked() == Wake(active=False, at=None)
        assert second.outcome(t) == Completed(result="done")
        # The old holder wakes up after all: its commit is refused, it writes nothing.
        seq = w.store.head("s1")
        await runner
        assert w.store.head("s1") == seq and gate.runs == 2

    run(go())


def test_a_harness_already_open_takes_over_once_the_lease_expires():
    async def go():
        gate, w, _dead, t, runner = await one_running()
        second = await w.worker()
        wake = await second.run_until_parked()
        assert wake.active is False and wake.at is not None
        w.clock.set(wake.at)  # the alarm fires
        gate.go.set()
        assert await second.run_until_parked() == Wake(active=False, at=None)
        assert second.outcome(t) == Completed(result="done")
        assert second.task(t).restarts == 1
        runner.cancel()

    run(go())


def test_a_clean_close_releases_the_lease_without_a_restart():
    async def go():
        gate, w, first, t, _runner = await one_running()
        await first.close()
        record = w.store.get_task("s1", t)
        assert isinstance(record.state, Pending) and record.restarts == 0
        second = await w.worker()  # at once: nothing is held any more
        gate.go.set()
        assert await second.run_until_parked() == Wake(active=False, at=None)
        assert second.outcome(t) == Completed(result="done") and second.task(t).restarts == 0

    run(go())


def test_renewal_moves_the_lease_forward():
    go_on = asyncio.Event()
    entered = asyncio.Event()

    async def first_step(task, rt):
        entered.set()
        await go_on.wait()
        await rt.commit(Running(checkpoint={"phase": "second"}))
        entered.set()
        await asyncio.sleep(3600)  # a long run, checkpointed

    kind = define_task("lease.renew", 1, lambda _: "first", {"first": first_step})

    async def go():
        w = World(kind)
        h = await w.worker()
        t = await h.create_task(kind)
        runner = asyncio.ensure_future(h.run_until_parked())
        await asyncio.wait_for(entered.wait(), 5)
        reserved = h.task(t).state.lease_until
        assert reserved == w.clock.now() + LEASE
        entered.clear()
        w.clock.advance(LEASE - 10)
        go_on.set()
        await asyncio.wait_for(entered.wait(), 5)
        renewed = h.task(t).state.lease_until
        assert renewed == w.clock.now() + LEASE > reserved
        w.clock.advance(20)  # past the first lease, inside the renewed one
        other = await w.worker()
        assert other.task(t).state.lease_until == renewed and other.task(t).restarts == 0
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    run(go())


def test_without_a_lease_open_takes_over_at_once():
    async def go():
        _gate, w, first, t, runner = await one_running(lease=None)
        assert first.task(t).state.lease_until is None
        second = await w.worker(lease=None)
        assert second.task(t).restarts == 1
        runner.cancel()

    run(go())


@pytest.mark.parametrize("bad", [0, -5.0])
def test_a_lease_must_be_positive(bad):
    with pytest.raises(DefinitionError, match="lease_seconds"):
        Harness(SQLiteStore(), "s1", lease_seconds=bad)


def test_a_replay_unsafe_call_running_elsewhere_is_not_interrupted():
    """The race the lease closes: a duplicate worker no longer cuts off a replay-unsafe call
    another worker is running (it used to end ``interrupted``)."""
    gate = Gate()
    paid: list[str] = []

    async def pay(args, api):
        await gate.hold()
        paid.append(api.task_id)
        return "paid"

    registry = ToolRegistry([define_tool("pay", "Pays.", NoArgs, pay, replay="unsafe")])

    async def go():
        w = World(registry.task)
        first = await w.worker()
        t = await first.create_task(registry.task, registry.call("pay", {}))
        runner = await started(first, gate)
        for _ in range(7):  # more duplicate workers than the restart limit allows takeovers
            other = await w.worker()
            await other.run_until_parked()
            await other.close()
        gate.go.set()
        await runner
        outcome = first.outcome(t)
        assert outcome.status == "completed", outcome
        assert outcome.result["content"][0]["text"] == "paid"
        assert paid == [t] and first.task(t).restarts == 0

    run(go())
