"""Workflow bodies replayed from their history: steps once, locals after waits, retries,
non-determinism, races, signals, webhooks, subagents, crashes."""

from __future__ import annotations

import contextlib
import json

from kit import ANSWER, HOUR, Kit, run
from pydantic import BaseModel
from test_workflow_support import Note, Session, Tools

from bide import SQLiteStore
from bide.agent.providers.scripted import call_tool, reply
from bide.service.webhooks import WebhookRejected
from bide.testing import Crash, FaultyStore
from bide.tools import ToolRegistry
from bide.workflow import (
    FatalError,
    RetryPolicy,
    StepFailed,
    WaitTimeout,
    WorkflowError,
    define_workflow_tool,
    pending_asks,
    post_webhook,
)
from bide.workflow.requests import answer_in


class Items(BaseModel):
    items: list[str]


def test_a_step_is_never_re_executed_on_replay_and_locals_survive_durable_waits():
    runs = {"fetch": 0, "price": 0, "body": 0}

    async def body(args, ctx):
        runs["body"] += 1
        upper = [i.upper() for i in args.items]  # a plain local, recomputed by every replay

        def fetch():
            runs["fetch"] += 1
            return {"stock": {i: n for n, i in enumerate(upper, start=3)}}

        stock = await ctx.step(fetch, name="fetch")
        await ctx.sleep(hours=1)
        total = sum(stock["stock"].values())  # a local derived from a recorded step
        await ctx.sleep(hours=1)

        def price(step):
            runs["price"] += 1
            return total * 10

        cost = await ctx.step(price, name="price")
        await ctx.sleep(minutes=5)
        return {"items": upper, "total": total, "cost": cost}

    async def go():
        t = await Tools(define_workflow_tool("order", "", Items, body)).start()
        call = await t.call("order", {"items": ["a", "b"]})
        for _ in range(3):
            await t.h.run_until_parked()
            assert t.status(call) == "sleeping"
            t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(call).details == {"items": ["A", "B"], "total": 7, "cost": 70}
        assert runs == {"fetch": 1, "price": 1, "body": 4}  # four runs, each step once

    run(go())


def test_a_restarted_process_replays_without_running_steps_again():
    runs = {"n": 0}

    async def body(args, ctx):
        def once():
            runs["n"] += 1
            return runs["n"]

        first = await ctx.step(once, name="once")
        await ctx.sleep(hours=2)
        return f"first={first}"

    async def go():
        t = await Tools(define_workflow_tool("once", "", Note, body)).start()
        call = await t.call("once", {})
        await t.h.run_until_parked()
        await t.reopen()  # the process died while the call was parked
        t.kit.clock.advance(2 * HOUR)
        await t.h.run_until_parked()
        assert t.result(call).text == "first=1" and runs["n"] == 1

    run(go())


def test_a_step_cut_off_before_its_record_runs_again_once():
    """Steps are at least once: a crash between the step and its record reruns the step
    (with the same idempotency key); once recorded, never again."""
    keys: list[str] = []

    async def body(args, ctx):
        def charge(step):
            keys.append(step.idempotency_key)
            return "charged"

        return await ctx.step(charge, name="charge")

    def records_result(writes):
        return any("wf.1.r" in r.memos for r in writes)

    async def go():
        store = FaultyStore(SQLiteStore(), match=records_result, when="before")
        registry = ToolRegistry([define_workflow_tool("charge", "", Note, body)])
        k = Kit(registry.task, store=store)
        await k.h.open()
        call = await k.h.create_task(registry.task, registry.call("charge", {}), key="c")
        with contextlib.suppress(Crash):
            await k.h.run_until_parked()
        await k.reopen()
        await k.h.run_until_parked()
        assert k.h.outcome(call).result["content"][0]["text"] == "charged"
        assert len(keys) == 2 and keys[0] == keys[1]

    run(go())


