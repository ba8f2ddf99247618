"""Delegation (design 002): agent_run (joined) and agent_spawn (a promise), a child that gets
its brief and profile only, and root-scoped limits on depth, total, open children, deadlines."""

from __future__ import annotations

import pytest
from kit import ANSWER, Kit, run
from pydantic import BaseModel

from bide import DefinitionError, SignalValue
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, UserMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, call_tools, reply
from bide.delegation import (
    Delegation,
    DelegationLimits,
    DelegationTree,
    check_limits,
    read_tree,
)
from bide.promises import Promises, promise_tools
from bide.tools import Sleep, ToolRegistry, define_tool

RESEARCHER = "You are a careful researcher."


class Ask(BaseModel):
    question: str


async def ask_person(args: Ask, api):
    state = await api.read_signal(ANSWER, "answer")
    if isinstance(state, SignalValue):
        return state.value.text
    return Sleep(signals=[ANSWER.key("answer")])


def script(request: ModelRequest):
    last = request.messages[-1]
    n = len(request.messages)
    if request.system is None:  # the parent
        if last.role == "tool":
            return reply(f"parent got: {last.text}")
        verb, _, rest = last.text.partition(" ")
        if verb == "run":
            return call_tool("agent_run", {"brief": rest, "profile": "researcher"}, id=f"r{n}")
        if verb == "spawn":
            return call_tool("agent_spawn", {"brief": rest, "profile": "researcher"}, id=f"s{n}")
        if verb == "spawn3":
            return call_tools(
                [
                    ("agent_spawn", {"brief": f"topic {i}", "profile": "researcher"}, f"s{n}.{i}")
                    for i in range(3)
                ]
            )
        if verb == "await":
            return call_tool("promise_await", {"promise_id": rest}, id=f"a{n}")
        if verb == "bogus":
            return call_tool("agent_run", {"brief": "x", "profile": "admin"}, id=f"b{n}")
        return reply("?")
    # a child
    if last.role == "tool":
        return reply(f"child got: {last.text}")
    verb, _, rest = request.messages[0].text.partition(" ")
    if verb == "ask":
        return call_tool("ask_person", {"question": rest}, id=f"q{n}")
    if verb == "nest":
        return call_tool("agent_run", {"brief": rest, "profile": "researcher"}, id=f"n{n}")
    return reply(f"answer to {request.messages[0].text}")


class Session:
    def __init__(self, limits=None):
        self.delegation = Delegation({"researcher": RESEARCHER}, limits or DelegationLimits())
        registry = ToolRegistry(
            [
                *self.delegation.tools,
                *promise_tools(),
                define_tool("ask_person", "", Ask, ask_person, replay="safe"),
            ]
        )
        self.provider = ScriptedProvider(script)
        self.agent = Agent(self.provider, registry)
        self.delegation.bind(self.agent)
        self.kit = Kit(*self.agent.task_kinds(), *self.delegation.task_kinds())
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)
        self.n = 0

    async def start(self):
        await self.h.open()
        await self.conv.create("root")

    async def say(self, text):
        self.n += 1
        await self.conv.submit("root", text, request_id=f"r{self.n}")
        await self.h.run_until_parked()
        return self.conv.submission("root", f"r{self.n}")

    def tree(self) -> DelegationTree:
        return read_tree(self.h, "root")

    def child_requests(self):
        return [r for r in self.provider.requests if r.system == RESEARCHER]

    def ask_calls(self):
        return [
            r
            for r in self.h.live_tasks.values()
            if r.kind == "bide.tool" and r.input["name"] == "ask_person"
        ]


def test_agent_run_returns_the_childs_answer_and_the_child_sees_only_its_brief():
    async def go():
        s = Session()
        await s.start()
        await s.conv.submit("root", "secret context the child must not see", request_id="r0")
        await s.h.run_until_parked()
        sub = await s.say("run summarize the release")
        assert sub.answer == "parent got: answer to summarize the release"
        [first] = s.child_requests()
        assert first.messages == (UserMessage(text="summarize the release"),)
        assert first.system == RESEARCHER
        tree = s.tree()
        assert (tree.total, tree.open) == (1, 0)
        [child] = tree.children.values()
        assert (child.depth, child.mode, child.status) == (1, "run", "answered")
        assert s.h.live_tasks == {}

    run(go())


def test_agent_spawn_returns_a_promise_the_parent_awaits_later():
    async def go():
        s = Session()
        await s.start()
        sub = await s.say("spawn ask which colour")
        assert "promise handle: p-" in sub.answer  # the run ended; the child works on
        pid = sub.answer.split("promise handle: ")[1].split(".")[0]
        [ask] = s.ask_calls()
        assert Promises(s.h).get(pid).status == "open"
        assert s.tree().open == 1

        waiting = s.conv.submit("root", f"await {pid}", request_id="await")
        await waiting
        await s.h.run_until_parked()
        assert s.conv.submission("root", "await").status == "placed"  # parked on the promise
        await s.h.signal(ask.id, ANSWER, "answer", {"text": "teal"})
        await s.h.run_until_parked()
        answer = s.conv.submission("root", "await").answer
        assert answer == f"parent got: promise {pid} resolved: child got: teal"
        tree = s.tree()
        assert tree.open == 0 and [c.status for c in tree.children.values()] == ["answered"]
        assert s.h.live_tasks == {}

    run(go())


