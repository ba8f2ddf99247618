"""A long-lived task stays flat: a key's slot leaves the record once consumed or expired.

The record of a task that waited N times must not grow with N (issue 12, goal 1), while
design 001's answers stay what they were: a consumed key refuses a second sleep, a second
copy of its value is ``duplicate`` with the first kept, a value for an expired key is
``closed``, ``read_signal`` still returns a consumed value, and a crash at the commit that
moves a slot loses nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from kit import ANSWER, HOUR, Kit, run
from pydantic import BaseModel

from bide import (
    Completed,
    Harness,
    InvalidPark,
    ManualClock,
    SignalResult,
    SignalValue,
    Sleeping,
    SQLiteStore,
    TaskRuntime,
    TaskView,
    Terminal,
    define_task,
    deliver_signal,
)
from bide.engine import slots
from bide.engine.host import host_commit
from bide.engine.mailbox import MAILBOX, envelope_key, mailbox_task, post
from bide.engine.records import TaskRecord
from bide.testing import Crash, FaultyStore
from bide.tools import Sleep, ToolRegistry, define_tool

D, DUP, CLOSED = SignalResult.DELIVERED, SignalResult.DUPLICATE, SignalResult.CLOSED


async def loop_phase(task: TaskView, rt: TaskRuntime) -> None:
    """Wait on ``k<n>`` for n = 0, 1, 2, ... (with a one-hour deadline when the input asks),
    reading what woke it first; ``{"reuse": m}`` in the input makes wait ``m`` try ``k0``
    again and record the refusal."""
    n = task.checkpoint["n"]
    reuse = task.input.get("reuse")
    if n == reuse:
        try:
            await rt.commit(
                Sleeping(checkpoint={"phase": "loop", "n": n}, signals=(ANSWER.key("k0"),))
            )
        except InvalidPark as refused:
            await rt.commit(Terminal(outcome=Completed(result={"refused": str(refused)})))
        return
    read, k = None, task.input.get("prefix", "k")
    if n:
        state = await rt.read_signal(ANSWER, f"{k}{n - 1}")
        read = state.value.text if isinstance(state, SignalValue) else repr(state)
    until = rt.now() + HOUR if task.input.get("deadline") else None
    await rt.commit(
        Sleeping(
            checkpoint={"phase": "loop", "n": n + 1, "read": read},
            signals=(ANSWER.key(f"{k}{n}"),),
            until=until,
        )
    )


LOOP = define_task("test.loop", 1, lambda _: {"phase": "loop", "n": 0}, {"loop": loop_phase})


async def looped(k: Kit, waits: int, **input: Any) -> str:
    """A LOOP task that completed ``waits`` waits and sleeps on ``k<waits>``."""
    await k.h.open()
    t = await k.h.create_task(LOOP, input)
    await k.h.run_until_parked()
    for i in range(waits):
        assert await k.h.signal(t, ANSWER, f"k{i}", {"text": f"v{i}"}) == D
        await k.h.run_until_parked()
    return t


def record_bytes(k: Kit, t: str) -> int:
    record = k.store.get_task("s1", t)
    assert record is not None and record.state.status == "sleeping", record
    return len(record.to_json().encode())


def test_a_task_record_does_not_grow_with_its_waits():
    async def go() -> tuple[int, int, TaskRecord]:
        small, large = Kit(LOOP), Kit(LOOP)
        a = await looped(small, 10)
        b = await looped(large, 2_000)
        return record_bytes(small, a), record_bytes(large, b), large.store.get_task("s1", b)

    small, large, record = run(go())
    # Only the digits of the key, the checkpoint and the revision differ (k9 vs k1999).
    assert large - small < 40, (small, large)
    assert record.signals == {}  # the consumed keys left; nothing is pending
    assert record.state.checkpoint == {"phase": "loop", "n": 2_001, "read": "v1999"}


def test_a_moved_key_still_answers_as_design_001_says():
    async def go() -> None:
        k = Kit(LOOP)
        t = await looped(k, 5, deadline=True)
        assert k.h.task(t).signals == {}
        # A second copy of a consumed value: duplicate, the first kept.
        assert await k.h.signal(t, ANSWER, "k1", {"text": "again"}) == DUP
        moved = slots.task_slots(k.h.task(t), k.h.list_docs(slots.task_prefix(t)))
        assert moved["test.answer/k1"].value == {"text": "v1"} and moved["test.answer/k1"].consumed
        # The same answers by the store-only path (a webhook, the signal function).
        decision = deliver_signal(k.store, "s1", t, ANSWER, "k2", {"text": "x"}, k.clock)
        assert decision.result == DUP
        # The sleep on k5 times out: k5 expires and moves; a late value is closed, for good.
        k.clock.advance(HOUR + 1)
        await k.h.run_until_parked()
        assert "test.answer/k5" not in k.h.task(t).signals
        assert await k.h.signal(t, ANSWER, "k5", {"text": "late"}) == CLOSED
        fresh = Kit(LOOP, store=k.store)  # another process, nothing cached
        await fresh.h.attach()
        assert await fresh.h.signal(t, ANSWER, "k5", {"text": "late"}) == CLOSED
        assert await fresh.h.signal(t, ANSWER, "k0", {"text": "late"}) == DUP
        assert k.h.task(t).state.checkpoint["read"] == "SignalExpired(expired=True)"

    run(go())


def test_a_second_wait_on_a_moved_key_is_refused():
    async def go() -> dict[str, Any]:
        k = Kit(LOOP)
        await k.h.open()
        t = await k.h.create_task(LOOP, {"reuse": 3})
        await k.h.run_until_parked()
        for i in range(3):
            assert await k.h.signal(t, ANSWER, f"k{i}", {"text": f"v{i}"}) == D
            await k.reopen()  # each wake by a new process: no cached documents
            await k.h.run_until_parked()
        outcome = k.h.outcome(t)
        assert outcome is not None and outcome.status == "completed", outcome
        return outcome.result

    result = run(go())
    assert "one key serves one wait" in result["refused"]


def test_read_signal_returns_a_consumed_value_after_a_restart():
    async def go() -> None:
        k = Kit(LOOP)
        t = await looped(k, 2)
        assert await k.h.signal(t, ANSWER, "k2", {"text": "v2"}) == D
        await k.reopen()  # the wake happens in a process that never saw k1 or k2 arrive
        await k.h.run_until_parked()
        assert k.h.task(t).state.checkpoint["read"] == "v2"

    run(go())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_the_commit_that_moves_a_slot_loses_nothing(when: str):
    """The reservation that consumes k1 writes the record and the slot's document together:
    dying before leaves k1 pending on the record (the next run wakes on it); dying after the
    write leaves both (the next run finds the task running and recovers it)."""

    def moves_k1(writes: Any) -> bool:
        return any(
            r.state.status == "running" and r.state.wake is not None and r.state.wake.key == "k1"
            for r in writes
        )

    async def go() -> None:
        inner = SQLiteStore()
        k = Kit(LOOP, store=inner)
        t = await looped(k, 1)
        faulty = FaultyStore(inner, match=moves_k1, when=when)  # type: ignore[arg-type]
        k.store = faulty
        h = await k.reopen()
        assert await h.signal(t, ANSWER, "k1", {"text": "v1"}) == D
        with pytest.raises(Crash):
            await h.run_until_parked()
        assert faulty.crashed
        record = inner.get_task("s1", t)
        doc = inner.get_doc("s1", slots.doc_key(t, "test.answer/k1"))
        if when == "before":
            assert record.signals["test.answer/k1"].has_value and doc is None
        else:
            assert "test.answer/k1" not in record.signals
            assert slots.from_body(doc.body).value == {"text": "v1"}
        k.store = inner
        h = await k.reopen()
        await h.run_until_parked()
        record = inner.get_task("s1", t)
        assert record.state.status == "sleeping" and record.state.checkpoint["n"] == 3
        assert record.state.checkpoint["read"] == "v1"
        assert record.signals == {}
        assert await h.signal(t, ANSWER, "k1", {"text": "again"}) == DUP

    run(go())


def test_a_stream_keeps_its_mark_and_skips_members_taken_directly():
    async def go() -> None:
        k = Kit(LOOP)
        t = await looped(k, 0)
        # k0 is slept on; values to the stream "s.*" go to s.0, s.1, ...
        assert await k.h.signal(t, ANSWER, "s.*", {"text": "a"}) == D
        assert await k.h.signal(t, ANSWER, "s.2", {"text": "direct"}) == D
        assert await k.h.signal(t, ANSWER, "s.*", {"text": "b"}) == D
        assert await k.h.signal(t, ANSWER, "s.*", {"text": "c"}) == D
        record = k.h.task(t)
        texts = {n: s.value["text"] for n, s in record.signals.items()}
        assert texts == {
            "test.answer/s.0": "a",
            "test.answer/s.1": "b",
            "test.answer/s.2": "direct",
            "test.answer/s.3": "c",
        }
        assert record.streams == {"test.answer/s": 4}

    run(go())


def test_a_mailbox_reader_keeps_no_value_per_envelope():
    seen: list[int] = []
    kind = mailbox_task("test.reader", "box", lambda _tx, env: seen.append(env["seq"]))

    async def go() -> None:
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        sizes = []
        for _batch in range(40):
            # Several envelopes arrive before the reader runs: it reads them in one pass.
            for _ in range(5):
                host_commit(k.h, lambda tx: post(tx, "box", {"n": 1}, ping=t))
            await k.h.run_until_parked()
            sizes.append(len(k.store.get_task("s1", t).to_json()))
        record = k.store.get_task("s1", t)
        assert record.signals == {}, sorted(record.signals)
        assert max(sizes[5:]) - min(sizes[5:]) < 10, sizes
        assert sorted(set(seen)) == list(range(200))
        assert k.h.get_doc(envelope_key("box", 199)) is not None
        # An envelope's key that a pass consumed refuses a second value like a woken key.
        assert await k.h.signal(t, MAILBOX, "box#3", {"mailbox": "box", "seq": 3}) == DUP

    run(go())


def test_store_only_delivery_reads_no_document_for_the_key_the_task_sleeps_on():
    """The slot of a key the task sleeps on cannot have moved: no document read is needed."""

    class Counting(SQLiteStore):
        reads = 0

        def get_doc(self, session_id: str, key: str) -> Any:
            type(self).reads += 1
            return super().get_doc(session_id, key)

    async def go() -> None:
        k = Kit(LOOP, store=Counting())
        t = await looped(k, 3)
        Counting.reads = 0
        clock = ManualClock()
        assert deliver_signal(k.store, "s1", t, ANSWER, "k3", {"text": "v"}, clock).result == D
        assert Counting.reads == 0
        assert deliver_signal(k.store, "s1", t, ANSWER, "k9", {"text": "v"}, clock).result == D
        assert Counting.reads == 1  # an early value: its key may have been used before

    run(go())


def test_a_stream_delivery_reads_no_document_however_many_members_were_consumed():
    """The stream's mark skips the members that moved: no read per earlier member."""

    class Counting(SQLiteStore):
        reads = 0

        def get_doc(self, session_id: str, key: str) -> Any:
            type(self).reads += 1
            return super().get_doc(session_id, key)

    async def go() -> None:
        k = Kit(LOOP, store=Counting())
        await k.h.open()
        t = await k.h.create_task(LOOP, {"prefix": "s."})
        await k.h.run_until_parked()
        for i in range(30):
            Counting.reads = 0
            decision = deliver_signal(k.store, "s1", t, ANSWER, "s.*", {"text": f"v{i}"}, k.clock)
            assert decision.result == D and Counting.reads == 0, (i, Counting.reads)
            await k.reopen()
            await k.h.run_until_parked()
            assert k.h.task(t).state.checkpoint["read"] == f"v{i}"
        assert k.h.task(t).streams == {"test.answer/s": 30}

    run(go())


