"""Engine operations over sessions of any size: a store commit holds at most MAX_COMMIT_ITEMS
(99) records and documents, so recovery, release and abort cascades over 250+ running tasks
are split into several commits, each complete in itself: a crash between two leaves the rest
for the next run, which finishes the job (and counts nothing twice)."""

from __future__ import annotations

import asyncio

import pytest
from kit import run

from bide import (
    Aborted,
    Completed,
    Harness,
    ManualClock,
    Pending,
    Running,
    SequentialIds,
    SQLiteStore,
    Terminal,
    Waiting,
    define_task,
)
from bide.engine.ids import keyed_id
from bide.engine.store.base import MAX_COMMIT_ITEMS
from bide.engine.store.wrapper import StoreWrapper
from bide.testing import Crash, FaultyStore

N = 260
LEASE = 330.0


class Sizes(StoreWrapper):
    """Records how many items each commit that landed held."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.sizes: list[int] = []

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        self.sizes.append(len(writes) + len(docs))
        return seq


class Gate:
    def __init__(self, n: int) -> None:
        self.n = n
        self.inside = 0
        self.all_in = asyncio.Event()
        self.go = asyncio.Event()

    async def hold(self) -> None:
        self.inside += 1
        if self.inside >= self.n:
            self.all_in.set()
        await self.go.wait()


def kinds(gate: Gate):
    async def work(task, rt):
        await gate.hold()
        await rt.commit(Terminal(outcome=Completed(result=task.input["i"])))

    child = define_task("split.child", 1, lambda _: "work", {"work": work})

    async def spawn(task, rt):
        n, made = task.input["n"], []
        for start in range(0, n, 80):  # a commit holds at most 99 items: create in batches
            batch = range(start, min(n, start + 80))
            made += await rt.write(
                lambda tx, batch=batch: [
                    tx.create_task(child, {"i": i}, key=f"c{i}") for i in batch
                ]
            )
        await rt.commit(Waiting(checkpoint="done", on=tuple(made)))

    async def done(task, rt):
        await rt.commit(Terminal(outcome=Completed(result="all done")))

    root = define_task("split.root", 1, lambda _: "spawn", {"spawn": spawn, "done": done})
    return root, child


class World:
    def __init__(self, lease: float | None = None) -> None:
        self.sizes = Sizes(SQLiteStore())  # SQLiteStore raises CommitTooLarge past 99 items
        self.store = FaultyStore(self.sizes)
        self.clock = ManualClock()
        self.ids = SequentialIds()
        self.gate = Gate(N)
        self.root, self.child = kinds(self.gate)
        self.lease = lease

    def harness(self) -> Harness:
        return Harness(
            self.store,
            "s1",
            [self.root, self.child],
            clock=self.clock,
            ids=self.ids,
            lease_seconds=self.lease,
        )

    async def all_running(self, *, owned: bool) -> tuple[Harness, asyncio.Future, list[str]]:
        """A harness running N tasks at once (children of one root, or top-level)."""
        h = self.harness()
        await h.open()
        if owned:
            root = await h.create_task(self.root, {"n": N})
            ids = [root]
        else:
            ids = [await h.create_task(self.child, {"i": i}) for i in range(N)]
        runner = asyncio.ensure_future(h.run_until_parked())
        await asyncio.wait_for(self.gate.all_in.wait(), 30)
        running = [r for r in h.live_tasks.values() if isinstance(r.state, Running)]
        assert len(running) == N
        return h, runner, ids

    def records(self) -> list:
        return list(self.store.load("s1").tasks.values())

    def check_sizes(self) -> None:
        assert max(self.sizes.sizes) <= MAX_COMMIT_ITEMS


async def die(runner: asyncio.Future) -> None:
    runner.cancel()  # the process dies: every invocation stops, nothing more is written
    await asyncio.gather(runner, return_exceptions=True)


async def reopen_until_it_holds(w: World) -> Harness:
    """Open new harnesses until one opens without dying (the store dies once per arming)."""
    while True:
        h = w.harness()
        try:
            await h.open()
            return h
        except Crash:
            continue


def test_recovering_many_running_tasks_after_a_crash():
    async def go():
        w = World()
        _, runner, ids = await w.all_running(owned=False)
        await die(runner)
        before = len(w.sizes.sizes)
        h = w.harness()
        await h.open()
        recovery = w.sizes.sizes[before:]
        assert len(recovery) >= 3 and sum(recovery) == N, recovery
        assert all(isinstance(r.state, Pending) and r.restarts == 1 for r in w.records())
        w.gate.go.set()
        await h.run_until_parked()
        assert [h.outcome(t) for t in ids] == [Completed(result=i) for i in range(N)]
        w.check_sizes()

    run(go())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_between_recovery_commits_is_finished_by_the_next_open(when):
    async def go():
        w = World()
        _, runner, ids = await w.all_running(owned=False)
        await die(runner)
        w.store.fail_at = w.store.commits + 2  # the second recovery commit
        w.store.when = when
        with pytest.raises(Crash):
            await w.harness().open()
        states = [r.state.status for r in w.records()]
        assert 0 < states.count("pending") < N and states.count("running") > 0
        h = await reopen_until_it_holds(w)
        # Every task recovered exactly once: no restart counted twice.
        assert all(isinstance(r.state, Pending) and r.restarts == 1 for r in w.records())
        w.gate.go.set()
        await h.run_until_parked()
        assert all(h.outcome(t) == Completed(result=i) for i, t in enumerate(ids))
        w.check_sizes()

    run(go())


@pytest.mark.parametrize("lease", [None, LEASE])
def test_releasing_many_running_tasks_on_close(lease):
    async def go():
        w = World(lease)
        h, runner, ids = await w.all_running(owned=False)
        before = len(w.sizes.sizes)
        await h.close()
        await asyncio.gather(runner, return_exceptions=True)
        assert len(w.sizes.sizes) - before >= 3
        assert all(isinstance(r.state, Pending) and r.restarts == 0 for r in w.records())
        nxt = w.harness()
        await nxt.open()  # at once: nothing is held any more
        w.gate.go.set()
        await nxt.run_until_parked()
        assert all(nxt.outcome(t) == Completed(result=i) for i, t in enumerate(ids))
        w.check_sizes()

    run(go())


@pytest.mark.parametrize("lease", [None, LEASE])
def test_a_crash_between_release_commits(lease):
    """The released tasks are pending (no restart); the rest stay running under the dead
    worker's lease and are recovered once it expired (at once without leases)."""

    async def go():
        w = World(lease)
        h, runner, ids = await w.all_running(owned=False)
        w.store.fail_at = w.store.commits + 2
        with pytest.raises(Crash):
            await h.close()
        await die(runner)
        released = {r.id for r in w.records() if isinstance(r.state, Pending)}
        assert 0 < len(released) < N
        w.gate.go.set()
        if lease is not None:
            early = w.harness()
            await early.open()
            still = [r for r in w.records() if isinstance(r.state, Running)]
            assert len(still) == N - len(released)  # held: left alone while the lease lives
            wake = await early.run_until_parked()  # runs the released ones
            assert wake.active is False and wake.at == still[0].state.lease_until
            w.clock.set(wake.at)
        nxt = w.harness()
        await nxt.open()
        await nxt.run_until_parked()
        for i, t in enumerate(ids):
            assert nxt.outcome(t) == Completed(result=i)
            assert nxt.task(t).restarts == (0 if t in released else 1)
        w.check_sizes()

    run(go())


