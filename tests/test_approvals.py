"""Approvals (design 002): a subject, an arguments reference and exactly one decision; a run
resumes only when every pending approval has a decision; cancellation closes pending ones."""

from __future__ import annotations

from kit import ANSWER, HOUR, Kit, run
from pydantic import BaseModel

from bide import SignalValue
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, call_tools, reply
from bide.approvals import (
    ApprovalDecision,
    ApprovalRecord,
    Approvals,
    DecideResult,
    approval_required,
    close_approval,
    decide_approval,
)
from bide.tools import Sleep, ToolRegistry, define_tool, result_of


class Deploy(BaseModel):
    services: list[str]


def record(**changes) -> ApprovalRecord:
    base = ApprovalRecord(
        id="ap-1",
        call_task="t-1",
        tool="deploy",
        subject="api",
        arguments_ref="approval-args/t-1",
        arguments_digest="d",
    )
    return base.model_copy(update=changes)


YES = ApprovalDecision(approved=True, by="ana")
NO = ApprovalDecision(approved=False, by="bo", note="freeze")


def test_an_approval_takes_exactly_one_decision():
    result, decided = decide_approval(record(), YES, 10.0)
    assert result == DecideResult.DECIDED and decided.status == "approved"
    assert decide_approval(decided, NO, 11.0) == (DecideResult.ALREADY_DECIDED, None)
    closed = close_approval(record(), "stopped", 5.0)
    assert closed.status == "closed" and decide_approval(closed, YES, 6.0)[0] == "closed"
    assert close_approval(decided, "stopped", 12.0) is None  # a decision is never undone
    late, expired = decide_approval(record(deadline=10.0), YES, 10.0)
    assert late == DecideResult.CLOSED and expired.status == "closed"
    assert decide_approval(None, YES, 1.0) == (DecideResult.NOT_FOUND, None)


class Session:
    def __init__(self, script, *tools, concurrency="exclusive"):
        self.ran = []

        async def deploy(args: Deploy, api):
            self.ran.append(list(args.services))
            return f"deployed {', '.join(args.services)}"

        base = define_tool(
            "deploy", "Deploy services", Deploy, deploy, replay="safe", concurrency=concurrency
        )
        self.registry = ToolRegistry(
            [approval_required(base, subjects=lambda a: a.services, timeout=HOUR), *tools]
        )
        self.provider = ScriptedProvider(script)
        self.agent = Agent(self.provider, self.registry)
        self.kit = Kit(*self.agent.task_kinds())
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def start(self, text):
        await self.h.open()
        await self.conv.create("c1")
        await self.conv.submit("c1", text, request_id="r1")
        await self.h.run_until_parked()

    def approvals(self):
        return {a.subject: a for a in Approvals(self.h).all()}


def deploying(request: ModelRequest):
    last = request.messages[-1]
    if last.role == "user":
        return call_tool("deploy", {"services": ["api", "web"]}, id="d1")
    return reply(f"tool said: {last.text}")


def test_the_run_resumes_only_when_every_pending_approval_has_a_decision():
    async def go():
        s = Session(deploying)
        await s.start("ship it")
        pending = Approvals(s.h).pending()
        assert sorted(a.subject for a in pending) == ["api", "web"]
        api, web = s.approvals()["api"], s.approvals()["web"]
        args = s.h.get_doc(api.arguments_ref)
        assert args["arguments"] == {"services": ["api", "web"]}
        assert args["digest"] == api.arguments_digest == web.arguments_digest
        requests = len(s.provider.requests)

        assert await Approvals(s.h).decide(api.id, True, by="ana") == "decided"
        await s.h.run_until_parked()
        assert len(s.provider.requests) == requests and s.ran == []  # still one pending
        assert [a.subject for a in Approvals(s.h).pending()] == ["web"]
        assert await Approvals(s.h).decide(api.id, False) == "already_decided"

        assert await Approvals(s.h).decide(web.id, True, by="bo") == "decided"
        await s.h.run_until_parked()
        assert s.ran == [["api", "web"]]
        assert s.conv.submission("c1", "r1").answer == "tool said: deployed api, web"
        assert {a.status for a in Approvals(s.h).all()} == {"approved"}

    run(go())