def test_depth_limit():
    async def go():
        s = Session(DelegationLimits(max_depth=1))
        await s.start()
        sub = await s.say("run nest deeper")
        assert sub.answer == (
            "parent got: child got: agent_run refused: depth limit: a child at depth 2 exceeds "
            "max_depth 1"
        )
        tree = s.tree()
        assert tree.total == 1 and list(tree.refusals.values()) == [
            "depth limit: a child at depth 2 exceeds max_depth 1"
        ]

    run(go())


def test_total_descendants_limit():
    async def go():
        s = Session(DelegationLimits(max_descendants=2))
        await s.start()
        await s.say("spawn3")
        results = [e["text"] for e in s.conv.entries("root") if e["type"] == "tool_result"]
        assert [r.startswith("spawned") for r in results] == [True, True, False]
        assert (
            results[2] == "agent_spawn refused: descendant limit: the tree already started 2 of 2"
        )
        assert s.tree().total == 2 and s.tree().open == 0  # the two children answered

    run(go())


def test_concurrently_open_limit():
    async def go():
        s = Session(DelegationLimits(max_open=1))
        await s.start()
        await s.say("spawn ask first")
        refused = await s.say("spawn ask second")
        assert refused.answer == (
            "parent got: agent_spawn refused: open limit: 1 children are open (max_open 1)"
        )
        [ask] = s.ask_calls()
        await s.h.signal(ask.id, ANSWER, "answer", {"text": "done"})
        await s.h.run_until_parked()
        assert s.tree().open == 0
        again = await s.say("spawn ask third")
        assert "promise handle" in again.answer and s.tree().open == 1

    run(go())


def test_a_spawned_childs_deadline_expires_its_promise_and_closes_it():
    async def go():
        s = Session(DelegationLimits(child_deadline=60))
        await s.start()
        sub = await s.say("spawn ask forever")
        pid = sub.answer.split("promise handle: ")[1].split(".")[0]
        assert s.h.wake().at == s.kit.clock.now() + 60
        s.kit.clock.advance(60)
        await s.h.run_until_parked()
        assert Promises(s.h).get(pid).status == "expired"
        assert s.h.live_tasks == {}  # the supervisor, the child's run and its call are closed
        [child] = s.tree().children.values()
        assert child.status == "expired" and s.tree().open == 0

    run(go())


def test_agent_run_deadline_closes_the_child_and_fails_the_call():
    async def go():
        s = Session(DelegationLimits(child_deadline=60))
        await s.start()
        await s.say("run ask forever")
        s.kit.clock.advance(60)
        await s.h.run_until_parked()
        answer = s.conv.submission("root", "r1").answer
        assert answer == (
            "parent got: agent_run: the child did not answer before its deadline; it was closed"
        )
        assert s.h.live_tasks == {}
        assert [c.status for c in s.tree().children.values()] == ["expired"]

    run(go())


def test_tree_deadline_refuses_new_children():
    async def go():
        s = Session(DelegationLimits(tree_deadline=100))
        await s.start()
        await s.say("run first")
        s.kit.clock.advance(100)
        late = await s.say("run second")
        assert late.answer == (
            "parent got: agent_run refused: deadline limit: the delegation tree's deadline has "
            "passed"
        )

    run(go())


def test_stopping_the_parent_closes_an_agent_run_child_and_releases_its_slot():
    async def go():
        s = Session()
        await s.start()
        await s.say("run ask something")
        assert s.tree().open == 1
        await s.conv.stop("root", "Stop")
        await s.h.run_until_parked()
        assert s.h.live_tasks == {}
        assert [c.status for c in s.tree().children.values()] == ["cancelled"]
        assert s.tree().open == 0

    run(go())


def test_cancelling_a_spawn_promise_closes_the_child():
    async def go():
        s = Session()
        await s.start()
        sub = await s.say("spawn ask something")
        pid = sub.answer.split("promise handle: ")[1].split(".")[0]
        await Promises(s.h).cancel(pid, "not needed")
        await s.h.run_until_parked()
        assert s.h.live_tasks == {}
        assert [c.status for c in s.tree().children.values()] == ["cancelled"]

    run(go())


def test_a_spawned_child_survives_a_restart():
    async def go():
        s = Session()
        await s.start()
        sub = await s.say("spawn ask after the crash")
        pid = sub.answer.split("promise handle: ")[1].split(".")[0]
        h = await s.kit.reopen()
        [ask] = [
            r
            for r in h.live_tasks.values()
            if r.kind == "bide.tool" and r.input["name"] == "ask_person"
        ]
        await h.signal(ask.id, ANSWER, "answer", {"text": "still here"})
        await h.run_until_parked()
        assert Promises(h).get(pid).value == "child got: still here"

    run(go())


def test_an_unknown_profile_is_refused_before_anything_starts():
    async def go():
        s = Session()
        await s.start()
        sub = await s.say("bogus")
        assert sub.answer == "parent got: unknown profile 'admin'; admitted profiles: researcher"
        assert s.tree() is None

    run(go())


def test_limits_rules_in_order_and_definition_checks():
    tree = DelegationTree(
        root="r", max_depth=2, max_descendants=3, max_open=2, child_deadline=60, deadline=100
    )
    assert check_limits(tree, 1, 0) is None
    assert check_limits(tree, 3, 0).startswith("depth limit")
    assert check_limits(tree.model_copy(update={"total": 3}), 1, 0).startswith("descendant")
    assert check_limits(tree.model_copy(update={"open": 2}), 1, 0).startswith("open limit")
    assert check_limits(tree, 1, 100).startswith("deadline limit")
    with pytest.raises(DefinitionError):
        DelegationLimits(max_open=0)
    with pytest.raises(DefinitionError):
        Delegation({})
