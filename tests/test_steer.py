"""A steer interrupts the run (design 003 "Semantics"): the run's parked tool calls are
cancelled (their ``cancel`` and a workflow body's ``finally`` run) and the same run answers
the steer next; a follow-up still waits; a Stop after a steer does not drop it."""

from __future__ import annotations

import pytest
from ci_fake import CI_RESULT, FakeCi, run_ci_tool
from kit import Kit, run

from bide import SQLiteStore
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, call_tools, reply
from bide.testing import Crash, FaultyStore
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool, install

PASSED = {"status": "passed", "log_url": "https://ci.example/7"}


def script(request: ModelRequest) -> ModelResponse:
    """'start' calls run_ci; anything else is answered with what the model was last told."""
    last = request.messages[-1]
    if last.role == "user" and last.text == "start":
        return call_tool("run_ci", {"ref": "main"}, id="c-1")
    return reply(f"answered: {last.text}")


class Steered:
    def __init__(self, respond=script, store=None) -> None:
        self.ci = FakeCi()
        self.provider = ScriptedProvider(respond)
        self.registry = ToolRegistry([run_ci_tool(self.ci, "unsafe")])
        self.agent = Agent(self.provider, self.registry)
        self.kit = Kit(*self.agent.task_kinds(), store=store)
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def start(self) -> Steered:
        await self.h.open()
        await self.conv.create("c1")
        await self.conv.submit("c1", "start", request_id="r1")
        await self.h.run_until_parked()
        return self

    def texts(self):
        return [(e["type"], e.get("text")) for e in self.conv.entries("c1")]

    def status(self, rid):
        return self.conv.submission("c1", rid).status

    def call(self):
        [record] = [r for r in self.h.live_tasks.values() if r.kind == "bide.tool"]
        return record


def test_a_steer_cancels_the_parked_call_and_the_run_answers_it_next():
    async def go():
        s = await Steered().start()
        call = s.call()
        assert call.state.status == "sleeping" and s.ci.cancelled == []
        steer = await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
        assert steer.status == "queued"
        await s.h.run_until_parked()
        assert s.ci.cancelled == ["build-1"]  # the call's cancel ran
        assert s.texts() == [
            ("user", "start"),
            ("assistant", ""),
            ("tool_result", "interrupted by a steer"),
            ("user", "use the dev branch"),
            ("assistant", "answered: use the dev branch"),
        ]
        # The steer's text is what the model was sent next, right after the call's result.
        last = s.provider.requests[-1].messages
        assert [m.role for m in last[-2:]] == ["tool", "user"]
        assert last[-1].text == "use the dev branch" and last[-2].is_error
        assert (s.status("r1"), s.status("r2")) == ("done", "done")
        assert s.conv.submission("c1", "r2").answer == "answered: use the dev branch"
        assert s.h.live_tasks == {} and s.conv.head("c1").run is None
        # The webhook arriving after the call ended changes nothing.
        assert await s.h.signal(call.id, CI_RESULT, "done", PASSED) == "closed"

    run(go())


def test_a_follow_up_still_waits_for_the_parked_call():
    async def go():
        s = await Steered().start()
        call = s.call()
        await s.conv.submit("c1", "and then deploy", request_id="r2")
        await s.h.run_until_parked()
        assert s.h.task(call.id).state.status == "sleeping" and s.ci.cancelled == []
        assert s.status("r2") == "queued"
        await s.h.signal(call.id, CI_RESULT, "done", PASSED)
        await s.h.run_until_parked()
        assert s.texts() == [
            ("user", "start"),
            ("assistant", ""),
            ("tool_result", "CI passed: https://ci.example/7"),
            ("assistant", "answered: CI passed: https://ci.example/7"),
            ("user", "and then deploy"),
            ("assistant", "answered: and then deploy"),
        ]
        assert (s.status("r1"), s.status("r2")) == ("done", "done")

    run(go())


def test_a_stop_after_a_steer_does_not_drop_it():
    async def go():
        s = await Steered().start()
        await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
        await s.conv.submit("c1", "and then deploy", request_id="r3")  # a follow-up
        # Stop lands before the run could place the steer (no worker ran in between).
        assert await s.conv.stop("c1", "stopped by the user") is True
        await s.h.run_until_parked()
        assert s.ci.cancelled == ["build-1"]
        assert s.status("r1") == "unanswered"  # what was stopped
        assert s.status("r3") == "unanswered"  # a follow-up goes with the stop, as before
        assert s.status("r2") == "done"  # the steer is answered by the next run
        assert s.texts()[-2:] == [
            ("user", "use the dev branch"),
            ("assistant", "answered: use the dev branch"),
        ]
        assert s.h.live_tasks == {}

    run(go())


def test_a_stop_after_the_steer_was_answered_leaves_it_answered():
    async def go():
        s = await Steered().start()
        await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
        await s.h.run_until_parked()
        assert await s.conv.stop("c1") is False  # nothing is running any more
        assert (s.status("r1"), s.status("r2")) == ("done", "done")

    run(go())


def test_a_steer_that_arrives_while_the_model_answers_starts_none_of_its_calls():
    holder: dict[str, Steered] = {}

    async def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "user" and last.text == "start":
            # The user steers while this request is in flight.
            await holder["s"].conv.submit("c1", "stop that", request_id="r2", when_busy="steer")
            return call_tools([("run_ci", {"ref": "a"}), ("run_ci", {"ref": "b"})])
        return reply(f"answered: {last.text}")

    class Async(ScriptedProvider):
        async def complete(self, request):
            self.requests.append(request)
            return await respond(request)

    async def go():
        s = Steered()
        s.provider = Async(script)
        s.agent.provider = s.provider
        holder["s"] = s
        await s.start()
        assert s.ci.triggers == 0  # no call ran at all
        texts = s.texts()
        assert texts[2:4] == [
            ("tool_result", "not run: interrupted by a steer"),
            ("tool_result", "not run: interrupted by a steer"),
        ]
        assert texts[4:] == [("user", "stop that"), ("assistant", "answered: stop that")]
        assert (s.status("r1"), s.status("r2")) == ("done", "done")
        assert s.h.live_tasks == {}

    run(go())


