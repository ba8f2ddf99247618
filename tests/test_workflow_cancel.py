"""Cancellation (design 000 §7): a body parked on a sleep, an ask, a webhook or a signal
observes it at once; its finally blocks run, with steps, within a grace period."""

from __future__ import annotations

import asyncio

import pytest
from kit import ANSWER, run
from test_workflow_support import Note, Session, Tools

from bide.agent.providers.scripted import call_tool, reply
from bide.workflow import define_workflow_tool, pending_asks


def parked_body(log: list[tuple[str, bool]]):
    async def body(args, ctx):
        job = await ctx.step(lambda: "job-7", name="start")
        try:
            if args.note == "sleep":
                await ctx.sleep(hours=5)
            elif args.note == "ask":
                await ctx.ask("Continue?", allow_freeform=True)
            elif args.note == "webhook":
                hook = await ctx.webhook()
                await hook
            elif args.note == "signal":
                await ctx.wait_for(ANSWER, "answer")
            return "finished"
        finally:
            log.append((args.note, ctx.cancelled))
            if ctx.cancelled:
                stopped = await ctx.step(lambda: f"stopped {job}", name="stop")
                log.append((stopped, True))

    return body


@pytest.mark.parametrize("wait", ["sleep", "ask", "webhook", "signal"])
def test_a_parked_body_runs_its_finally_with_steps_when_cancelled(wait):
    log: list[tuple[str, bool]] = []

    async def go():
        t = await Tools(define_workflow_tool("job", "", Note, parked_body(log))).start()
        call = await t.call("job", {"note": wait})
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"
        # Parking unwinds the body too: finally ran, but not as a cancellation.
        assert log == [(wait, False)]
        await t.h.abort(call, "stop")
        wake = await t.h.run_until_parked()  # at once: no clock moved, no signal came
        result = t.result(call)
        assert (t.h.outcome(call).status, result.code) == ("aborted", "aborted")
        assert log == [(wait, False), (wait, True), ("stopped job-7", True)]
        assert pending_asks(t.h) == [] and wake.active is False

    run(go())


def test_cleanup_past_the_grace_period_is_cut_off_and_the_call_still_ends():
    async def body(args, ctx):
        try:
            await ctx.sleep(hours=1)
        finally:
            if ctx.cancelled:

                async def hang():
                    await asyncio.sleep(30)

                await ctx.step(hang, name="hang")

    async def go():
        t = await Tools(define_workflow_tool("hang", "", Note, body, grace=0.05)).start()
        call = await t.call("hang", {})
        await t.h.run_until_parked()
        await t.h.abort(call, "stop")
        await t.h.run_until_parked()
        result = t.result(call)
        assert result.code == "aborted"
        assert result.diagnostics == ("cleanup of 'hang' did not finish within 0.05s",)

    run(go())


def test_an_abort_during_the_first_run_cancels_at_the_step_that_was_running():
    log: list[str] = []
    holder = {}

    async def body(args, ctx):
        try:

            async def long_step(step):
                log.append("working")
                await holder["h"].abort(step.task_id, "stop")  # arrives while the step runs
                return "done"

            await ctx.step(long_step, name="long")
            log.append("after the step")
            return "finished"
        finally:
            log.append(f"finally cancelled={ctx.cancelled}")
            if ctx.cancelled:
                await ctx.step(lambda: log.append("cleanup") or "ok", name="cleanup")

    async def go():
        t = await Tools(define_workflow_tool("long", "", Note, body)).start()
        holder["h"] = t.h
        call = await t.call("long", {})
        await t.h.run_until_parked()
        assert t.result(call).code == "aborted"
        # The step's result could not be recorded (the abort refused the commit: the body
        # unwound like a process death), so the cleanup replay raises the cancellation at
        # that step, which does not run again.
        assert log == [
            "working",
            "finally cancelled=False",
            "finally cancelled=True",
            "cleanup",
        ]

    run(go())


def test_stopping_the_turn_cancels_a_waiting_workflow_tool():
    stopped: list[str] = []

    async def body(args, ctx):
        try:
            return (await ctx.ask("Go?", allow_freeform=True)).text
        finally:
            if ctx.cancelled:
                await ctx.step(lambda: stopped.append("cleaned") or "ok", name="cleanup")

    def script(request):
        last = request.messages[-1]
        if last.role == "user":
            return call_tool("go", {}, id="g1")
        return reply(f"saw {last.text}")

    async def go():
        s = await Session(script, define_workflow_tool("go", "", Note, body)).start()
        await s.say("start", "r1")
        await s.h.run_until_parked()
        assert len(pending_asks(s.h)) == 1
        await s.conv.stop("main")
        await s.h.run_until_parked()
        assert stopped == ["cleaned"] and pending_asks(s.h) == []
        assert s.entries()[-1][0] == "tool_result" and s.h.live_tasks == {}

    run(go())