def test_on_the_dynamodb_store_the_record_stays_small_and_nothing_goes_to_s3():
    """The same loop on the DynamoDB store (moto, with an S3 offload bucket): the record does
    not grow, no wait writes an S3 object, and a moved key answers as on SQLite."""
    from aws_fixtures import moto_bench

    async def go(store: Any) -> tuple[int, int]:
        small, large = Kit(LOOP, store=store), Kit(LOOP, store=store)
        small.h = Harness(store, "s-small", [LOOP], clock=small.clock, ids=small.ids)
        large.h = Harness(store, "s-large", [LOOP], clock=large.clock, ids=large.ids)
        a = await looped(small, 10)
        b = await looped(large, 300)
        assert await large.h.signal(b, ANSWER, "k7", {"text": "again"}) == DUP
        ra, rb = store.get_task("s-small", a), store.get_task("s-large", b)
        assert rb.signals == {}
        return len(ra.to_json().encode()), len(rb.to_json().encode())

    with moto_bench() as bench:
        small, large = run(go(bench.store()))
        objects = bench.s3.list_objects_v2(Bucket=bench.bucket).get("KeyCount", 0)
    assert large - small < 20, (small, large)
    assert objects == 0


class NoArgs(BaseModel):
    pass


async def park_in_turn(args: NoArgs, api: Any) -> Any:
    """A tool that parks on ``k<n>`` for n = 0, 1, 2, ..., reading what woke it."""
    n = api.checkpoint or 0
    if n:
        state = await api.read_signal(ANSWER, f"k{n - 1}")
        assert isinstance(state, SignalValue) and state.value.text == f"v{n - 1}", state
    return Sleep(checkpoint=n + 1, signals=[ANSWER.key(f"k{n}")])


