"""A targeted pass on a wake's first delivery holds its task's reservation until the task's
first commit (bide.engine.deferred): one commit per signal -> next wait instead of two, and
nothing else changes that a crash, a racing writer or a long phase could see.

Each phase below looks at the store from inside itself (``STORED``): the task's status as the
store holds it while the phase runs tells whether its reservation was committed before it
("running") or is held ("sleeping")."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from kit import ANSWER
from targeted_kit import Queue

from bide import Harness, ManualClock, SequentialIds, SQLiteStore
from bide.app import App
from bide.aws.sqs import wake_body
from bide.engine import scheduler
from bide.engine.delivery import deliver_signal
from bide.engine.state import Running, Sleeping
from bide.engine.store import StoreWrapper
from bide.engine.tasks import define_task
from bide.service.deps import Deps
from bide.service.worker_batch import handle_worker

SID = "s-deferred"
LEASE = 300.0
RUNS: Counter[str] = Counter()  # phase runs, by task id and checkpoint n
STORED: list[str] = []  # the task's status in the store, seen from inside each phase run
HOOKS: dict[str, Any] = {}  # what the next phase run does before its commit


class Crash(BaseException):
    """The process dies (not an error of the phase: nothing catches it)."""


class Commits(StoreWrapper):
    """Counts commits."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.commits = 0

    def commit(self, *args: Any, **kwargs: Any) -> int:
        self.commits += 1
        return self.inner.commit(*args, **kwargs)


async def loop(task: Any, rt: Any) -> None:
    """Sleep on key k<n>; each wake reads its value and sleeps on the next key."""
    n = task.checkpoint["n"]
    RUNS[f"{task.id}/{n}"] += 1
    stored = STORE.inner.get_task(SID, task.id)
    STORED.append(stored.state.status)
    hook = HOOKS.pop("before_commit", None)
    if hook is not None:
        await hook(task)
    if task.wake is not None:
        await rt.read_signal(ANSWER, f"k{n - 1}")
    await rt.commit(
        Sleeping(checkpoint={"phase": "loop", "n": n + 1}, signals=(ANSWER.key(f"k{n}"),))
    )


Looper = define_task("dr.looper", 1, lambda _: {"phase": "loop", "n": 0}, {"loop": loop})
STORE: Commits = Commits(SQLiteStore())  # replaced per test


@pytest.fixture(autouse=True)
def fresh() -> Any:
    global STORE
    STORE = Commits(SQLiteStore())
    RUNS.clear()
    STORED.clear()
    HOOKS.clear()
    yield
    STORE.close()


CLOCK = ManualClock(1_000_000.0)
IDS = SequentialIds()


def harness(*, focus: str | None = None, defer: bool = False) -> Harness:
    return Harness(
        STORE,
        SID,
        [Looper],
        clock=CLOCK,
        ids=IDS,
        lease_seconds=LEASE,
        focus=None if focus is None else (focus, None),
        hold_reservation=defer,
    )


def parked_looper() -> str:
    """A looper asleep on k0 (its first phase run happened)."""

    async def go() -> str:
        h = harness()
        await h.open()
        task_id = await h.create_task(Looper)
        await h.run_until_parked()
        await h.close()
        return task_id

    task_id = asyncio.run(go())
    STORED.clear()
    return task_id


def signal(task_id: str, key: str) -> None:
    result = deliver_signal(STORE.inner, SID, task_id, ANSWER, key, {"text": key}, CLOCK)
    assert result.result == "delivered", result


def targeted(task_id: str, *, defer: bool, flush_after: float | None = None) -> None:
    async def go() -> None:
        h = harness(focus=task_id, defer=defer)
        if flush_after is not None:
            h.hold_flush_seconds = flush_after
        await h.open()
        try:
            await h.run_until_parked()
        finally:
            if not h._closed:  # a crash leaves the harness dead, as a process death would
                await h.close()

    asyncio.run(go())


def state_of(task_id: str) -> Any:
    record = STORE.inner.get_task(SID, task_id)
    assert record is not None
    return record


def test_the_held_reservation_rides_with_the_park() -> None:
    task_id = parked_looper()
    signal(task_id, "k0")
    STORE.commits = 0
    targeted(task_id, defer=True)
    assert STORE.commits == 1  # the park, carrying the reservation
    assert STORED == ["sleeping"]  # the store never saw the task running
    record = state_of(task_id)
    assert record.state.status == "sleeping" and record.state.checkpoint["n"] == 2
    # The consumed value left the record for its signal document in that same commit: a
    # second value for k0 is refused as ever.
    assert "test.answer/k0" not in record.signals
    second = deliver_signal(STORE.inner, SID, task_id, ANSWER, "k0", {"text": "again"}, CLOCK)
    assert second.result == "duplicate"


def test_without_holding_the_reservation_is_a_commit_of_its_own() -> None:
    task_id = parked_looper()
    signal(task_id, "k0")
    STORE.commits = 0
    targeted(task_id, defer=False)
    assert STORE.commits == 2
    assert STORED == ["running"]


def whole(*, hold: bool) -> None:
    async def go() -> None:
        h = Harness(STORE, SID, [Looper], clock=CLOCK, ids=IDS, lease_seconds=LEASE,
                    hold_reservation=hold)  # fmt: skip
        await h.open()
        await h.run_until_parked()
        await h.close()

    asyncio.run(go())


