"""The one read-decide-commit loop of ``deliver_signal`` and ``deliver_beat``
(bide.engine.delivery): given ``at_head`` (the head and the task the IAM route already read),
the first attempt decides on it without reading; a commit that lands in between makes the
store refuse, and the next attempt reads afresh; a session too busy for every attempt raises
``ConflictError`` with nothing written. The reads and commits are counted with a store
wrapper."""

from __future__ import annotations

from typing import Any

import pytest
from kit import ANSWER, Kit, run

from bide import (
    Completed,
    ConflictError,
    SignalResult,
    Sleeping,
    TaskRuntime,
    TaskView,
    Terminal,
    define_task,
    deliver_beat,
    deliver_signal,
)
from bide.engine.records import TaskRecord
from bide.engine.store import Store, StoreWrapper

BEAT = 30.0


class Counted(StoreWrapper):
    """Counts the task reads at the head and the commits (and how many of those conflicted)."""

    def __init__(self, inner: Store, *, refuse: bool = False) -> None:
        super().__init__(inner)
        self.refuse = refuse  # every commit conflicts, as in a session too busy to write
        self.reads = self.commits = self.conflicts = 0

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        self.reads += 1
        return self.inner.task_at_head(session_id, task_id)

    def commit(self, session_id: str, expected_seq: int, *rest: Any, **kw: Any) -> int:
        self.commits += 1
        try:
            if self.refuse:
                raise ConflictError(session_id, expected_seq, self.inner.head(session_id))
            return self.inner.commit(session_id, expected_seq, *rest, **kw)
        except ConflictError:
            self.conflicts += 1
            raise


async def _sleep(task: TaskView, rt: TaskRuntime) -> None:
    keys = tuple(ANSWER.key(k) for k in ("a", "b"))
    await rt.commit(Sleeping(checkpoint="woke", signals=keys, heartbeat=BEAT))


async def _woke(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(Terminal(outcome=Completed(result=None)))


NAPPER = define_task("test.at-head-napper", 1, lambda _: "sleep", {"sleep": _sleep, "woke": _woke})


async def parked() -> tuple[Kit, str]:
    k = Kit(NAPPER)
    await k.h.open()
    t = await k.h.create_task(NAPPER, {})
    await k.h.run_until_parked()
    return k, t


def send(kind: str, store: Store, t: str, k: Kit, **kw) -> SignalResult:
    if kind == "value":
        return deliver_signal(store, "s1", t, ANSWER, "a", {"text": "hi"}, k.clock, **kw).result
    return deliver_beat(store, "s1", t, ANSWER.name, "a", k.clock, **kw).result


@pytest.mark.parametrize("kind", ["value", "beat"])
def test_a_current_at_head_is_decided_on_without_reading(kind: str) -> None:
    async def go():
        k, t = await parked()
        k.clock.advance(10)
        store = Counted(k.store)
        seq = k.store.head("s1")
        assert send(kind, store, t, k, at_head=k.store.task_at_head("s1", t)) == "delivered"
        assert (store.reads, store.commits, store.conflicts) == (0, 1, 0)
        assert k.store.head("s1") == seq + 1

    run(go())


@pytest.mark.parametrize("kind", ["value", "beat"])
def test_a_stale_at_head_conflicts_once_then_the_delivery_reads_afresh(kind: str) -> None:
    async def go():
        k, t = await parked()
        k.clock.advance(10)
        stale = k.store.task_at_head("s1", t)
        # A commit lands after the route's read: a beat on the other key moves the head.
        assert deliver_beat(k.store, "s1", t, ANSWER.name, "b", k.clock).result == "delivered"
        store = Counted(k.store)
        assert send(kind, store, t, k, at_head=stale) == "delivered"
        assert (store.reads, store.commits, store.conflicts) == (1, 2, 1)
        assert k.store.head("s1") == stale[0] + 2
        record = k.store.get_task("s1", t)
        assert record is not None and isinstance(record.state, Sleeping)
        if kind == "value":
            assert record.signals[ANSWER.key("a").slot].has_value
        else:
            assert record.state.beat_by == k.clock.now() + BEAT

    run(go())


@pytest.mark.parametrize("kind", ["value", "beat"])
def test_a_session_busy_for_every_attempt_raises_and_writes_nothing(kind: str) -> None:
    async def go():
        k, t = await parked()
        k.clock.advance(10)
        before, seq = k.store.get_task("s1", t), k.store.head("s1")
        store = Counted(k.store, refuse=True)
        with pytest.raises(ConflictError):
            send(kind, store, t, k, at_head=k.store.task_at_head("s1", t))
        assert store.commits == store.conflicts == 16  # delivery._ATTEMPTS
        assert store.reads == 15  # the first attempt decided on at_head
        assert k.store.head("s1") == seq and k.store.get_task("s1", t) == before

    run(go())