def test_non_determinism_is_detected_and_names_the_position():
    version = {"v": 1}

    async def body(args, ctx):
        await ctx.step(lambda: 1, name="first")
        if version["v"] == 1:
            await ctx.sleep(hours=1)
        else:
            await ctx.sleep(hours=1, name="nap")  # the code changed while parked
        return "done"

    async def go():
        t = await Tools(define_workflow_tool("flaky", "", Note, body)).start()
        call = await t.call("flaky", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        version["v"] = 2
        await t.h.run_until_parked()
        result = t.result(call)
        assert result.is_error and result.code == "tool_error"
        assert "non-determinism at operation 2" in result.text
        assert "recorded sleep 'sleep'" in result.text
        assert "asks for sleep 'nap'" in result.text

    run(go())


def test_non_determinism_of_a_kind_is_detected_even_if_the_body_catches_it():
    flip = {"on": False}

    async def body(args, ctx):
        try:
            if flip["on"]:
                await ctx.step(lambda: 1, name="sleep")  # same name, other kind
            else:
                await ctx.sleep(hours=1)
        except Exception:
            pass  # swallowing it does not help: the run still ends with the error
        return "ok"

    async def go():
        t = await Tools(define_workflow_tool("f", "", Note, body)).start()
        call = await t.call("f", {})
        await t.h.run_until_parked()
        flip["on"] = True
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert "recorded sleep 'sleep', the body now asks for step 'sleep'" in t.result(call).text

    run(go())


def test_steps_retry_on_parked_backoff_and_fatal_errors_are_not_retried():
    tries = {"flaky": 0, "fatal": 0, "hopeless": 0}

    async def body(args, ctx):
        def flaky():
            tries["flaky"] += 1
            if tries["flaky"] < 3:
                raise ConnectionError("try later")
            return "ok"

        def fatal():
            tries["fatal"] += 1
            raise FatalError("bad request")

        def hopeless():
            tries["hopeless"] += 1
            raise ValueError("never")

        out = [await ctx.step(flaky, retry=RetryPolicy(max_attempts=5, initial_delay=60))]
        for fn in (fatal, hopeless):
            try:
                await ctx.step(fn, retry=RetryPolicy(max_attempts=2, initial_delay=0))
            except StepFailed as exc:
                out.append(f"{exc.step}: {exc.error_type} fatal={exc.fatal} n={exc.attempts}")
        return out

    async def go():
        t = await Tools(define_workflow_tool("r", "", Note, body)).start()
        call = await t.call("r", {})
        wake = await t.h.run_until_parked()
        assert wake.at == t.kit.clock.now() + 60  # parked backoff, nothing sleeps in memory
        t.kit.clock.advance(60)
        wake = await t.h.run_until_parked()
        assert wake.at == t.kit.clock.now() + 120  # doubled
        t.kit.clock.advance(120)
        await t.h.run_until_parked()
        assert t.result(call).details == [
            "ok",
            "fatal: FatalError fatal=True n=1",
            "hopeless: ValueError fatal=False n=2",
        ]
        assert tries == {"flaky": 3, "fatal": 1, "hopeless": 2}

    run(go())


def test_steps_may_be_async_take_their_context_and_must_return_json():
    async def body(args, ctx):
        async def fetch(step):
            return {"name": step.name, "attempt": step.attempt}

        got = await ctx.step(fetch, name="fetch")
        try:
            await ctx.step(lambda: object(), name="bad")
        except StepFailed as exc:
            return {"got": got, "bad": exc.message}

    async def go():
        t = await Tools(define_workflow_tool("j", "", Note, body)).start()
        call = await t.call("j", {})
        await t.h.run_until_parked()
        details = t.result(call).details
        assert details["got"] == {"name": "fetch", "attempt": 1}
        assert "not JSON" in details["bad"]

    run(go())


def test_durable_operations_cannot_run_inside_a_step():
    async def body(args, ctx):
        async def nested():
            await ctx.sleep(hours=1)

        try:
            await ctx.step(nested, name="nested")
        except StepFailed as exc:
            return exc.message

    async def go():
        t = await Tools(define_workflow_tool("n", "", Note, body)).start()
        call = await t.call("n", {})
        await t.h.run_until_parked()
        assert t.result(call).text == "durable operations cannot run inside a step"

    run(go())


def test_race_a_question_against_a_deadline_then_escalate_with_the_same_question():
    pages: list[str] = []

    async def body(args, ctx):
        pending = ctx.ask("Deploy?", options=[{"id": "yes", "label": "Yes"}])
        answer = await ctx.race(pending, timeout=4 * HOUR)
        if answer is None:
            await ctx.step(lambda: pages.append("on-call") or "paged", name="page")
            answer = await ctx.race(pending, timeout=20 * HOUR)
        return "timed out" if answer is None else answer.option_id

    async def go():
        t = await Tools(define_workflow_tool("deploy", "", Note, body)).start()
        call = await t.call("deploy", {})
        wake = await t.h.run_until_parked()
        assert wake.at == t.kit.clock.now() + 4 * HOUR
        [ask] = pending_asks(t.h)
        t.kit.clock.advance(4 * HOUR)
        await t.h.run_until_parked()
        assert pages == ["on-call"] and [a.id for a in pending_asks(t.h)] == [ask.id]
        t.kit.clock.advance(2 * HOUR)
        assert answer_in(t.h, ask.id, option_id="yes") == "delivered"  # the same request
        await t.h.run_until_parked()
        assert t.result(call).text == "yes" and pending_asks(t.h) == []

        second = await t.call("deploy", {}, key="again")
        await t.h.run_until_parked()
        t.kit.clock.advance(4 * HOUR)
        await t.h.run_until_parked()
        t.kit.clock.advance(20 * HOUR)
        await t.h.run_until_parked()
        assert t.result(second).text == "timed out"
        assert pending_asks(t.h) == []  # returning withdrew it

    run(go())


def test_wait_for_a_signal_with_and_without_timeout():
    async def body(args, ctx):
        if args.note == "timeout":
            try:
                await ctx.wait_for(ANSWER, "late", timeout=HOUR)
            except WaitTimeout as exc:
                return f"timeout: {exc}"
        value = await ctx.wait_for(ANSWER, "answer")
        await ctx.sleep(hours=1)  # the recorded value replays typed after another wait
        return value.text

    async def go():
        t = await Tools(define_workflow_tool("w", "", Note, body)).start()
        call = await t.call("w", {})
        await t.h.run_until_parked()
        assert await t.h.signal(call, ANSWER, "answer", {"text": "hi"}) == "delivered"
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(call).text == "hi"
        late = await t.call("w", {"note": "timeout"}, key="t")
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert t.result(late).text == "timeout: no 'test.answer/late' in time"
        assert await t.h.signal(late, ANSWER, "late", {"text": "x"}) == "closed"

    run(go())


def test_a_webhook_delivers_every_request_through_one_url_and_closes_with_the_run():
    seen_urls: list[str] = []

    async def body(args, ctx):
        hook = await ctx.webhook()
        seen_urls.append(await ctx.step(lambda: hook.url, name="register"))
        first = await hook
        rest = []
        async for request in hook:
            rest.append(request["n"])
            if request.get("last"):
                break
        return {"first": first["n"], "rest": rest}

    async def go():
        t = await Tools(
            define_workflow_tool("hooked", "", Note, body),
            services={"webhook_base_url": "https://bide.example/"},
        ).start()
        call = await t.call("hooked", {})
        await t.h.run_until_parked()
        [url] = seen_urls
        assert url.startswith("https://bide.example/hooks/")
        # Two requests before the body runs again: neither is lost.
        assert post_webhook(t.h, url, {"n": 1}) == "delivered"
        assert post_webhook(t.h, url, {"n": 2}) == "delivered"
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"
        assert post_webhook(t.h, url, {"n": 3, "last": True}) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).details == {"first": 1, "rest": [2, 3]}
        assert post_webhook(t.h, url, {"n": 4}) == "closed"
        try:
            post_webhook(t.h, url.replace("hooks/", "hooks/x"), {})
        except WebhookRejected as exc:
            assert exc.status == 404

    run(go())