def test_a_whole_pass_holds_a_reservation_that_starts_one_task_only() -> None:
    """What is held is a reservation of one task alone (an alarm's wake, a whole first run):
    one that starts two tasks is committed as ever, before either runs."""
    one, two = parked_looper(), parked_looper()
    signal(one, "k0")
    STORE.commits = 0
    whole(hold=True)
    assert (STORE.commits, STORED) == (1, ["sleeping"])
    signal(one, "k1")
    signal(two, "k0")
    STORE.commits, STORED[:] = 0, []
    whole(hold=True)
    assert (STORE.commits, STORED) == (3, ["running", "running"])
    assert state_of(one).state.checkpoint["n"] == 3 and state_of(two).state.checkpoint["n"] == 2


def test_a_crash_before_the_first_commit_leaves_the_task_parked_with_its_value() -> None:
    task_id = parked_looper()
    signal(task_id, "k0")

    async def die(task: Any) -> None:
        raise Crash()

    HOOKS["before_commit"] = die
    with pytest.raises(Crash):
        targeted(task_id, defer=True)
    record = state_of(task_id)
    # Nothing of the run is durable: parked as before, its value still on the record, no
    # restart counted (so the worker holds a reservation only on a first delivery).
    assert isinstance(record.state, Sleeping) and record.state.checkpoint["n"] == 1
    assert record.signals["test.answer/k0"].value == {"text": "k0"}
    assert record.restarts == 0
    # The wake comes again: that run reserves first and parks on the next key.
    targeted(task_id, defer=False)
    assert state_of(task_id).state.checkpoint["n"] == 2
    assert RUNS[f"{task_id}/1"] == 2  # run again, as after a crash right before a reservation


def test_a_racing_writer_makes_the_held_reservation_staged_again() -> None:
    """Another process commits to the session while the phase runs: the phase's commit
    conflicts, the view is reloaded, the reservation staged again on it (same invocation),
    and the commit goes through: the phase ran once."""
    task_id = parked_looper()
    other = parked_looper()
    signal(task_id, "k0")

    async def race(task: Any) -> None:
        signal(other, "k0")  # moves the session's seq on

    HOOKS["before_commit"] = race
    STORE.commits = 0
    targeted(task_id, defer=True)
    assert RUNS[f"{task_id}/1"] == 1
    assert state_of(task_id).state.checkpoint["n"] == 2
    # The refused park, the same park again on the new view (the reservation staged again),
    # then, the view being the whole session now, the other task's run: its park, carrying
    # its reservation (held too: it starts alone).
    assert STORE.commits == 3
    assert state_of(other).state.checkpoint["n"] == 2  # its value was kept and read


def test_a_held_reservation_is_dropped_when_the_task_was_taken_meanwhile() -> None:
    """While the phase runs, another worker reserves the same task (a redelivered wake): the
    held reservation cannot be staged again, so the phase's commit is refused (the run no
    longer holds the task) and only the other holder's run counts."""
    task_id = parked_looper()
    signal(task_id, "k0")

    async def taken(task: Any) -> None:
        async def other() -> None:
            h = harness()
            await h.open()
            # Reserve and hold the task as a live worker would (its lease is live).
            h._apply(lambda d: scheduler.reserve(h, d))

        await other()

    HOOKS["before_commit"] = taken
    targeted(task_id, defer=True)
    record = state_of(task_id)
    assert isinstance(record.state, Running)  # the other holder's reservation stands
    assert record.state.checkpoint["n"] == 1  # and this phase's park was never written


def test_a_long_phase_gets_its_reservation_committed_alone() -> None:
    task_id = parked_looper()
    signal(task_id, "k0")
    seen: list[str] = []

    async def slow(task: Any) -> None:
        await asyncio.sleep(0.2)
        seen.append(STORE.inner.get_task(SID, task.id).state.status)

    HOOKS["before_commit"] = slow
    STORE.commits = 0
    targeted(task_id, defer=True, flush_after=0.01)
    assert STORED == ["sleeping"] and seen == ["running"]  # held, then committed alone
    assert STORE.commits == 2
    assert state_of(task_id).state.checkpoint["n"] == 2


# --- the worker holds it on a wake's first delivery and attempt only ------------------------


class Alarms:
    def arm(self, session_id: str, at: float) -> bool:
        return False

    def disarm(self, session_id: str) -> None:
        pass


def worker_deps() -> Deps:
    return Deps(
        store=STORE,
        app=App(tasks=[Looper], signals=[ANSWER]),
        queue=Queue(),
        alarms=Alarms(),
        clock=CLOCK,
        ids=IDS,
        lease_seconds=LEASE,
    )


@pytest.mark.parametrize(
    ("receives", "held", "whole"), [("1", True, False), ("2", False, False), ("1", True, True)]
)
def test_the_worker_holds_it_on_a_first_delivery_only(
    receives: str, held: bool, whole: bool
) -> None:
    """A first delivery holds it, in a targeted pass or (``whole``: this process's first run
    of the session, bide.service.whole_runs) in a whole one; a redelivery reserves first."""
    task_id = parked_looper()
    deps = worker_deps()
    if not whole:
        warm = {"messageId": "w", "body": wake_body(SID, "submit"), "attributes": {}}
        done = asyncio.run(handle_worker(deps, {"Records": [warm]}, None))
        assert done["batchItemFailures"] == []
    signal(task_id, "k0")
    STORED.clear()
    body = wake_body(SID, "signal", task=task_id)
    record = {
        "messageId": "m1",
        "body": body,
        "attributes": {"MessageGroupId": SID, "ApproximateReceiveCount": receives},
    }
    assert asyncio.run(handle_worker(deps, {"Records": [record]}, None)) == {
        "batchItemFailures": []
    }
    assert ["sleeping" if held else "running"] == STORED
    assert state_of(task_id).state.checkpoint["n"] == 2
    assert json.loads(body)["task"] == task_id