def test_a_steer_runs_a_parked_workflow_bodys_finally():
    log: list[tuple[str, bool]] = []

    async def render(args, ctx):
        hook = await ctx.webhook()
        try:
            await hook
            return "rendered"
        finally:
            log.append(("finally", ctx.cancelled))
            if ctx.cancelled:
                await ctx.step(lambda: log.append(("stopped the farm", True)), name="stop")

    def respond(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "start":
            return call_tool("render", {}, id="w-1")
        return reply(f"answered: {last.text}")

    async def go():
        from test_workflow_support import Note

        registry = ToolRegistry([define_workflow_tool("render", "", Note, render)])
        agent = Agent(ScriptedProvider(respond), registry)
        install(agent)
        kit = Kit(*agent.task_kinds())
        kit.h.services["webhook_base_url"] = "https://bide.example"
        conv = Conversations(kit.h, agent)
        await kit.h.open()
        await conv.create("c1")
        await conv.submit("c1", "start", request_id="r1")
        await kit.h.run_until_parked()
        assert log == [("finally", False)]  # parking unwinds the body, not as a cancellation
        await conv.submit("c1", "never mind", request_id="r2", when_busy="steer")
        await kit.h.run_until_parked()
        assert log[1:] == [("finally", True), ("stopped the farm", True)]
        entries = [(e["type"], e.get("text")) for e in conv.entries("c1")]
        assert entries[2:] == [
            ("tool_result", "interrupted by a steer"),
            ("user", "never mind"),
            ("assistant", "answered: never mind"),
        ]
        assert conv.submission("c1", "r2").status == "done" and kit.h.live_tasks == {}

    run(go())


def _steer_commits() -> int:
    """How many commits the story makes from the steer on (without a crash)."""
    store = FaultyStore(SQLiteStore())
    s = Steered(store=store)

    async def go():
        await s.start()
        base = store.commits
        await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
        await s.h.run_until_parked()
        return store.commits - base

    return run(go())


async def _crash_story(fail_at: int, when: str) -> tuple[Steered, FaultyStore]:
    store = FaultyStore(SQLiteStore())
    s = Steered(store=store)
    await s.start()
    store.fail_at, store.when = store.commits + fail_at, when

    async def reopen():
        await s.kit.reopen()
        s.h = s.kit.h
        s.conv = Conversations(s.h, s.agent)

    try:
        await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
    except Crash:
        # The host command died: its caller retries it with the same request id.
        await reopen()
        await s.conv.submit("c1", "use the dev branch", request_id="r2", when_busy="steer")
    try:
        await s.h.run_until_parked()
    except Crash:
        await reopen()
        await s.h.run_until_parked()
    return s, store


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_any_commit_of_a_steer_loses_nothing(when):
    """The process dies at every commit from the steer on (before it lands, or after it
    landed and before the process learned so); a new process on the same store finishes the
    story: the build is cancelled, the steer is answered once, nothing is left live."""
    total = _steer_commits()
    assert total >= 4  # the steer, the call's abort, the interrupted round, the answer

    async def go():
        for fail_at in range(1, total + 1):
            s, store = await _crash_story(fail_at, when)
            assert store.crashed, fail_at
            # cancel runs at least once: a crash before the call's result commit runs it again
            # (as for Stop), which is why cancels are written to be idempotent.
            assert set(s.ci.cancelled) == {"build-1"}, fail_at
            assert (s.status("r1"), s.status("r2")) == ("done", "done"), fail_at
            texts = s.texts()
            assert texts.count(("user", "use the dev branch")) == 1, fail_at
            assert texts.count(("tool_result", "interrupted by a steer")) == 1, fail_at
            assert texts[-1] == ("assistant", "answered: use the dev branch"), fail_at
            assert s.h.live_tasks == {}, fail_at

    run(go())


def test_a_call_that_steers_its_own_conversation_is_not_interrupted():
    """A tool that submits a steer into the conversation it runs in cannot abort itself in
    its own commit: it finishes, and the steer is placed at the boundary after it."""
    holder: dict[str, Agent] = {}

    async def notify(args, api):
        def steer(tx):
            from bide.agent import submit_in

            submit_in(
                holder["agent"], tx, "c1", "user says hurry", request_id="n1", when_busy="steer"
            )

        await api.write(steer)
        return "noted"

    def respond(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "start":
            return call_tool("notify", {}, id="n-1")
        return reply(f"answered: {last.text}")

    async def go():
        from test_workflow_support import Note

        from bide.tools import define_tool

        agent = Agent(
            ScriptedProvider(respond), ToolRegistry([define_tool("notify", "", Note, notify)])
        )
        holder["agent"] = agent
        kit = Kit(*agent.task_kinds())
        conv = Conversations(kit.h, agent)
        await kit.h.open()
        await conv.create("c1")
        await conv.submit("c1", "start", request_id="r1")
        await kit.h.run_until_parked()
        entries = [(e["type"], e.get("text")) for e in conv.entries("c1")]
        assert entries[2:] == [
            ("tool_result", "noted"),
            ("user", "user says hurry"),
            ("assistant", "answered: user says hurry"),
        ]
        assert kit.h.live_tasks == {}

    run(go())