def test_the_stream_key_of_store_delivery_matches_in_process_delivery():
    from bide.engine.delivery import deliver_signal, stream_key
    from bide.workflow import WEBHOOK

    async def body(args, ctx):
        hook = await ctx.webhook()
        return [await hook, await hook]

    async def go():
        t = await Tools(define_workflow_tool("h", "", Note, body)).start()
        call = await t.call("h", {})
        await t.h.run_until_parked()
        for n in (1, 2):  # what the HTTP route does: no harness, the store only
            decision = deliver_signal(
                t.kit.store, "s1", call, WEBHOOK, "wf.1.*", {"n": n}, t.kit.clock
            )
            assert decision.result == "delivered"
        record = t.kit.store.get_task("s1", call)
        assert stream_key(record, WEBHOOK.name, "wf.1.*", t.kit.clock.now()) == "wf.1.2"
        await t.reopen()
        await t.h.run_until_parked()
        assert t.result(call).details == [{"n": 1}, {"n": 2}]

    run(go())


def test_a_webhook_raced_against_a_deadline_moves_on_to_the_next_request():
    async def body(args, ctx):
        hook = await ctx.webhook()
        await ctx.step(lambda: hook.url, name="register")
        early = await ctx.race(hook.next(), timeout=HOUR)
        later = await hook  # the timed-out slot expired; the next request still arrives
        return {"early": early, "later": later}

    async def go():
        t = await Tools(define_workflow_tool("h", "", Note, body)).start()
        call = await t.call("h", {})
        await t.h.run_until_parked()
        url = t.memos(call)["wf.2.r"]["v"]
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()  # the deadline won: request slot 0 expired
        assert t.status(call) == "sleeping"
        assert post_webhook(t.h, url, {"n": 1}) == "delivered"  # goes to the next slot
        await t.h.run_until_parked()
        assert t.result(call).details == {"early": None, "later": {"n": 1}}

    run(go())


