"""Lifecycle controllers (design 002): at most one per session, run-terminal notifications,
and a lifecycle-managed session refuses fork and clone."""

from __future__ import annotations

import pytest
from kit import Kit, run

from bide import BideError, Harness, SQLiteStore
from bide.agent import Agent, Conversations, subagent_tool
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.controller import (
    RUN_NOTIFIER,
    ControllerExists,
    LifecycleManaged,
    attach_controller,
    clone_session,
    controller_hooks,
    controller_task,
    fork_session,
    read_controller,
    run_notices,
)


def _record(tx, envelope):
    log = tx.get_doc("bot/log") or []
    tx.put_doc("bot/log", [*log, {k: envelope[k] for k in ("type", "conversation", "answer")}])


BOT = controller_task("test.bot", _record)
OTHER = controller_task("test.other-bot", _record)


def script(request: ModelRequest):
    last = request.messages[-1]
    if last.role == "user" and last.text == "delegate":
        return call_tool("subagent", {"task": "sub task"}, id=f"d{len(request.messages)}")
    if last.role == "tool":
        return reply(f"main got: {last.text}")
    return reply(f"echo: {last.text}")


class Session:
    def __init__(self, store=None, session="s1"):
        self.agent = Agent(
            ScriptedProvider(script), hooks=[controller_hooks()], hook_tasks=[RUN_NOTIFIER]
        )
        self.agent.tools.add(subagent_tool(self.agent))
        self.kit = Kit(*self.agent.task_kinds(), BOT, OTHER, store=store)
        if session != "s1":
            self.kit.h = Harness(
                self.kit.store, session, self.kit.kinds, clock=self.kit.clock, ids=self.kit.ids
            )
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def start(self):
        await self.h.open()
        await self.conv.create("main")

    def log(self):
        return self.h.get_doc("bot/log") or []


def test_at_most_one_controller_per_session():
    async def go():
        s = Session()
        await s.start()
        first = await attach_controller(s.h, BOT, "main")
        again = await attach_controller(s.h, BOT, "main")
        assert again == first  # a retried attach converges on the same controller
        seq = s.h.seq
        with pytest.raises(ControllerExists, match="at most one"):
            await attach_controller(s.h, OTHER, "main")
        with pytest.raises(ControllerExists):
            await attach_controller(s.h, BOT, "another-conversation")
        assert s.h.seq == seq  # refused: nothing written
        assert read_controller(s.h).task == first.task
        assert [r.kind for r in s.h.live_tasks.values()] == ["test.bot"]

    run(go())


def test_the_controller_is_notified_when_a_run_of_its_conversation_ends():
    async def go():
        s = Session()
        await s.start()
        await s.conv.submit("main", "before any controller", request_id="r0")
        await s.h.run_until_parked()
        await attach_controller(s.h, BOT, "main")
        await s.h.run_until_parked()
        assert s.log() == []  # runs before the controller are not replayed
        await s.conv.submit("main", "hello", request_id="r1")
        await s.h.run_until_parked()
        assert s.log() == [{"type": "run_ended", "conversation": "main", "answer": "echo: hello"}]
        await s.conv.submit("main", "delegate", request_id="r2")
        await s.h.run_until_parked()
        # the subagent's own run (another conversation) is not the controller's business
        assert [e["answer"] for e in s.log()] == ["echo: hello", "main got: echo: sub task"]
        assert [n["seq"] for n in run_notices(s.h)] == [0, 1]
        assert {r.kind for r in s.h.live_tasks.values()} == {"test.bot"}

    run(go())


def test_notifications_survive_a_restart_of_a_parked_controller():
    async def go():
        s = Session()
        await s.start()
        await attach_controller(s.h, BOT, "main")
        await s.h.run_until_parked()
        h = await s.kit.reopen()
        conv = Conversations(h, s.agent)
        await conv.submit("main", "after restart", request_id="r1")
        await h.run_until_parked()
        assert [e["answer"] for e in h.get_doc("bot/log")] == ["echo: after restart"]

    run(go())


def test_a_lifecycle_managed_session_cannot_be_forked_or_cloned():
    async def go():
        s = Session()
        await s.start()
        await s.conv.submit("main", "hello", request_id="r1")
        await s.h.run_until_parked()
        await attach_controller(s.h, BOT, "main")
        with pytest.raises(LifecycleManaged, match="cannot be cloned: a copy would have"):
            clone_session(s.kit.store, "s1", "copy")
        with pytest.raises(LifecycleManaged, match=r"lifecycle-managed by controller .test\.bot."):
            fork_session(s.kit.store, "s1", "branch", "main")
        assert s.kit.store.head("copy") == 0 and s.kit.store.head("branch") == 0

    run(go())


def test_clone_copies_conversations_and_the_copy_continues_on_its_own():
    async def go():
        store = SQLiteStore()
        s = Session(store)
        await s.start()
        await s.conv.submit("main", "one", request_id="r1")
        await s.h.run_until_parked()
        await s.conv.submit("main", "delegate", request_id="r2")
        await s.h.run_until_parked()
        assert clone_session(store, "s1", "s2") == ["main"]  # the child conversation stays
        copy = Session(store, session="s2")
        await copy.h.open()
        assert copy.h.live_tasks == {}  # documents only, no task is copied
        assert copy.conv.entries("main") == s.conv.entries("main")
        assert copy.conv.head("main").run is None
        assert (await copy.conv.submit("main", "one", request_id="r1")).status == "done"  # dedup
        await copy.conv.submit("main", "two", request_id="r3")
        await copy.h.run_until_parked()
        assert copy.conv.entries("main")[-1]["text"] == "echo: two"
        assert len(s.conv.entries("main")) == len(copy.conv.entries("main")) - 2
        with pytest.raises(BideError, match="already exists"):
            clone_session(store, "s1", "s2")

    run(go())


def test_fork_branches_one_conversation_at_an_entry():
    async def go():
        store = SQLiteStore()
        s = Session(store)
        await s.start()
        for n, text in enumerate(["first", "second", "third"]):
            await s.conv.submit("main", text, request_id=f"r{n}")
            await s.h.run_until_parked()
        assert fork_session(store, "s1", "b1", "main", through_entry=2) == 2
        branch = Session(store, session="b1")
        await branch.h.open()
        assert [e["text"] for e in branch.conv.entries("main")] == ["first", "echo: first"]
        assert store.get_doc("b1", "lineage").body == {
            "kind": "fork",
            "source": "s1",
            "conversation": "main",
            "through_entry": 2,
        }
        await branch.conv.submit("main", "another way", request_id="x")
        await branch.h.run_until_parked()
        assert branch.conv.entries("main")[-1]["text"] == "echo: another way"

    run(go())


def test_bindings_alone_do_not_make_a_session_lifecycle_managed():
    async def go():
        from pydantic import BaseModel

        from bide.bindings import BindingSet, Pull, Receiver, WorkflowBinding
        from bide.tools import ToolRegistry

        class Note(BaseModel):
            text: str

        bindings = BindingSet(
            [WorkflowBinding("file", "", Note, Pull(Receiver("archive")), "accepted")]
        )
        registry = ToolRegistry(bindings.tools)
        k = Kit(registry.task, *bindings.task_kinds())
        await k.h.open()
        await k.h.create_task(registry.task, registry.call("file", {"text": "x"}))
        await k.h.run_until_parked()
        assert k.h.list_docs("invocation/")
        assert clone_session(k.store, "s1", "s2") == []  # allowed (no conversations to copy)

    run(go())