TOOLS = ToolRegistry([define_tool("park_in_turn", "Park again and again", NoArgs, park_in_turn)])


def test_a_tool_call_that_parks_again_and_again_stays_flat_too():
    async def go(waits: int) -> int:
        k = Kit(TOOLS.task)
        await k.h.open()
        t = await k.h.create_task(TOOLS.task, TOOLS.call("park_in_turn", {}))
        await k.h.run_until_parked()
        for i in range(waits):
            assert await k.h.signal(t, ANSWER, f"k{i}", {"text": f"v{i}"}) == D
            await k.h.run_until_parked()
        assert await k.h.signal(t, ANSWER, "k0", {"text": "again"}) == DUP
        return record_bytes(k, t)

    small, large = run(go(10)), run(go(500))
    assert large - small < 10, (small, large)


def test_a_key_too_long_for_a_document_key_moves_under_its_hash():
    long_key = "k" * 1_500  # the slot name alone is past the store's 1,022-byte document key

    async def phase(task: TaskView, rt: TaskRuntime) -> None:
        if task.wake is None:
            await rt.commit(Sleeping(checkpoint="woke", signals=(ANSWER.key(long_key),)))
            return
        state = await rt.read_signal(ANSWER, long_key)
        again = None
        try:
            await rt.commit(Sleeping(checkpoint="woke", signals=(ANSWER.key(long_key),)))
        except InvalidPark as refused:
            again = "one key serves one wait" in str(refused)
        await rt.commit(Terminal(outcome=Completed(result=[state.value.text, again])))

    kind = define_task("test.long", 1, lambda _: "sleep", {"sleep": phase, "woke": phase})

    async def go() -> None:
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        assert await k.h.signal(t, ANSWER, long_key, {"text": "v"}) == D
        await k.reopen()
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == ["v", True]
        name = ANSWER.key(long_key).slot
        key = slots.doc_key(t, name)
        assert len(key.encode()) < 200 and k.store.get_doc("s1", key).body["slot"] == name

    run(go())
