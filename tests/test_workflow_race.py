"""Races: ``ctx.first`` (a RaceResult that tells a winner's ``null`` from a timeout, two waits
against each other) and ``ctx.race`` (value or None); every raceable operation stays usable
after it lost, as bide.workflow.ops.race documents for each kind."""

from __future__ import annotations

from typing import Any

import pytest
from kit import ANSWER, HOUR, run
from test_workflow_support import Note, Session, Tools

from bide.agent.providers.scripted import call_tool, reply
from bide.engine.signals import define_signal
from bide.workflow import (
    RaceResult,
    WaitTimeout,
    WorkflowError,
    define_workflow_tool,
    pending_asks,
    post_webhook,
)
from bide.workflow.requests import answer_in

MAYBE = define_signal("test.maybe", 1, Any)


def test_first_tells_a_null_value_from_a_timeout():
    async def body(args, ctx):
        got = await ctx.first(ctx.wait_for(MAYBE, "v"), timeout=HOUR)
        return {"winner": got.winner, "value": got.value, "timed_out": got.timed_out}

    async def go():
        t = await Tools(define_workflow_tool("m", "", Note, body)).start()
        null = await t.call("m", {}, key="null")
        late = await t.call("m", {}, key="late")
        await t.h.run_until_parked()
        assert await t.h.signal(null, MAYBE, "v", None) == "delivered"
        await t.h.run_until_parked()
        assert t.result(null).details == {"winner": 0, "value": None, "timed_out": False}
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(late).details == {"winner": None, "value": None, "timed_out": True}

    run(go())


def test_two_waits_race_each_other_and_the_loser_is_awaited_later():
    async def body(args, ctx):
        hook = await ctx.webhook()
        await ctx.step(lambda: hook.url, name="register")
        question = ctx.ask("Approve?", options=[{"id": "yes", "label": "Yes"}])
        first = await ctx.first(question, hook.next())  # no deadline: one of them wins
        assert isinstance(first, RaceResult)
        answer = await question  # the loser: its question stayed open
        return {"winner": first.winner, "request": first.value, "answer": answer.option_id}

    async def go():
        t = await Tools(define_workflow_tool("two", "", Note, body)).start()
        call = await t.call("two", {})
        wake = await t.h.run_until_parked()
        assert wake.at is None  # nothing but the two waits: no alarm
        url = t.memos(call)["wf.2.r"]["v"]
        [ask] = pending_asks(t.h)
        assert post_webhook(t.h, url, {"build": 7}) == "delivered"
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping" and [a.id for a in pending_asks(t.h)] == [ask.id]
        await t.reopen()  # the recorded race replays in a new process
        assert answer_in(t.h, ask.id, option_id="yes") == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).details == {"winner": 1, "request": {"build": 7}, "answer": "yes"}

    run(go())


def test_a_sleep_wins_over_a_wait_for_and_the_lost_wait_for_still_takes_its_value():
    """The race's park lists the wait's key with the sleep's deadline and leaves the key open
    at that deadline (``expire_on_deadline=False``). The sleep wins; the wait_for, awaited
    again, parks on its key and gets the value sent after the race ended."""

    async def body(args, ctx):
        value = ctx.wait_for(ANSWER, "go")
        first = await ctx.first(value, ctx.sleep(hours=1))
        late = (await value).text
        return {"winner": first.winner, "late": late}

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"  # the sleep won; the body awaits the loser
        assert await t.h.signal(call, ANSWER, "go", {"text": "x"}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).details == {"winner": 1, "late": "x"}

    run(go())


