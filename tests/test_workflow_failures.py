"""Failures on workflow waits (issue 13): ``ctx.wait_for``, ``hook.next()`` and ``ctx.ask`` raise a
catchable FailureReceived, recorded so every replay raises the same; uncaught, the call ends
failed (its outcome says failed, not completed-with-error-text)."""

from __future__ import annotations

from kit import ANSWER, HOUR, run
from test_workflow_support import Note, Tools

from bide import SignalFailure
from bide.workflow import (
    FailureReceived,
    answer_in,
    define_workflow_tool,
    pending_asks,
    post_webhook,
)

CI_RED = SignalFailure("BuildFailed", "3 tests failed", {"failed": 3})


def test_wait_for_raises_a_failure_the_body_catches_and_every_replay_raises_it_again():
    caught: list[tuple[str, str, object]] = []

    async def body(args, ctx):
        try:
            value = await ctx.wait_for(ANSWER, "ci")
            outcome = f"value {value.text}"
        except FailureReceived as exc:
            caught.append((exc.type, exc.message, exc.data))
            outcome = f"caught {exc.type}"
        await ctx.sleep(hours=1)  # the replay after this wake meets the failure again
        return outcome

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        assert await t.h.signal(call, ANSWER, "ci", CI_RED) == "delivered"
        await t.h.run_until_parked()
        await t.reopen()  # a fresh process: the failure comes from the history
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.h.outcome(call).status == "completed"
        assert t.result(call).text == "caught BuildFailed"
        assert caught == [("BuildFailed", "3 tests failed", {"failed": 3})] * 2

    run(go())


def test_an_uncaught_failure_ends_the_call_failed_with_its_type_and_message():
    async def body(args, ctx):
        await ctx.wait_for(ANSWER, "ci")
        return "never"

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        assert await t.h.signal(call, ANSWER, "ci", CI_RED) == "delivered"
        await t.h.run_until_parked()
        outcome = t.h.outcome(call)
        assert outcome.status == "failed"
        assert outcome.error["is_error"] is True
        assert "BuildFailed: 3 tests failed" in outcome.error["content"][0]["text"]
        assert outcome.error["details"] == {"failure": CI_RED.to_json()}

    run(go())


def test_a_webhook_request_that_failed_raises_and_the_next_request_still_arrives():
    async def body(args, ctx):
        hook = await ctx.webhook()
        await ctx.step(lambda: hook.url, name="register")
        try:
            await hook
            first = "value"
        except FailureReceived as exc:
            first = f"{exc.type}: {exc.message}"
        second = await hook
        return {"first": first, "second": second}

    async def go():
        t = await Tools(
            define_workflow_tool("h", "", Note, body),
            services={"webhook_base_url": "https://bide.example/"},
        ).start()
        call = await t.call("h", {})
        await t.h.run_until_parked()
        url = t.memos(call)["wf.2.r"]["v"]
        assert post_webhook(t.h, url, SignalFailure("DeployFailed", "rollback")) == "delivered"
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"  # caught, now waiting for the next request
        assert post_webhook(t.h, url, {"n": 2}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).details == {"first": "DeployFailed: rollback", "second": {"n": 2}}

    run(go())


def test_ctx_ask_raises_a_failure_given_instead_of_an_answer_and_first_wins():
    async def body(args, ctx):
        try:
            answer = await ctx.ask("Deploy?", options=[{"id": "yes", "label": "Yes"}])
            return f"answered {answer.option_id}"
        except FailureReceived as exc:
            if args.note == "catch":
                return f"caught {exc.type}: {exc.message}"
            raise

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        caught = await t.call("w", {"note": "catch"}, key="a")
        uncaught = await t.call("w", {}, key="b")
        await t.h.run_until_parked()
        asks = {a.task_id: a.id for a in pending_asks(t.h)}
        gone = SignalFailure("Unavailable", "nobody on call")
        assert answer_in(t.h, asks[caught], failure=SignalFailure("", "m")) == "invalid"
        assert answer_in(t.h, asks[caught], failure=gone) == "delivered"
        assert answer_in(t.h, asks[caught], option_id="yes") == "duplicate"  # first wins
        assert answer_in(t.h, asks[uncaught], failure=gone) == "delivered"
        await t.h.run_until_parked()
        assert t.result(caught).text == "caught Unavailable: nobody on call"
        assert t.h.outcome(uncaught).status == "failed"
        assert t.h.outcome(uncaught).error["details"] == {"failure": gone.to_json()}

    run(go())
