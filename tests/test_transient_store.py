"""A transient store error inside a phase is a crash of the run, not the task's fault.

The store answers one commit with :class:`StoreUnavailable` (or the session stays too busy
for every attempt, :class:`ConflictError`). The run stops and raises that error, so the
worker fails and its wake is retried; the task stays as the store last saw it (never
faulted, never a false tool error) and the next run recovers it as after a crash: a
replay-safe tool runs again, a replay-unsafe one ends ``interrupted`` (design 001 ch. X).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from kit import run
from pydantic import BaseModel

from bide import (
    Completed,
    ConflictError,
    Harness,
    ManualClock,
    Running,
    SequentialIds,
    SQLiteStore,
    StoreUnavailable,
    Terminal,
    define_task,
)
from bide.engine.store.wrapper import StoreWrapper
from bide.tools import ToolRegistry, define_tool

LEASE = 330.0


class Flaky(StoreWrapper):
    """Answers the first commit whose writes satisfy ``match`` with ``error`` (nothing
    written), once; every other call passes through."""

    def __init__(self, inner, match: Callable[[Sequence], bool], error: Exception) -> None:
        super().__init__(inner)
        self.match: Callable[[Sequence], bool] | None = match
        self.error = error
        self.failed = 0

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        if self.match is not None and self.match(writes):
            self.match = None
            self.failed += 1
            raise self.error
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)


class Busy(StoreWrapper):
    """Refuses every commit that satisfies ``match`` as a conflict (another writer always
    got there first) until ``calm()``: a session too busy to commit."""

    def __init__(self, inner, match: Callable[[Sequence], bool]) -> None:
        super().__init__(inner)
        self.match: Callable[[Sequence], bool] | None = match
        self.refused = 0

    def calm(self) -> None:
        self.match = None

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        if self.match is not None and self.match(writes):
            self.refused += 1
            raise ConflictError(session_id, expected_seq, expected_seq + 1)
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)


def terminal(writes) -> bool:
    return any(r.state.status == "terminal" for r in writes)


def harness(store, lease: float | None, clock: ManualClock, ids: SequentialIds, *kinds):
    return Harness(store, "s1", kinds, clock=clock, ids=ids, lease_seconds=lease)


async def fails_like_a_crash(h: Harness, error: type[BaseException]) -> None:
    with pytest.raises(error):
        await h.run_until_parked()


PLAIN = define_task(
    "transient.plain",
    1,
    lambda _: "work",
    {"work": lambda task, rt: rt.commit(Terminal(outcome=Completed(result="done")))},
)


@pytest.mark.parametrize("lease", [None, LEASE])
def test_a_plain_task_whose_commit_fails_is_recovered_not_faulted(lease):
    async def go():
        store = Flaky(SQLiteStore(), terminal, StoreUnavailable("throttled"))
        clock, ids = ManualClock(), SequentialIds()
        h = harness(store, lease, clock, ids, PLAIN)
        await h.open()
        t = await h.create_task(PLAIN)
        await fails_like_a_crash(h, StoreUnavailable)
        record = store.get_task("s1", t)
        assert record.status != "terminal", record.state  # not faulted
        if lease is None:
            assert isinstance(record.state, Running)  # as the store last saw it
        else:
            # The dead run gave its tasks back (as the next run would at the lease's end).
            assert record.status == "pending" and record.restarts == 1
        nxt = harness(store, lease, clock, ids, PLAIN)
        await nxt.open()
        assert nxt.task(t).restarts == 1
        await nxt.run_until_parked()
        assert nxt.outcome(t) == Completed(result="done")

    run(go())


def test_a_session_too_busy_to_commit_is_a_crash_too():
    async def go():
        store = Busy(SQLiteStore(), terminal)
        clock, ids = ManualClock(), SequentialIds()
        h = harness(store, None, clock, ids, PLAIN)
        await h.open()
        t = await h.create_task(PLAIN)
        await fails_like_a_crash(h, ConflictError)
        assert store.refused == 8  # every attempt reloaded and decided afresh first
        assert isinstance(store.get_task("s1", t).state, Running)
        store.calm()
        nxt = harness(store, None, clock, ids, PLAIN)
        await nxt.open()
        await nxt.run_until_parked()
        assert nxt.outcome(t) == Completed(result="done")

    run(go())


def test_a_racing_writer_is_still_reloaded_and_decided_afresh():
    """One refused commit is a conflict the harness handles: the phase goes on."""

    async def go():
        store = Busy(SQLiteStore(), terminal)
        refusals = iter(range(1))
        inner_match = store.match

        def once(writes):
            return inner_match(writes) and next(refusals, None) is not None

        store.match = once
        clock, ids = ManualClock(), SequentialIds()
        h = harness(store, None, clock, ids, PLAIN)
        await h.open()
        t = await h.create_task(PLAIN)
        await h.run_until_parked()
        assert store.refused == 1 and h.outcome(t) == Completed(result="done")

    run(go())


class NoArgs(BaseModel):
    pass


class Effects:
    def __init__(self) -> None:
        self.calls = 0


def world(replay: str, match, *, inside: bool):
    """A ``pay`` tool (``replay`` as given) whose effect is counted. ``inside``: after its
    effect, ``execute()`` itself writes a memo, and that is the commit that fails."""
    effects = Effects()

    async def pay(args, api):
        effects.calls += 1  # the effect
        if inside:
            await api.memo("receipt", f"r-{effects.calls}")
        return "paid"

    registry = ToolRegistry([define_tool("pay", "Pays.", NoArgs, pay, replay=replay)])
    return registry, effects


def memo_commit(writes) -> bool:
    return any("receipt" in r.memos for r in writes)


@pytest.mark.parametrize("lease", [None, LEASE])
@pytest.mark.parametrize(
    ("replay", "inside"), [("safe", False), ("safe", True), ("unsafe", False), ("unsafe", True)]
)
def test_a_tool_whose_commit_fails_after_its_effect(replay, inside, lease):
    async def go():
        registry, effects = world(replay, None, inside=inside)
        store = Flaky(
            SQLiteStore(), memo_commit if inside else terminal, StoreUnavailable("unavailable")
        )
        clock, ids = ManualClock(), SequentialIds()
        h = harness(store, lease, clock, ids, registry.task)
        await h.open()
        t = await h.create_task(registry.task, registry.call("pay", {}))
        await fails_like_a_crash(h, StoreUnavailable)
        assert effects.calls == 1 and store.failed == 1
        assert store.get_task("s1", t).status != "terminal"  # no fault, no tool error
        nxt = harness(store, lease, clock, ids, registry.task)
        await nxt.open()
        await nxt.run_until_parked()
        outcome = nxt.outcome(t)
        assert outcome.status == "completed", outcome
        if replay == "safe":
            assert effects.calls == 2
            assert outcome.result["content"][0]["text"] == "paid"
        else:
            assert effects.calls == 1  # never run twice
            assert outcome.result["code"] == "interrupted", outcome.result

    run(go())
