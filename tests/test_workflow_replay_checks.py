"""What a replay checks as it passes recorded operations, kept through its fast paths: the
canonical JSON behind each operation's argument digest writes what ``json.dumps`` writes
(so digests recorded by earlier versions still match), a wait's digest written directly is
that of its arguments, a long body replays from its sealed pages with progress silent until
it passes its history, and a changed argument of a wait deep in that history is still
non-determinism."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit import ANSWER, run
from test_workflow_support import Note, Tools

from bide.workflow import define_workflow_tool
from bide.workflow.ops.base import canonical_json, digest_of


class Odd:
    """Not JSON: the digest writes its type's name."""


class Text(str):
    """A str subclass: the encoder writes it as a string."""


class Number(enum.IntEnum):
    ONE = 1


VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -7,
    10**30,
    1.0,
    -0.0,
    2.5e-300,
    1e300,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "plain",
    'é\u2028\U0001f600\n"\\\x7f',
    "\ud800",
    [],
    {},
    (1, "a"),
    [1, [2, [3, {"z": None, "a": [True]}]]],
    {"signal": "answer", "key": "k1", "timeout": None},
    {"signal": "answer", "key": 'k\u00e9"\\\n', "timeout": 1e16, "heartbeat": 2},
    {"b": 1, "a": 2, "é": 3, "A": {"y": Odd(), "x": [Odd()]}},
    {"t": True, "f": False, "n": -0.0, "i": -(10**20), "s": ""},
    {"nan": float("nan"), "inf": float("-inf")},
    {"sub": Text("x"), Text("k"): 1},
    {"enum": Number.ONE, "odd": Odd()},
    {2: "a", 1: "b"},
    {2.5: "a", 1.5: "b"},
    {"nested": {"b": 1, "a": 2}},
    Odd(),
]


def _dumps(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), default=lambda o: type(o).__qualname__
    )


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_canonical_json_writes_what_json_dumps_writes(value):
    assert canonical_json(value) == _dumps(value)


plain = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)


@given(st.dictionaries(st.text(), plain, max_size=6))
def test_a_flat_object_of_plain_values_is_written_as_json_dumps_writes_it(value):
    assert canonical_json(value) == _dumps(value)


def test_canonical_json_refuses_what_json_dumps_refuses():
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        canonical_json(looped)
    with pytest.raises(TypeError):
        canonical_json({1: "a", "1": "b"})  # keys that do not sort
    # A refused value leaves nothing behind: the next digest is the usual one.
    assert canonical_json([1, {"a": 1}]) == '[1,{"a":1}]'


def test_digests_stay_what_earlier_versions_recorded():
    # Digests the version before these fast paths computed (recorded in histories that
    # still replay).
    assert digest_of({"signal": "tick", "key": "k1", "timeout": None}) == (
        "1e74e3b4090a6c2165a7f0df99de661d"
    )
    assert digest_of({"seconds": 3600.0, "until": None}) == "141fb12398bac0183da91a1c7aee09b4"
    assert digest_of([1, 2.5, {"b": "é", "a": None}, True]) == "85ee3f10d1e59675559a75d84a852031"


class _Ctx:
    """Just what creating an operation needs (its sequence number)."""

    def __init__(self) -> None:
        self.seq = 0

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq


def test_a_wait_digest_is_that_of_its_arguments():
    from bide.workflow.ops.waits import WaitForOp

    ctx = _Ctx()
    # Equal as Python numbers, other arguments as JSON: no digest may stand for another.
    timeouts = [None, 0, 0.0, -0.0, 1, 1.0, 60, 60.0, 1e16, 10**16, float("inf"), True, 1.5]
    timeouts += [float("nan"), Number.ONE, 10**40]
    beats = [None, 1, 1.0, 30.0]
    keys = ["k1", 'k\u00e9"\\', Text("k1")]
    for key in keys:
        for t in timeouts:
            for b in beats:
                op = WaitForOp(ctx, ANSWER, key, t, b)
                assert op.digest() == digest_of(op.arguments()), (key, t, b)
    # Pinned: what the version before wrote for the usual wait and one with a heartbeat.
    assert WaitForOp(ctx, ANSWER, "k9", 60.0).digest() == "d2424d6986c2efc954e0b51199872672"
    assert WaitForOp(ctx, ANSWER, "k9", 30, 5).digest() == "b5d30df4a608854069729a749ef63cb6"


@pytest.mark.parametrize("key", ["", None, 7])
def test_a_wait_on_a_key_that_is_not_a_non_empty_string_is_refused_when_created(key):
    from bide.engine.errors import DefinitionError
    from bide.workflow.ops.waits import WaitForOp

    with pytest.raises(DefinitionError, match="a key must be a non-empty string"):
        WaitForOp(_Ctx(), ANSWER, key, None)


WAITS = 150  # past a few sealed pages of memos (two memos per wait)


def _long_waiter(version: dict[str, int], changed_at: int):
    async def body(args, ctx):
        got = []
        for i in range(WAITS + 1):
            ctx.progress(i)
            timeout = 60.0 if version["v"] == 2 and i == changed_at else None
            got.append((await ctx.wait_for(ANSWER, f"k{i}", timeout=timeout)).text)
        return ",".join(got[-2:])

    return body