def test_a_subagent_answers_in_a_conversation_owned_by_the_run():
    async def body(args, ctx):
        review = await ctx.agent(key="review", target="reviewer", message="Review the plan")
        await ctx.sleep(minutes=1)
        return f"reviewed: {review}"

    def script(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "deploy":
            return call_tool("deploy", {}, id="d1")
        if last.role == "user" and last.text == "Review the plan":
            return reply("looks safe")
        return reply(f"parent saw: {last.text}")

    async def go():
        holder = {}
        tool = define_workflow_tool(
            "deploy", "", Note, body, agents={"reviewer": lambda: holder["agent"]}
        )
        s = Session(script, tool)
        holder["agent"] = s.agent
        await s.start()
        await s.say("deploy", "r1")
        await s.h.run_until_parked()
        s.kit.clock.advance(60)
        await s.h.run_until_parked()
        assert s.entries()[-1] == ("assistant", "parent saw: reviewed: looks safe", None)

    run(go())


def test_a_workflow_error_explains_misuse():
    async def body(args, ctx):
        try:
            ctx.race(ctx.step(lambda: 1), timeout=1)
        except WorkflowError as exc:
            return str(exc)

    async def go():
        t = await Tools(define_workflow_tool("m", "", Note, body)).start()
        call = await t.call("m", {})
        await t.h.run_until_parked()
        assert "only waits can race" in t.result(call).text

    run(go())


def test_the_return_value_is_the_result():
    async def body(args, ctx):
        ctx.progress({"stage": "half"})  # never the result
        return None if args.note == "none" else {"ok": True}

    async def go():
        t = await Tools(define_workflow_tool("v", "", Note, body)).start()
        a = await t.call("v", {})
        b = await t.call("v", {"note": "none"}, key="b")
        await t.h.run_until_parked()
        assert json.loads(t.result(a).text) == {"ok": True}
        assert t.result(b).text == "null"

    run(go())
