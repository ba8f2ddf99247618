"""ctx.ask (design 003): a request visible in the session, answered once, withdrawn when its
run ends, several at a time, never steering the conversation."""

from __future__ import annotations

from kit import HOUR, run
from test_workflow_support import Note, Session, Tools, deps_for

from bide.agent.providers.scripted import call_tool, reply
from bide.app import App
from bide.service import workflow as wf_service
from bide.workflow import answer_in, define_workflow_tool, pending_asks

CONFIRM = [
    {"id": "approve", "label": "Approve", "style": "primary"},
    {"id": "deny", "label": "Deny"},
]


async def confirm(args, ctx):
    answer = await ctx.ask(f"Refund {args.note}?", display="confirmation", options=CONFIRM)
    return answer.option_id


def test_a_question_is_visible_answered_once_and_the_first_answer_stands():
    async def go():
        t = await Tools(define_workflow_tool("refund", "", Note, confirm)).start()
        call = await t.call("refund", {"note": "o-1"})
        await t.h.run_until_parked()
        [ask] = pending_asks(t.h)
        assert (ask.prompt, ask.display, ask.status, ask.task_id) == (
            "Refund o-1?",
            "confirmation",
            "open",
            call,
        )
        assert [(o.id, o.style) for o in ask.options] == [
            ("approve", "primary"),
            ("deny", "default"),
        ]
        assert answer_in(t.h, ask.id, option_id="maybe") == "invalid"
        assert answer_in(t.h, ask.id, text="free text") == "invalid"  # options only
        assert answer_in(t.h, ask.id) == "invalid"
        assert answer_in(t.h, ask.id, option_id="deny") == "delivered"
        assert answer_in(t.h, ask.id, option_id="approve") == "duplicate"
        assert answer_in(t.h, "ask-unknown", option_id="approve") == "not_found"
        await t.h.run_until_parked()
        assert t.result(call).text == "deny"
        assert answer_in(t.h, ask.id, option_id="approve") == "duplicate"

    run(go())


def test_requests_are_withdrawn_when_the_run_ends_however_it_ends():
    async def abandon(args, ctx):
        pending = ctx.ask("Still there?", allow_freeform=True)
        if await ctx.race(pending, timeout=HOUR) is None:
            if args.note == "raise":
                raise RuntimeError("gave up")
            return "gave up"
        return "answered"

    async def go():
        t = await Tools(define_workflow_tool("abandon", "", Note, abandon)).start()
        returns = await t.call("abandon", {}, key="returns")
        raises = await t.call("abandon", {"note": "raise"}, key="raises")
        cancelled = await t.call("abandon", {}, key="cancelled")
        await t.h.run_until_parked()
        asks = {a.task_id: a for a in pending_asks(t.h)}
        assert set(asks) == {returns, raises, cancelled}  # several outstanding at once
        await t.h.abort(cancelled, "stop")
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(returns).text == "gave up"
        assert t.result(raises).text == "RuntimeError: gave up"
        assert t.result(cancelled).code == "aborted"
        assert pending_asks(t.h) == []
        for ask in asks.values():
            assert answer_in(t.h, ask.id, text="late") == "closed"
            assert t.h.get_doc(f"ask/{ask.id}")["status"] == "withdrawn"

    run(go())


def test_an_answer_given_while_the_body_waits_elsewhere_is_found_later():
    async def patient(args, ctx):
        pending = ctx.ask("Colour?", allow_freeform=True)
        early = await ctx.race(pending, timeout=HOUR)
        await ctx.sleep(hours=5)  # answered meanwhile: nothing wakes the run for it
        late = await pending
        return {"early": early, "late": late.text}

    async def go():
        t = await Tools(define_workflow_tool("patient", "", Note, patient)).start()
        call = await t.call("patient", {})
        await t.h.run_until_parked()
        [ask] = pending_asks(t.h)
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert answer_in(t.h, ask.id, text="teal") == "delivered"
        wake = await t.h.run_until_parked()
        assert t.status(call) == "sleeping" and wake.at == t.kit.clock.now() + 5 * HOUR
        t.kit.clock.advance(5 * HOUR)
        await t.h.run_until_parked()
        assert t.result(call).details == {"early": None, "late": "teal"}

    run(go())


def test_an_answer_never_steers_the_conversation():
    def script(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "refund":
            return call_tool("refund", {"note": "o-9"}, id="c1")
        return reply(f"saw {last.text}")

    async def go():
        s = await Session(
            script, define_workflow_tool("refund", "", Note, confirm, lifetime="step")
        ).start()
        await s.say("refund", "r1")
        await s.h.run_until_parked()
        before = (s.entries(), s.submissions(), s.conv.head("main").model_dump())
        [ask] = pending_asks(s.h)
        assert answer_in(s.h, ask.id, option_id="approve") == "delivered"
        # The answer changed no transcript, no submission, no queue: only the request.
        assert (s.entries(), s.submissions(), s.conv.head("main").model_dump()) == before
        await s.h.run_until_parked()
        assert s.entries()[-2:] == [
            ("tool_result", "approve", None),
            ("assistant", "saw approve", None),
        ]

    run(go())


def test_the_answer_service_arms_before_it_writes():
    async def go():
        t = await Tools(define_workflow_tool("refund", "", Note, confirm)).start()
        deps = deps_for(t.kit, App(tools=t.registry, tasks=list(t.kit.kinds)))
        call = await t.call("refund", {"note": "o-2"})
        await t.h.run_until_parked()
        [ask] = pending_asks(t.kit.store, "s1")
        assert await wf_service.answer(deps, "s1", ask.id, option_id="approve") == "delivered"
        assert deps.queue.wakes == [("s1", "answer"), ("s1", "answer-stored")]
        assert await wf_service.answer(deps, "s1", ask.id, option_id="deny") == "duplicate"
        await t.reopen()
        await t.h.run_until_parked()
        assert t.result(call).text == "approve"

    run(go())