def _waited(version: dict[str, int], changed_at: int):
    """A body that waited on k0..k(WAITS-1) and is parked on k(WAITS), on a fresh harness
    (its resolved waits sealed in pages)."""

    async def go():
        tool = define_workflow_tool("w", "", Note, _long_waiter(version, changed_at))
        t = await Tools(tool).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        for i in range(WAITS):
            assert await t.h.signal(call, ANSWER, f"k{i}", ANSWER.schema(text=f"v{i}")) == (
                "delivered"
            )
            await t.h.run_until_parked()
        assert t.status(call) == "sleeping"
        assert t.h.task(call).memo_pages > 0  # the history is in pages, not on the record
        await t.reopen()
        return t, call

    return go()


def test_a_long_body_replays_from_its_pages_silently_to_its_next_wait():
    version = {"v": 1}

    async def go():
        t, call = await _waited(version, changed_at=-1)
        seen: list[Any] = []
        t.h.services["workflow_progress"] = lambda task_id, value: seen.append(value)
        last = ANSWER.schema(text="last")
        assert await t.h.signal(call, ANSWER, f"k{WAITS}", last) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).text == f"v{WAITS - 1},last"
        assert seen == []  # every ctx.progress came in the replay: none is reported again

    run(go())


@pytest.mark.parametrize("changed_at", [0, 97, WAITS - 1])
def test_a_changed_timeout_deep_in_a_sealed_history_is_non_determinism(changed_at):
    version = {"v": 1}

    async def go():
        t, call = await _waited(version, changed_at)
        version["v"] = 2
        last = ANSWER.schema(text="last")
        assert await t.h.signal(call, ANSWER, f"k{WAITS}", last) == "delivered"
        await t.h.run_until_parked()
        result = t.result(call)
        assert result.is_error
        assert f"non-determinism at operation {changed_at + 1}" in result.text
        assert result.details["nondeterminism"]["reason"] == "arguments"

    run(go())


def test_history_is_found_on_the_record_first_then_in_the_pages():
    from types import SimpleNamespace

    from bide.engine.records import TaskRecord
    from bide.engine.state import Pending
    from bide.workflow.history import has_history

    def rt(memos: dict[str, Any], pages: int, sealed: dict[str, Any]):
        state = Pending(checkpoint="p")
        record = TaskRecord(
            id="t",
            session_id="s",
            kind="k",
            version=1,
            memos=memos,
            memo_pages=pages,
            state=state,
            created_at=0.0,
        )

        def every() -> dict[str, Any]:
            return {**sealed, **record.memos}

        harness = SimpleNamespace(_live={"t": record})
        return SimpleNamespace(_h=harness, task_id="t", recorded_memos=every)

    assert has_history(rt({"wf.9": {}}, 1, {}))  # the newest memos: no page read
    # Only other memos on the record (a task's own, after its history was sealed).
    assert has_history(rt({"bide.message.0": "x"}, 1, {"wf.1": {}}))
    assert not has_history(rt({"bide.message.0": "x"}, 1, {"bide.other": 1}))
    assert not has_history(rt({}, 0, {"wf.1": {}}))  # no page counted: none is read


class Sneaky(str):
    """A str whose text is not what it compares equal to: no cache key may trust it."""

    def __eq__(self, other: object) -> bool:
        return other == "k1" or str.__eq__(self, other)

    def __hash__(self) -> int:
        return hash("k1")


def test_a_wait_digest_from_the_process_cache_is_that_of_its_own_arguments(monkeypatch):
    from bide.workflow.ops import base
    from bide.workflow.ops.waits import WaitForOp

    cache = base.DigestCache(max_entries=3)
    monkeypatch.setattr("bide.workflow.ops.waits.DIGESTS", cache)
    ctx = _Ctx()
    # Equal keys in Python, other JSON: each looked up after the others are cached.
    for _ in range(2):
        for timeout in (1, 1.0, True):
            op = WaitForOp(ctx, ANSWER, "k1", timeout)
            assert op.digest() == digest_of(op.arguments()), timeout
    assert len(cache) == 3  # bounded: the oldest went first
    # A str subclass that claims to equal "k1" is digested from its own text.
    WaitForOp(ctx, ANSWER, "k1", None).digest()
    sneaky = WaitForOp(ctx, ANSWER, Sneaky("k2"), None)
    assert (
        sneaky.digest()
        == digest_of(sneaky.arguments())
        != digest_of(WaitForOp(ctx, ANSWER, "k1", None).arguments())
    )
    with pytest.raises(ValueError, match=">= 1 entry"):
        base.DigestCache(max_entries=0)


def test_a_changed_timeout_type_is_non_determinism_in_a_warm_process():
    # The cache holds the digest of timeout=1 from the runs that recorded it; the body then
    # waits with timeout=1.0 (another argument as JSON, an equal key in Python).
    timeouts = {"v": 1}

    async def body(args, ctx):
        for i in range(3):
            await ctx.wait_for(ANSWER, f"t{i}", timeout=timeouts["v"] if i == 1 else None)
        return "done"

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        for i in range(2):
            assert await t.h.signal(call, ANSWER, f"t{i}", ANSWER.schema(text="v")) == ("delivered")
            await t.h.run_until_parked()
        timeouts["v"] = 1.0
        await t.reopen()
        assert await t.h.signal(call, ANSWER, "t2", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
        result = t.result(call)
        assert result.is_error and "non-determinism at operation 2" in result.text
        assert result.details["nondeterminism"]["reason"] == "arguments"

    run(go())


def test_an_operation_without_arguments_has_the_digest_of_null():
    from bide.workflow.ops.base import digest_text

    # A step's: kept once, the same as hashing its canonical JSON every time.
    assert digest_of(None) == digest_text(canonical_json(None))
    assert digest_of(None) == "74234e98afe7498fb5daf1f36ac2d78a"
