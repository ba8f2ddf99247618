"""Background workflow tools (design 000 §3.1, §4, §10): the receipt, silent progress,
messages to the parent, completion and failure notifications, the task index, task_cancel,
the session ending."""

from __future__ import annotations

import json

from kit import HOUR, run
from test_workflow_support import Note, Session, Tools, deps_for

from bide.agent.providers.scripted import call_tool, reply
from bide.app import App
from bide.service import workflow as wf_service
from bide.workflow import (
    background_tasks,
    define_workflow_tool,
    end_session_in,
    pending_asks,
    task_cancel_tool,
)


def script(request):
    """Calls the tool named by the user's message; reports what it sees."""
    last = request.messages[-1]
    if last.role == "user" and last.text.startswith("call "):
        name, _, note = last.text[5:].partition(" ")
        return call_tool(name, {"note": note}, id=f"call-{name}-{len(request.messages)}")
    if last.role == "tool":
        return reply(f"tool said {last.text}")
    return reply(f"heard: {last.text}")


def tool_results(s):
    return [e for e in s.conv.entries("main") if e["type"] == "tool_result"]


async def called(name, body) -> Session:
    """A session whose one background tool ``name`` runs ``body``: the agent calls it once
    (request r1) and the session runs until it parks."""
    s = await Session(script, define_workflow_tool(name, "", Note, body, lifetime="task")).start()
    await s.say(f"call {name}", "r1")
    await s.h.run_until_parked()
    return s


def user_texts(s) -> list[str]:
    """The texts of the conversation's user entries, in order."""
    return [text for kind, text, _ in s.entries() if kind == "user"]


def test_progress_stays_silent_and_the_receipt_does_not_depend_on_it():
    async def chatty(args, ctx, task):
        for n in range(3):
            ctx.progress({"step": n})  # ordinary progress: stream only
        await ctx.sleep(hours=1)
        ctx.progress({"step": "last"})
        return "done"

    async def go():
        s = await called("chatty", chatty)
        [result] = tool_results(s)
        receipt = json.loads(result["text"])
        assert receipt == {"status": "working", "task_id": receipt["task_id"]}
        task_id = receipt["task_id"]
        assert s.progress.last(task_id) == {"step": 2}
        # Nothing but the turn itself: no wake of the parent, no submission, no entry.
        assert [kind for kind, _, _ in s.entries()] == [
            "user",
            "assistant",
            "tool_result",
            "assistant",
        ]
        assert [sub["id"] for sub in s.submissions()] == ["r1"]
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert s.progress.last(task_id) == {"step": "last"}
        assert len(tool_results(s)) == 1  # the receipt exactly once, whatever the body did
        assert s.entries()[-2][1].endswith("finished: done")

    run(go())


def test_the_receipt_is_the_same_when_the_body_fails_at_once():
    async def broken(args, ctx, task):
        raise RuntimeError("boom")

    async def go():
        s = await called("broken", broken)
        [result] = tool_results(s)
        assert json.loads(result["text"])["status"] == "working" and not result["is_error"]
        [info] = background_tasks(s.h)
        assert (info.status, info.error) == ("failed", "RuntimeError: boom")
        user = [(text, source) for kind, text, source in s.entries() if kind == "user"]
        assert user[-1] == (
            f"[background task {info.id} (broken)] failed: RuntimeError: boom",
            f"task:{info.id}",
        )

    run(go())


def test_post_message_reaches_the_parent_once_and_queues_while_it_is_busy():
    async def messenger(args, ctx, task):
        await task.post_message("halfway there")
        await ctx.sleep(hours=1)
        await task.post_message("almost done")
        return "all done"

    async def go():
        s = await called("messenger", messenger)
        [info] = background_tasks(s.h)
        label = f"[background task {info.id} (messenger)]"
        subs = {sub["id"]: sub for sub in s.submissions()}
        first = subs[f"task:{info.id}:m1"]
        # Posted while the turn that called the tool was still running: queued, then placed.
        assert (first["source"], first["status"], first["when_busy"]) == (
            f"task:{info.id}",
            "done",
            "follow_up",
        )
        assert first["content"] == f"{label} halfway there"
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert user_texts(s) == [
            "call messenger",
            f"{label} halfway there",
            f"{label} almost done",
            f"{label} finished: all done",
        ]
        assert background_tasks(s.h)[0].messages == 2

    run(go())


def test_a_rerun_after_a_crash_posts_no_message_twice():
    async def messenger(args, ctx, task):
        await task.post_message("hello")
        await ctx.sleep(hours=1)
        return "ok"

    async def go():
        s = await called("messenger", messenger)
        s.h = await s.kit.reopen()  # the process dies and another takes the session over
        s.conv.harness = s.h
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert sum(text.endswith("hello") for text in user_texts(s)) == 1

    run(go())


