"""The session event stream (bide.engine.events) and run-terminal notices: events are written
in the commit that does what they report, numbered in order, bounded in size; a controller
hears of every run end (answer, failure, Stop)."""

from __future__ import annotations

import pytest
from kit import HOUR, Kit, run
from pydantic import BaseModel

from bide.agent import Agent, Conversations
from bide.agent.providers import ModelError, ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.approvals import Approvals, approval_required
from bide.controller import attach_controller, controller_task, run_notices
from bide.engine.events import (
    EVENT_PREFIX,
    MAX_EVENT_BYTES,
    MAX_FIELD_BYTES,
    event_key,
    read_events,
)
from bide.engine.limits import ValueRefused
from bide.promises import Promises, promise_task_kinds
from bide.tools import ToolRegistry, define_tool


class Deploy(BaseModel):
    service: str


def _record(tx, envelope):
    log = tx.get_doc("bot/log") or []
    tx.put_doc("bot/log", [*log, {k: envelope.get(k) for k in ("status", "answer", "error")}])


BOT = controller_task("test.events-bot", _record)


def script(request: ModelRequest):
    last = request.messages[-1]
    if last.role == "user" and last.text == "deploy":
        return call_tool("deploy", {"service": "api"}, id="c1")
    if last.role == "user" and last.text == "fail":
        raise ModelError("the model is gone", retryable=False, code="gone")
    if last.role == "tool":
        return reply(f"tool said: {last.text}")
    return reply(f"echo: {last.text}")


class Session:
    def __init__(self):
        async def deploy(args: Deploy, api):
            return f"deployed {args.service}"

        base = define_tool("deploy", "Deploy", Deploy, deploy, replay="safe")
        registry = ToolRegistry([approval_required(base, timeout=HOUR)])
        self.agent = Agent(ScriptedProvider(script), registry)
        self.kit = Kit(*self.agent.task_kinds(), *promise_task_kinds(), BOT)
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def start(self, *, controller: bool = False):
        await self.h.open()
        await self.conv.create("main")
        if controller:
            await attach_controller(self.h, BOT, "main")
        await self.h.run_until_parked()

    async def say(self, text: str, rid: str):
        await self.conv.submit("main", text, request_id=rid)
        await self.h.run_until_parked()

    def events(self, after: int = 0):
        return read_events(self.kit.store, "s1", after=after, limit=1000)


def test_events_are_numbered_in_commit_order_and_say_what_happened():
    async def go():
        s = Session()
        await s.start()
        await s.say("hello", "r1")
        await s.say("deploy", "r2")
        [approval] = Approvals(s.h).pending()
        assert await Approvals(s.h).decide(approval.id, True, by="ana") == "decided"
        await s.h.run_until_parked()
        events = s.events()
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [e["type"] for e in events] == [
            "run_ended",
            "approval_requested",
            "approval_decided",
            "run_ended",
        ]
        first, requested, decided, last = events
        assert first["status"] == "done" and first["answer"] == "echo: hello"
        assert requested["approvals"] == [approval.id]
        assert requested["arguments"] == {"service": "api"}
        assert decided["decision"]["by"] == "ana" and decided["status"] == "approved"
        assert last["answer"] == "tool said: deployed api"
        # A reader resumes after the last event it saw.
        assert [e["seq"] for e in read_events(s.kit.store, "s1", after=2, limit=9)] == [3, 4]
        assert event_key(3) == EVENT_PREFIX + "000000000003"

    run(go())


def test_the_controller_hears_of_answers_failures_and_stops():
    async def go():
        s = Session()
        await s.start(controller=True)
        await s.say("hello", "r1")
        await s.say("fail", "r2")
        await s.say("deploy", "r3")  # parks on its approval
        await s.conv.stop("main")
        await s.h.run_until_parked()
        log = s.h.get_doc("bot/log")
        assert [n["status"] for n in log] == ["done", "failed", "stopped"]
        assert log[0]["answer"] == "echo: hello"
        assert "the model is gone" in log[1]["error"]
        assert [n["seq"] for n in run_notices(s.h)] == [0, 1, 2]
        ended = [e for e in s.events() if e["type"] == "run_ended"]
        assert [e["status"] for e in ended] == ["done", "failed", "stopped"]
        # The Stop closed the pending approval (its call ends before the run), and said so.
        assert [e["type"] for e in s.events()][-2:] == ["approval_closed", "run_ended"]

    run(go())


def test_promise_events_are_bounded_and_written_only_with_their_change():
    async def go():
        s = Session()
        await s.start()
        promises = Promises(s.h)
        await promises.create("p-small")
        await promises.create("p-big")
        await promises.create("p-deep")
        assert await promises.resolve("p-small", {"ok": True}) == "settled"
        assert await promises.resolve("p-big", "x" * (MAX_FIELD_BYTES * 4)) == "settled"
        assert await promises.resolve("p-small", "again") == "ignored"  # no second event
        deep: object = 1
        for _ in range(200):
            deep = [deep]
        with pytest.raises(ValueRefused):
            await promises.resolve("p-deep", deep)  # refused: no event for it either
        assert await promises.reject("p-deep", "no") == "settled"
        events = s.events()
        assert [(e["promise"], e["status"]) for e in events] == [
            ("p-small", "resolved"),
            ("p-big", "resolved"),
            ("p-deep", "rejected"),
        ]
        assert events[0]["value"] == {"ok": True}
        assert events[1]["value"] == {"omitted": True, "bytes": MAX_FIELD_BYTES * 4 + 2}
        assert all(len(str(e)) < MAX_EVENT_BYTES for e in events)

    run(go())