def test_a_wait_for_that_lost_to_the_race_timeout_stays_usable():
    """Issue 13: the race's own timeout leaves the wait_for's key open. A value sent after the
    deadline but before the run woke wins the race; one sent after the race ended is read by
    awaiting the wait_for again."""

    async def body(args, ctx):
        value = ctx.wait_for(ANSWER, "go")
        first = await ctx.race(value, timeout=HOUR)
        late = (await value).text
        return {"first": None if first is None else first.text, "late": late}

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        lost = await t.call("w", {}, key="lost")
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.status(lost) == "sleeping"
        await t.reopen()  # the recorded race replays in a new process
        assert await t.h.signal(lost, ANSWER, "go", {"text": "later"}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(lost).details == {"first": None, "late": "later"}

        won = await t.call("w", {}, key="won")
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)  # the deadline passed; no worker ran yet
        assert await t.h.signal(won, ANSWER, "go", {"text": "just"}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(won).details == {"first": "just", "late": "just"}

    run(go())


def test_a_raced_wait_for_with_its_own_timeout_still_expires_at_the_deadline():
    """The exception: a raced wait_for with timeout= makes the park expire its keys (design
    001's deadline race), so a late sender is told closed and the wait_for times out."""

    async def body(args, ctx):
        value = ctx.wait_for(ANSWER, "go", timeout=2 * HOUR)
        first = await ctx.first(value, ctx.sleep(hours=1))
        try:
            late = (await value).text
        except WaitTimeout as exc:
            late = f"timeout: {exc}"
        return {"winner": first.winner, "late": late}

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        details = t.result(call).details
        assert details["winner"] == 1
        assert details["late"].startswith("timeout: no 'test.answer/go'")
        assert await t.h.signal(call, ANSWER, "go", {"text": "x"}) == "closed"

    run(go())


def test_race_of_a_wait_for_against_its_deadline_returns_none():
    async def body(args, ctx):
        got = await ctx.race(ctx.wait_for(ANSWER, "k"), timeout=HOUR)
        return "none" if got is None else got.text

    async def go():
        t = await Tools(define_workflow_tool("r", "", Note, body)).start()
        call = await t.call("r", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(call).text == "none"

    run(go())


def test_a_lost_sleep_keeps_its_time():
    async def body(args, ctx):
        nap = ctx.sleep(hours=2)
        got = await ctx.first(nap, timeout=HOUR)
        await nap
        return {"timed_out": got.timed_out, "at": ctx._rt.now()}

    async def go():
        t = await Tools(define_workflow_tool("s", "", Note, body)).start()
        call = await t.call("s", {})
        start = t.kit.clock.now()
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        wake = await t.h.run_until_parked()
        assert wake.at == start + 2 * HOUR  # the sleep's own time, fixed at first evaluation
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(call).details == {"timed_out": True, "at": start + 2 * HOUR}

    run(go())


def test_a_subagent_that_lost_a_race_still_answers():
    """The race wakes at its deadline and the engine expires the key it listed for the
    subagent's settlement; the settlement goes to the next key of its stream instead."""

    async def slow(args, ctx):
        await ctx.sleep(hours=2)
        return "thought it over"

    async def body(args, ctx):
        review = ctx.agent(key="review", target="reviewer", message="Review the plan")
        early = await ctx.first(review, timeout=HOUR)
        answer = await review
        return f"{early.timed_out} / {answer}"

    def script(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "deploy":
            return call_tool("deploy", {}, id="d1")
        if last.role == "user" and last.text == "Review the plan":
            return call_tool("slow", {}, id="s1")
        if last.role == "tool" and "thought it over" in str(last):
            return reply("looks safe")
        return reply(f"parent saw: {last.text}")

    async def go():
        holder = {}
        tool = define_workflow_tool(
            "deploy", "", Note, body, agents={"reviewer": lambda: holder["agent"]}
        )
        s = Session(script, tool, define_workflow_tool("slow", "", Note, slow))
        holder["agent"] = s.agent
        await s.start()
        await s.say("deploy", "r1")
        await s.h.run_until_parked()
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()  # the race timed out; the subagent still thinks
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert s.entries()[-1] == ("assistant", "parent saw: True / looks safe", None)

    run(go())


def test_what_cannot_race_is_refused_when_the_race_is_created():
    async def body(args, ctx):
        errors = []
        nap = ctx.sleep(hours=1)
        for make in (
            lambda: ctx.first(ctx.step(lambda: 1, name="s"), timeout=1),
            lambda: ctx.first(nap, nap, timeout=1),
            lambda: ctx.first(nap),
            lambda: ctx.race(nap),
            lambda: ctx.first(nap, "not an op", timeout=1),
        ):
            try:
                make()
            except WorkflowError as exc:
                errors.append(str(exc))
        return errors

    async def go():
        t = await Tools(define_workflow_tool("m", "", Note, body)).start()
        call = await t.call("m", {})
        await t.h.run_until_parked()
        errors = t.result(call).details
        assert len(errors) == 5
        assert "only waits can race" in errors[0] and "await it on its own" in errors[0]
        assert "in this race twice" in errors[1]
        assert "two operations or a deadline" in errors[2]
        assert "timeout= or until=" in errors[3]
        assert "only durable operations can race" in errors[4]

    run(go())


def test_race_result_is_a_small_value():
    assert RaceResult(None).timed_out and not RaceResult(0, None).timed_out
    with pytest.raises(AttributeError):
        RaceResult(0).winner = 1  # type: ignore[misc]
