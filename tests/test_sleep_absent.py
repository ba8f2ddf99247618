"""A sleep on a key that is not on its task's record reads nothing: its commit requires the
key's document absent (``absent`` of ``Store.commit``), and a key consumed or expired earlier
(its slot moved to that document, :mod:`bide.engine.slots`) still refuses the sleep with the
same :class:`~bide.InvalidPark` as a read first would give. On SQLite, DynamoDB on moto and on
DynamoDB Local."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("aws_fixtures")

from aws_fixtures import BENCHES  # noqa: E402
from kit import ANSWER, HOUR, run  # noqa: E402

from bide import (  # noqa: E402
    Completed,
    Harness,
    InvalidPark,
    ManualClock,
    SequentialIds,
    SignalResult,
    Sleeping,
    SQLiteStore,
    Store,
    TaskRuntime,
    TaskView,
    Terminal,
    define_task,
)
from bide.engine import slots  # noqa: E402
from bide.engine.errors import DocumentExists  # noqa: E402
from bide.engine.store import StoreWrapper  # noqa: E402
from bide.engine.store.base import MAX_COMMIT_ITEMS  # noqa: E402


async def step(task: TaskView, rt: TaskRuntime) -> None:
    """Sleep on the input's keys in turn (each with a deadline an hour on); once past them,
    sleep on ``again`` and complete with the refusal's text (or ``None``: not refused)."""
    n, keys = task.checkpoint["n"], task.input["keys"]
    if n < len(keys):
        await rt.commit(
            Sleeping(
                checkpoint={"phase": "step", "n": n + 1},
                signals=tuple(ANSWER.key(k) for k in keys[n]),
                until=rt.now() + HOUR,
            )
        )
        return
    try:
        again = tuple(ANSWER.key(k) for k in task.input["again"])
        await rt.commit(Sleeping(checkpoint={"phase": "step", "n": n + 1}, signals=again))
    except InvalidPark as refused:
        await rt.commit(Terminal(outcome=Completed(result=str(refused))))
        return
    await rt.commit(Terminal(outcome=Completed(result=None)))


STEPS = define_task("test.steps", 1, lambda _: {"phase": "step", "n": 0}, {"step": step})


class Watch(StoreWrapper):
    """Notes the keys each commit required absent, the refusals, and every document read."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.required: list[list[str]] = []
        self.refused: list[dict[str, Any]] = []
        self.read: list[str] = []

    def commit(
        self, session_id: str, expected_seq: int, writes: Any, docs: Any = (), *, absent: Any = ()
    ) -> int:
        self.required.append(list(absent))
        try:
            return super().commit(session_id, expected_seq, writes, docs, absent=absent)
        except DocumentExists as exc:
            self.refused.append(exc.found)
            raise

    def get_doc(self, session_id: str, key: str) -> Any:
        self.read.append(key)
        return super().get_doc(session_id, key)


@pytest.fixture(params=["sqlite", *BENCHES])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "sqlite":
        yield SQLiteStore()
        return
    with BENCHES[request.param]() as bench:
        yield bench.store()


class Session:
    """A STEPS task on ``store`` (watched), each run by a fresh harness: a new process, with
    no document known beforehand, as a worker is."""

    def __init__(self, store: Store) -> None:
        self.store = Watch(store)
        self.sid = f"s-{uuid.uuid4().hex[:10]}"
        self.clock, self.ids = ManualClock(), SequentialIds()
        self.task = ""

    def harness(self) -> Harness:
        return Harness(self.store, self.sid, [STEPS], clock=self.clock, ids=self.ids)

    async def start(self, **input: Any) -> None:
        h = self.harness()
        await h.open()
        self.task = await h.create_task(STEPS, input)
        await h.run_until_parked()

    async def signal(self, key: str) -> None:
        h = self.harness()
        await h.open()
        assert await h.signal(self.task, ANSWER, key, {"text": key}) == SignalResult.DELIVERED

    async def run(self) -> Any:
        """One worker run; the task's outcome, if it ended."""
        h = self.harness()
        await h.open()
        await h.run_until_parked()
        return h.outcome(self.task)

    def doc(self, key: str) -> str:
        return slots.doc_key(self.task, ANSWER.key(key).slot)


def test_a_sleep_on_a_consumed_key_is_refused_from_the_commit(store: Store) -> None:
    s = Session(store)

    async def go() -> Any:
        await s.start(keys=[["k0"], ["k1"]], again=["k0"])
        await s.signal("k0")
        assert await s.run() is None  # k0 consumed and moved; asleep on k1
        await s.signal("k1")
        return await s.run()  # wakes on k1, then sleeps on k0 again: refused

    outcome = run(go())
    k0 = s.doc("k0")
    assert outcome is not None and outcome.result == (
        f"task {s.task!r}: key 'test.answer/k0' already woke this task; "
        "one key serves one wait, use a new key"
    )
    # The refusal came from the commit's condition, not from a read of the document.
    assert any(k0 in required for required in s.store.required)
    assert [list(found) for found in s.store.refused] == [[k0]]
    assert s.store.refused[0][k0]["consumed"] is True
    assert k0 not in s.store.read
    record = s.store.get_task(s.sid, s.task)
    assert record is not None and "test.answer/k0" not in record.signals  # still moved


def test_a_sleep_on_an_expired_key_is_refused_from_the_commit(store: Store) -> None:
    s = Session(store)

    async def go() -> Any:
        await s.start(keys=[["k0"], ["k1"]], again=["k1", "k0"])
        s.clock.advance(HOUR + 1)
        assert await s.run() is None  # k0 expired and moved; asleep on k1
        await s.signal("k1")
        return await s.run()

    outcome = run(go())
    assert outcome is not None and outcome.result == (
        f"task {s.task!r}: key 'test.answer/k1' already woke this task; "
        "one key serves one wait, use a new key"
    )  # k1 is on the record (consumed by this very wake): checked from the record
    s2 = Session(store)

    async def go2() -> Any:
        await s2.start(keys=[["k0"], ["k1"]], again=["k2", "k0"])
        s2.clock.advance(HOUR + 1)
        await s2.run()
        await s2.signal("k1")
        return await s2.run()

    outcome = run(go2())
    assert outcome is not None and outcome.result == (
        f"task {s2.task!r}: key 'test.answer/k0' expired at an earlier deadline; use a new key"
    )
    assert [list(found) for found in s2.store.refused] == [[s2.doc("k0")]]
    assert s2.doc("k0") not in s2.store.read


def test_a_sleep_on_fresh_keys_reads_nothing_and_lands(store: Store) -> None:
    s = Session(store)

    async def go() -> Any:
        await s.start(keys=[["k0"], ["a", "b", "c"]], again=["z"])
        await s.signal("k0")
        return await s.run()

    assert run(go()) is None  # asleep on a, b, c
    fresh = {s.doc(k) for k in ("a", "b", "c")}
    assert fresh <= {k for required in s.store.required for k in required}
    assert not fresh & set(s.store.read) and s.store.refused == []


def test_more_keys_than_a_commit_can_check_are_read_instead() -> None:
    s = Session(SQLiteStore())
    many = [f"m{i}" for i in range(MAX_COMMIT_ITEMS)]

    async def go() -> Any:
        await s.start(keys=[["k0"], many], again=["k0"])
        await s.signal("k0")
        return await s.run()

    assert run(go()) is None  # asleep on all of them
    assert {s.doc(k) for k in many} <= set(s.store.read)
    assert all(len(required) + 1 <= MAX_COMMIT_ITEMS for required in s.store.required)