def test_a_round_of_two_parallel_calls_waits_for_both_approvals():
    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tools(
                [("deploy", {"services": ["api"]}, "a"), ("deploy", {"services": ["web"]}, "b")]
            )
        return reply("both settled")

    async def go():
        s = Session(script, concurrency="parallel_safe")  # both calls park at once
        await s.start("two calls")
        approvals = s.approvals()
        assert sorted(a.subject for a in Approvals(s.h).pending()) == ["api", "web"]
        await Approvals(s.h).decide(approvals["web"].id, False, by="bo", note="freeze")
        await s.h.run_until_parked()
        assert s.conv.head("c1").run is not None  # the other call still waits for its decision
        await Approvals(s.h).decide(approvals["api"].id, True)
        await s.h.run_until_parked()
        assert s.ran == [["api"]]
        results = [e for e in s.conv.entries("c1") if e["type"] == "tool_result"]
        texts = sorted(e["text"] for e in results)
        assert texts == ["deploy was not approved: web denied by bo (freeze)", "deployed api"]
        assert s.conv.submission("c1", "r1").answer == "both settled"

    run(go())


def test_exclusive_calls_ask_in_batch_order_and_the_run_waits_for_each():
    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tools(
                [("deploy", {"services": ["api"]}, "a"), ("deploy", {"services": ["web"]}, "b")]
            )
        return reply("both settled")

    async def go():
        s = Session(script)  # exclusive: the second call starts after the first settled
        await s.start("two calls")
        [first] = Approvals(s.h).pending()
        assert first.subject == "api"
        await Approvals(s.h).decide(first.id, True)
        await s.h.run_until_parked()
        [second] = Approvals(s.h).pending()
        assert second.subject == "web" and s.conv.head("c1").run is not None
        await Approvals(s.h).decide(second.id, True)
        await s.h.run_until_parked()
        assert s.ran == [["api"], ["web"]]
        assert s.conv.submission("c1", "r1").answer == "both settled"

    run(go())


def test_cancelling_the_run_closes_pending_approvals():
    async def go():
        s = Session(deploying)
        await s.start("ship it")
        api = s.approvals()["api"]
        await Approvals(s.h).decide(api.id, True)
        await s.h.run_until_parked()
        await s.conv.stop("c1", "Stop")
        await s.h.run_until_parked()
        statuses = {k: (a.status, a.closed_reason) for k, a in s.approvals().items()}
        assert statuses == {
            "api": ("approved", None),
            "web": ("closed", "the call was cancelled"),
        }
        assert Approvals(s.h).pending() == []
        assert await Approvals(s.h).decide(s.approvals()["web"].id, True) == "closed"
        assert s.ran == []

    run(go())


def test_no_decision_before_the_deadline_closes_them_and_blocks_the_call():
    async def go():
        s = Session(deploying)
        await s.start("ship it")
        assert s.h.wake().at == s.kit.clock.now() + HOUR
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert {a.status for a in s.approvals().values()} == {"closed"}
        answer = s.conv.submission("c1", "r1").answer
        assert answer == "tool said: deploy: no decision before the deadline"
        assert await Approvals(s.h).decide(s.approvals()["api"].id, True) == "closed"

    run(go())


def test_pending_approvals_survive_a_restart():
    async def go():
        s = Session(deploying)
        await s.start("ship it")
        h = await s.kit.reopen()
        for approval in Approvals(h).pending():
            assert await Approvals(h).decide(approval.id, True) == "decided"
        await h.run_until_parked()
        assert s.ran == [["api", "web"]]

    run(go())


def test_the_approved_tool_may_park_itself_afterwards():
    class Q(BaseModel):
        question: str

    async def ask(args: Q, api):
        state = await api.read_signal(ANSWER, "a")
        if isinstance(state, SignalValue):
            return f"answer: {state.value.text}"
        return Sleep(checkpoint={"asked": True}, signals=[ANSWER.key("a")])

    async def go():
        registry = ToolRegistry([approval_required(define_tool("ask", "", Q, ask, replay="safe"))])
        k = Kit(registry.task)
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("ask", {"question": "?"}))
        await k.h.run_until_parked()
        [approval] = Approvals(k.h).pending()
        assert approval.subject == "ask"
        await Approvals(k.h).decide(approval.id, True)
        await k.h.run_until_parked()
        assert k.h.task(t).state.checkpoint["checkpoint"] == {
            "stage": "run",
            "inner": {"asked": True},
        }
        await k.h.signal(t, ANSWER, "a", {"text": "42"})
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(t)).text == "answer: 42"

    run(go())
