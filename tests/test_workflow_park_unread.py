"""A wait the body awaits itself leaves the key it parks on unread: the park's commit requires
the key's signal document absent (no GetItem of its own). A key consumed or expired earlier
has one, not on the record; a worker that has not read it (a cold one) has its park refused,
then runs the body again knowing the document, and the wait resolves as a read would have."""

from __future__ import annotations

import pytest
from kit import ANSWER, HOUR, run
from test_workflow_background import script
from test_workflow_support import Note, Session, Tools

from bide import SQLiteStore
from bide.engine.errors import DocumentExists
from bide.engine.store.wrapper import StoreWrapper
from bide.workflow import WaitTimeout, background_tasks, define_workflow_tool


class Counting(StoreWrapper):
    """Counts the commits the store refused for a document required absent, and the
    documents read one by one."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.refused = 0
        self.reads = 0

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        try:
            return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        except DocumentExists:
            self.refused += 1
            raise

    def get_doc(self, session_id, key):
        self.reads += 1
        return self.inner.get_doc(session_id, key)


async def twice(args, ctx):
    """The consumed key "a" waited on again, after "b": its value again."""
    first = (await ctx.wait_for(ANSWER, "a", timeout=HOUR)).text
    middle = (await ctx.wait_for(ANSWER, "b", timeout=HOUR)).text
    again = (await ctx.wait_for(ANSWER, "a", timeout=HOUR)).text
    last = (await ctx.wait_for(ANSWER, "c", timeout=HOUR)).text
    return first + middle + again + last


async def expired(args, ctx):
    """The key "a" expires with its wait's deadline; a wait on it after "b" cannot wait."""
    try:
        first = (await ctx.wait_for(ANSWER, "a", timeout=60)).text
    except WaitTimeout:
        first = "timed out"
    middle = (await ctx.wait_for(ANSWER, "b", timeout=HOUR)).text
    try:
        await ctx.wait_for(ANSWER, "a", timeout=HOUR)
        late = "got"
    except WaitTimeout:
        late = "-"
    last = (await ctx.wait_for(ANSWER, "c", timeout=HOUR)).text
    return first + middle + late + last


async def _go(body, first_key: str | None, cold: bool, inner=None) -> tuple[str, int, int]:
    """Run ``body`` to its wait on "c" (answering ``first_key``, or letting its wait's deadline
    pass, then "b", the worker reopened before the run that takes "b" when ``cold``), then
    answer "c": the result, and the refused commits and document reads of the run that
    took "b". On ``inner`` (a store), else on SQLite."""
    store = Counting(inner or SQLiteStore())
    t = await Tools(define_workflow_tool("w", "", Note, body), store=store).start()
    call = await t.call("w", {})
    await t.h.run_until_parked()
    if first_key is None:
        t.kit.clock.advance(61)
    else:
        assert await t.h.signal(call, ANSWER, first_key, {"text": "A"}) == "delivered"
    await t.h.run_until_parked()
    assert await t.h.signal(call, ANSWER, "b", {"text": "B"}) == "delivered"
    if cold:
        await t.reopen()  # a worker that never read the document of "a"
    store.refused = store.reads = 0
    await t.h.run_until_parked()
    seen = (store.refused, store.reads)
    assert t.status(call) == "sleeping"
    assert [k.key for k in t.h.task(call).state.signals] == ["c"]
    assert await t.h.signal(call, ANSWER, "c", {"text": "C"}) == "delivered"
    await t.h.run_until_parked()
    return t.result(call).text, *seen


@pytest.mark.parametrize("cold", [False, True])
def test_a_consumed_key_waited_on_again_gives_its_value_again(cold: bool):
    text, refused, reads = run(_go(twice, "a", cold))
    assert text == "ABAC"
    # Warm, the worker wrote the document of "a" and knows it; cold, the park on "a" is
    # refused once for it (the document comes with the refusal: no read).
    assert (refused, reads) == ((1, 0) if cold else (0, 0))


@pytest.mark.parametrize("cold", [False, True])
def test_an_expired_key_waited_on_again_times_out_at_once(cold: bool):
    text, refused, reads = run(_go(expired, None, cold))
    assert text == "timed outB-C"
    assert (refused, reads) == ((1, 0) if cold else (0, 0))


def test_a_background_body_runs_again_when_its_park_is_refused():
    async def body(args, ctx, task):
        return await twice(args, ctx)

    async def go():
        tool = define_workflow_tool("bg", "", Note, body, lifetime="task")
        s = await Session(script, tool).start()
        await s.say("call bg", "r1")
        await s.h.run_until_parked()
        [info] = background_tasks(s.h)
        assert await s.h.signal(info.id, ANSWER, "a", {"text": "A"}) == "delivered"
        await s.h.run_until_parked()
        assert await s.h.signal(info.id, ANSWER, "b", {"text": "B"}) == "delivered"
        store = s.kit.store = Counting(s.kit.store)
        s.h = await s.kit.reopen()  # a worker that never read the document of "a"
        await s.h.run_until_parked()
        assert (store.refused, store.reads) == (1, 0)
        assert [k.key for k in s.h.task(info.id).state.signals] == ["c"]
        assert await s.h.signal(info.id, ANSWER, "c", {"text": "C"}) == "delivered"
        await s.h.run_until_parked()
        [done] = background_tasks(s.h)
        return done.status, done.result

    assert run(go()) == ("completed", "ABAC")


def test_a_park_refused_for_another_reason_is_refused_once_more_then_settled():
    async def body(args, ctx):
        return (await ctx.wait_for(ANSWER, "s.*", timeout=HOUR)).text  # a stream's key

    async def go():
        store = Counting(SQLiteStore())
        t = await Tools(define_workflow_tool("w", "", Note, body), store=store).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        return t.status(call), t.result(call)

    status, result = run(go())
    assert status == "terminal" and result.is_error
    assert "names a stream" in result.text
