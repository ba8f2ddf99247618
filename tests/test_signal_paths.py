"""``Harness.signal``/``deliver`` and ``deliver_signal`` are one path.

The same table of cases runs through a loaded harness and through the store-only delivery a
webhook handler makes, each on its own fresh store set up identically. Every case states the
results it expects, and both paths must give exactly those results, the same ``invalid``
field errors, and leave the same stored task records. Stream keys (``<prefix>.*``, what a
workflow webhook delivers to) are in the table like any other key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from kit import ANSWER, SLEEPER, Kit, run

from bide import (
    Completed,
    SignalDecision,
    SignalResult,
    Sleeping,
    TaskRuntime,
    TaskView,
    Terminal,
    define_task,
    deliver_signal,
)

D, DUP, INV, CLOSED, NF = (
    SignalResult.DELIVERED,
    SignalResult.DUPLICATE,
    SignalResult.INVALID,
    SignalResult.CLOSED,
    SignalResult.NOT_FOUND,
)
OK = {"text": "hi"}
BAD = {"text": 3}


async def _first_sleep(task: TaskView, rt: TaskRuntime) -> None:
    keys = tuple(ANSWER.key(k) for k in task.input["keys"])
    await rt.commit(Sleeping(checkpoint="again", signals=keys, until=rt.now() + 60))


async def _second_sleep(task: TaskView, rt: TaskRuntime) -> None:
    # Still live after the first sleep expired: its expired keys stay on the record.
    await rt.commit(Sleeping(checkpoint="done", signals=(ANSWER.key("next"),)))


async def _done(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(Terminal(outcome=Completed()))


RESLEEPER = define_task(
    "test.resleeper",
    1,
    lambda _input: "sleep",
    {"sleep": _first_sleep, "again": _second_sleep, "done": _done},
)


# --- setups: each builds the session and names its tasks ---------------------------------------

Setup = Callable[[Kit], Awaitable[dict[str, str]]]


async def sleeping(k: Kit, keys: list[str], seconds: float | None = None) -> str:
    t = await k.h.create_task(SLEEPER, {"keys": keys, "for": seconds})
    await k.h.run_until_parked()
    return t


async def on_a(k: Kit) -> dict[str, str]:
    return {"t": await sleeping(k, ["a"])}


async def a_holds_a_value(k: Kit) -> dict[str, str]:
    t = await sleeping(k, ["a", "b"])
    await k.h.signal(t, ANSWER, "b", {"text": "first"})  # early, on a key not yet woken on
    await k.h.signal(t, ANSWER, "z", {"text": "early"})  # a key nobody sleeps on
    return {"t": t}


async def ended(k: Kit) -> dict[str, str]:
    t = await sleeping(k, ["a"])
    await k.h.signal(t, ANSWER, "a", OK)
    await k.h.run_until_parked()
    return {"t": t}


async def abort_marked(k: Kit) -> dict[str, str]:
    t = await sleeping(k, ["a"])
    await k.h.abort(t, "stop")
    return {"t": t}


async def deadline_passed(k: Kit) -> dict[str, str]:
    t = await sleeping(k, ["a", "s.0"], 60)
    k.clock.advance(60)  # the deadline passed; no worker has woken the task yet
    return {"t": t}


async def keys_expired(k: Kit) -> dict[str, str]:
    t = await k.h.create_task(RESLEEPER, {"keys": ["a", "s.0"]})
    await k.h.run_until_parked()
    k.clock.advance(60)
    await k.h.run_until_parked()  # woke expired; sleeps again on "next", still live
    return {"t": t}


async def stream_partly_used(k: Kit) -> dict[str, str]:
    t = await sleeping(k, ["s.0"])
    await k.h.signal(t, ANSWER, "s.0", {"text": "zero"})
    await k.h.run_until_parked()  # s.0 woke the task (consumed): the task ended
    other = await sleeping(k, ["x"])
    await k.h.signal(other, ANSWER, "s.0", {"text": "zero"})
    await k.h.signal(other, ANSWER, "s.1", {"text": "one"})
    return {"t": other}


@dataclass(frozen=True)
class Case:
    setup: Setup
    sends: tuple[tuple[str, str, object], ...]  # (task name or raw id, key, value)
    expect: tuple[SignalResult, ...]


CASES = {
    "not_found": Case(on_a, (("t-missing", "a", OK),), (NF,)),
    "not_found stream": Case(on_a, (("t-missing", "s.*", OK),), (NF,)),
    "delivered": Case(on_a, (("t", "a", OK),), (D,)),
    "delivered early on an unlisted key": Case(on_a, (("t", "later", OK),), (D,)),
    "duplicate": Case(a_holds_a_value, (("t", "b", OK), ("t", "z", OK)), (DUP, DUP)),
    "delivered then duplicate": Case(on_a, (("t", "a", OK), ("t", "a", OK)), (D, DUP)),
    "invalid": Case(on_a, (("t", "a", BAD), ("t", "a", OK)), (INV, D)),
    "invalid before duplicate": Case(a_holds_a_value, (("t", "b", BAD),), (INV,)),
    "invalid stream": Case(on_a, (("t", "s.*", BAD),), (INV,)),
    "closed: ended": Case(ended, (("t", "a", OK), ("t", "new", OK)), (CLOSED, CLOSED)),
    "closed: ended, before invalid": Case(ended, (("t", "a", BAD),), (CLOSED,)),
    "closed: ended stream": Case(ended, (("t", "s.*", OK),), (CLOSED,)),
    "closed: abort-marked": Case(abort_marked, (("t", "a", OK),), (CLOSED,)),
    "closed: abort-marked stream": Case(abort_marked, (("t", "s.*", OK),), (CLOSED,)),
    "closed: deadline passed": Case(
        deadline_passed, (("t", "a", OK), ("t", "a", OK)), (CLOSED,) * 2
    ),
    "expired key": Case(keys_expired, (("t", "a", OK), ("t", "next", OK)), (CLOSED, D)),
    "explicit expired stream member": Case(keys_expired, (("t", "s.0", OK),), (CLOSED,)),
    "stream": Case(on_a, (("t", "s.*", OK),) * 3, (D, D, D)),
    "stream skips used members": Case(stream_partly_used, (("t", "s.*", OK),) * 2, (D, D)),
    "stream skips a member past its deadline": Case(deadline_passed, (("t", "s.*", OK),), (D,)),
    "stream skips an expired member": Case(keys_expired, (("t", "s.*", OK),), (D,)),
    "stream, then its member": Case(on_a, (("t", "s.*", OK), ("t", "s.0", OK)), (D, DUP)),
    "member, then the stream": Case(on_a, (("t", "s.0", OK), ("t", "s.*", OK)), (D, D)),
}


async def through_harness(k: Kit, task: str, key: str, value: object) -> SignalDecision:
    return await k.h.deliver(task, ANSWER, key, value)


async def through_store(k: Kit, task: str, key: str, value: object) -> SignalDecision:
    return deliver_signal(k.store, "s1", task, ANSWER, key, value, k.clock)


async def play(case: Case, send: Callable[..., Awaitable[SignalDecision]]) -> tuple[list, dict]:
    k = Kit(SLEEPER, RESLEEPER)
    await k.h.open()
    names = await case.setup(k)
    decisions = []
    for who, key, value in case.sends:
        decision = await send(k, names.get(who, who), key, value)
        decisions.append((decision.result, decision.errors))
    stored = {n: k.store.get_task("s1", t).to_dict() for n, t in names.items()}
    return decisions, stored


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_harness_and_store_delivery_decide_alike(case: Case):
    async def go():
        by_harness = await play(case, through_harness)
        by_store = await play(case, through_store)
        assert [result for result, _ in by_harness[0]] == list(case.expect)
        assert by_store == by_harness

    run(go())


def test_the_stream_fills_members_in_order_on_either_path():
    """Not only the same: the stream really lands on ``s.0``, ``s.1``, ``s.2``."""

    async def go():
        for send in (through_harness, through_store):
            _, stored = await play(CASES["stream"], send)
            slots = stored["t"]["signals"]
            assert sorted(slots) == ["test.answer/s.0", "test.answer/s.1", "test.answer/s.2"]
            _, stored = await play(CASES["stream skips a member past its deadline"], send)
            slots = stored["t"]["signals"]
            assert slots["test.answer/s.1"]["has_value"]
            assert "test.answer/s.0" not in slots  # not marked: nobody was told "closed"

    run(go())


def test_a_sleep_on_a_stream_key_itself_is_refused():
    async def stream_sleeper(task: TaskView, rt: TaskRuntime) -> None:
        await rt.commit(Sleeping(checkpoint="x", signals=(ANSWER.key("s.*"),)))

    kind = define_task("test.stream-sleeper", 1, lambda _input: "go", {"go": stream_sleeper})

    async def go():
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        outcome = k.h.outcome(t)
        assert outcome is not None and outcome.status == "faulted"
        assert "'s.*' names a stream" in str(outcome.error)
        assert "'s.0'" in str(outcome.error)

    run(go())