def child_ids(root: str) -> list[str]:
    return [keyed_id("t-", "s1", root, f"c{i}") for i in range(N)]


async def all_marked(h: Harness, root: str) -> None:
    """Let the running harness pass the abort marks on (a few per pass) while the children
    are still working, so each of them is aborted rather than finishing first."""
    for _ in range(1000):
        if all(h.live_tasks[t].abort_marked for t in child_ids(root)):
            return
        await asyncio.sleep(0)
    raise AssertionError("the abort marks never reached every child")


def test_an_abort_cascade_over_many_running_tasks():
    async def go():
        w = World()
        h, runner, (root,) = await w.all_running(owned=True)
        marks = len(w.sizes.sizes)
        assert await h.abort(root, "stop")
        assert w.sizes.sizes[marks] <= MAX_COMMIT_ITEMS  # the rest is marked by later passes
        await all_marked(h, root)
        assert len(w.sizes.sizes) - marks >= 3  # the marks took several commits
        w.gate.go.set()  # each child's next commit is refused; its abort runs instead
        await runner
        assert h.live_tasks == {}
        assert h.outcome(root) == Aborted(reason="stop")
        assert all(h.outcome(t) == Aborted(reason="stop") for t in child_ids(root))
        w.check_sizes()

    run(go())


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("nth", [1, 3])
def test_a_crash_inside_an_abort_cascade_is_finished_by_the_next_run(when, nth):
    async def go():
        w = World()
        h, runner, (root,) = await w.all_running(owned=True)
        assert await h.abort(root, "stop")
        await all_marked(h, root)
        w.store.fail_at = w.store.commits + nth
        w.store.when = when
        w.gate.go.set()
        with pytest.raises(Crash):
            await runner
        nxt = w.harness()
        await nxt.open()
        await nxt.run_until_parked()
        assert nxt.live_tasks == {}
        assert nxt.outcome(root) == Aborted(reason="stop")
        assert all(nxt.outcome(t) == Aborted(reason="stop") for t in child_ids(root))
        w.check_sizes()

    run(go())


def test_a_crash_between_the_commits_that_mark_a_cascade():
    async def go():
        w = World()
        h, runner, (root,) = await w.all_running(owned=True)
        w.store.fail_at = w.store.commits + 2  # the abort commit lands; the next one dies
        assert await h.abort(root, "stop")
        with pytest.raises(Crash):
            await runner
        marked = [t for t in child_ids(root) if w.store.get_task("s1", t).abort_marked]
        assert 0 < len(marked) < N
        w.gate.go.set()
        nxt = w.harness()
        await nxt.open()
        await nxt.run_until_parked()
        assert nxt.live_tasks == {}
        assert nxt.outcome(root) == Aborted(reason="stop")
        assert all(nxt.outcome(t) == Aborted(reason="stop") for t in child_ids(root))
        w.check_sizes()

    run(go())
