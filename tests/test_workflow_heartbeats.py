"""``ctx.wait_for(..., heartbeat=)``: beats keep the wait open, a missed beat raises the
catchable ``HeartbeatMissed`` (a ``WaitTimeout``), recorded so replays raise it again; a
heartbeat wait cannot be raced (a missed beat would expire every key of the race)."""

from __future__ import annotations

from kit import ANSWER, HOUR, run
from test_workflow_support import Note, Tools

from bide import Sleeping
from bide.workflow import HeartbeatMissed, WaitTimeout, WorkflowError, define_workflow_tool

BEAT = 60.0


async def body(args, ctx):
    try:
        first = (await ctx.wait_for(ANSWER, "done", timeout=HOUR, heartbeat=BEAT)).text
    except HeartbeatMissed as exc:
        first = f"missed: {exc}"
    # A wait after the caught error: every replay must raise the recorded error again.
    second = (await ctx.wait_for(ANSWER, "second")).text
    return {"first": first, "second": second}


def test_beats_keep_the_wait_open_and_a_missed_beat_raises_heartbeat_missed():
    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        state = t.h.task(call).state
        assert isinstance(state, Sleeping) and state.heartbeat == BEAT
        assert state.beat_by == t.kit.clock.now() + BEAT
        for _ in range(5):  # 250 s of beats: well past the first beat_by
            t.kit.clock.advance(50)
            assert await t.h.beat(call, ANSWER, "done") == "delivered"
            await t.h.run_until_parked()
            assert t.status(call) == "sleeping"
        t.kit.clock.advance(BEAT)  # no beat: missed
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"  # caught; now waiting on "second"
        assert await t.h.signal(call, ANSWER, "done", {"text": "too late"}) == "closed"
        await t.reopen()  # a new process replays the recorded HeartbeatMissed
        assert await t.h.signal(call, ANSWER, "second", {"text": "2"}) == "delivered"
        await t.h.run_until_parked()
        details = t.result(call).details
        assert details["first"].startswith("missed: no beat on 'test.answer/done' for 60.0s")
        assert details["second"] == "2"

    run(go())


def test_a_value_ends_a_beating_wait_and_until_stays_a_timeout():
    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        got = await t.call("w", {}, key="got")
        await t.h.run_until_parked()
        t.kit.clock.advance(30)
        assert await t.h.signal(got, ANSWER, "done", {"text": "1"}) == "delivered"
        assert await t.h.signal(got, ANSWER, "second", {"text": "2"}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(got).details == {"first": "1", "second": "2"}

    run(go())


def test_a_missed_beat_is_a_wait_timeout_too():
    async def timeout_body(args, ctx):
        try:
            await ctx.wait_for(ANSWER, "done", heartbeat=BEAT)
        except WaitTimeout as exc:
            return type(exc).__name__
        return "value"

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, timeout_body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        assert t.h.wake().at == t.kit.clock.now() + BEAT  # no timeout: the beat is the alarm
        t.kit.clock.advance(BEAT)
        await t.h.run_until_parked()
        assert t.result(call).text == "HeartbeatMissed"

    run(go())


def test_a_heartbeat_wait_cannot_be_raced_and_needs_a_positive_interval():
    async def raced(args, ctx):
        errors = []
        try:
            await ctx.first(ctx.wait_for(ANSWER, "a", heartbeat=BEAT), timeout=HOUR)
        except WorkflowError as exc:
            errors.append(str(exc))
        try:
            ctx.wait_for(ANSWER, "b", heartbeat=0)
        except WorkflowError as exc:
            errors.append(str(exc))
        return errors

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, raced)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        first, second = t.result(call).details
        assert "has a heartbeat and cannot be raced" in first
        assert "heartbeat must be > 0 seconds" in second

    run(go())