def test_background_tasks_are_listed_cancelled_by_task_cancel_and_end_with_the_session():
    cleaned: list[str] = []

    async def worker(args, ctx, task):
        try:
            await ctx.sleep(hours=5)
            return "slept"
        finally:
            if ctx.cancelled:
                await ctx.step(lambda: cleaned.append(args.note) or "ok", name="cleanup")

    def cancel_script(request):
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("cancel "):
            return call_tool(
                "task_cancel", {"task_id": last.text[7:]}, id=f"cx-{len(request.messages)}"
            )
        return script(request)

    async def go():
        s = await Session(
            cancel_script,
            define_workflow_tool("worker", "", Note, worker, lifetime="task"),
            task_cancel_tool(),
        ).start()
        await s.say("call worker a", "r1")
        await s.say("call worker b", "r2")
        await s.say("call worker c", "r3")
        await s.h.run_until_parked()
        by_note = {t.arguments["note"]: t for t in background_tasks(s.h)}
        a, b, c = by_note["a"], by_note["b"], by_note["c"]
        assert [t.status for t in (a, b, c)] == ["working"] * 3
        await s.say(f"cancel {a.id}", "r4")
        await s.h.run_until_parked()
        assert s.entries()[-1][1] == f"tool said task {a.id} cancelled"
        assert cleaned == ["a"]
        assert sorted(await end_session_in(s.h)) == sorted([b.id, c.id])
        await s.h.run_until_parked()
        assert [t.status for t in background_tasks(s.h)] == ["cancelled"] * 3
        assert sorted(cleaned) == ["a", "b", "c"]
        assert s.h.live_tasks == {}
        # Cancellation does not wake the parent; a new background call is refused.
        assert not any("cancelled" in (text or "") for text in user_texts(s))
        await s.say("call worker d", "r5")
        await s.h.run_until_parked()
        assert "the session has ended" in s.entries()[-1][1]

    run(go())


def test_a_background_task_outlives_a_stopped_turn():
    async def slow(args, ctx, task):
        await ctx.sleep(hours=2)
        return "still here"

    async def go():
        s = await called("slow", slow)
        await s.say("hello", "r2")
        await s.conv.stop("main")
        await s.h.run_until_parked()
        s.kit.clock.advance(2 * HOUR)
        await s.h.run_until_parked()
        assert background_tasks(s.h)[0].status == "completed"
        assert s.entries()[-1][1].endswith("finished: still here")

    run(go())


def test_the_service_functions_cancel_end_and_view():
    async def asking(args, ctx, task):
        return (await ctx.ask("ok?", allow_freeform=True)).text

    async def go():
        t = await Tools(define_workflow_tool("asking", "", Note, asking, lifetime="task")).start()
        app = App(tools=t.registry, tasks=list(t.kit.kinds))
        deps = deps_for(t.kit, app)
        first = await t.call("asking", {}, key="1")
        second = await t.call("asking", {}, key="2")
        await t.h.run_until_parked()
        one, two = (t.result(x).details["task_id"] for x in (first, second))
        view = await wf_service.view(deps, "s1")
        assert sorted(a["task_id"] for a in view["asks"]) == sorted([one, two])
        assert [x["status"] for x in view["tasks"]] == ["working", "working"]
        assert await wf_service.cancel_background(deps, "s1", one) == "cancelled"
        assert await wf_service.cancel_background(deps, "s1", "t-nope") == "not_found"
        await t.reopen()
        await t.h.run_until_parked()
        assert await wf_service.cancel_background(deps, "s1", one) == "ended"
        assert [a.task_id for a in pending_asks(t.kit.store, "s1")] == [two]
        assert await wf_service.end_session(deps, "s1") == [two]
        await t.reopen()
        await t.h.run_until_parked()
        assert [x.status for x in background_tasks(t.kit.store, "s1")] == ["cancelled"] * 2
        assert pending_asks(t.kit.store, "s1") == []
        assert ("s1", "cancel-task") in deps.queue.wakes  # armed before it wrote

    run(go())


def test_ending_a_session_with_more_background_tasks_than_one_commit_holds():
    """110 working background tasks: marking them all is more than one commit may hold (the
    SQLite store refuses a commit over 99 items, as DynamoDB does), so the end is written in
    several commits; every one of them is cancelled."""

    async def worker(args, ctx, task):
        await ctx.sleep(hours=5)
        return "slept"

    async def go():
        tool = define_workflow_tool("worker", "", Note, worker, lifetime="task")
        s = await Session(script, tool).start()
        for n in range(110):
            await s.say(f"call worker {n}", f"r{n}")
            await s.h.run_until_parked()
        working = [t.id for t in background_tasks(s.h) if t.status == "working"]
        assert len(working) == 110
        assert sorted(await end_session_in(s.h)) == sorted(working)
        await s.h.run_until_parked()
        assert {t.status for t in background_tasks(s.h)} == {"cancelled"}
        assert await end_session_in(s.h) == []  # ending again changes nothing

    run(go())
