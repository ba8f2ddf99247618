"""Agent sessions: submissions, the generation loop, retries, subagents, hooks, Stop."""

from __future__ import annotations

from kit import ANSWER, Kit, run
from pydantic import BaseModel

from bide import Completed, SignalValue, Sleeping, Terminal, define_task
from bide.agent import (
    Agent,
    Conversations,
    GenerationHooks,
    StartTasks,
    append_entry,
    hook_task,
    subagent_tool,
    submit_in,
)
from bide.agent.providers import ModelError, ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.tools import Sleep, ToolRegistry, define_tool


class Ask(BaseModel):
    question: str


async def ask_person(args, api):
    state = await api.read_signal(ANSWER, "answer")
    if isinstance(state, SignalValue):
        return state.value.text
    return Sleep(signals=[ANSWER.key("answer")])


def last_user(request: ModelRequest) -> str:
    return [m for m in request.messages if m.role == "user"][-1].text


def echo(request: ModelRequest):
    return reply(f"echo: {last_user(request)}")


class Session:
    def __init__(self, provider, *, tools=(), hooks=(), hook_tasks=(), **agent_kw):
        self.registry = ToolRegistry(tools)
        self.agent = Agent(provider, self.registry, hooks=hooks, hook_tasks=hook_tasks, **agent_kw)
        self.kit = Kit(*self.agent.task_kinds())
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def start(self, cid="c1"):
        await self.h.open()
        return await self.conv.create(cid)

    def texts(self, cid="c1"):
        return [(e["type"], e.get("text")) for e in self.conv.entries(cid)]

    def live_tools(self):
        return [r for r in self.h.live_tasks.values() if r.kind == "bide.tool"]


def test_a_full_round_with_a_parked_tool_resumed_by_a_signal():
    async def go():
        provider = ScriptedProvider(
            [
                call_tool("ask_person", {"question": "ok?"}, id="c-1"),
                lambda r: reply(f"they said {last_tool_result(r)}"),
            ]
        )
        s = Session(provider, tools=[define_tool("ask_person", "", Ask, ask_person)])
        cid = await s.start()
        await s.conv.submit(cid, "ask them", request_id="r1")
        wake = await s.h.run_until_parked()
        assert wake.active is False and wake.at is None  # parked on a signal only
        [tool] = s.live_tools()
        await s.h.signal(tool.id, ANSWER, "answer", {"text": "yes"})
        await s.h.run_until_parked()
        assert s.texts() == [
            ("user", "ask them"),
            ("assistant", ""),
            ("tool_result", "yes"),
            ("assistant", "they said yes"),
        ]
        sub = s.conv.submission(cid, "r1")
        assert sub.status == "done" and sub.answer == "they said yes"
        assert s.h.live_tasks == {}
        # the model saw the tool's schema
        assert provider.requests[0].tools[0].name == "ask_person"

    run(go())


def test_the_agent_provides_the_transcript_port_its_tool_calls_write_results_through():
    registry = ToolRegistry([define_tool("ask_person", "", Ask, ask_person)])
    assert registry.transcript is None  # a bare registry: its calls name no conversation
    Agent(ScriptedProvider(echo), registry)
    assert registry.transcript is append_entry


def test_request_id_dedup():
    async def go():
        s = Session(ScriptedProvider(echo))
        cid = await s.start()
        first = await s.conv.submit(cid, "hello", request_id="same")
        again = await s.conv.submit(cid, "hello again", request_id="same")
        assert again.content == "hello" and first.id == again.id
        await s.h.run_until_parked()
        assert s.texts() == [("user", "hello"), ("assistant", "echo: hello")]
        assert (await s.conv.submit(cid, "x", request_id="same")).status == "done"

    run(go())


def _busy_session(tools_extra=()):
    """A session whose first run waits on a person, so later input finds it busy."""
    provider = ScriptedProvider(
        lambda r: (
            call_tool("ask_person", {"question": "?"}, id=f"c-{len(r.messages)}")
            if r.messages[-1].role == "user" and last_user(r) == "start"
            else reply(f"answered after: {last_user(r)}")
        )
    )
    return Session(provider, tools=[define_tool("ask_person", "", Ask, ask_person)])


def test_follow_up_waits_for_the_run_and_reject_is_refused():
    # A steer interrupts the run instead: tests/test_steer.py.
    async def go():
        s = _busy_session()
        cid = await s.start()
        await s.conv.submit(cid, "start", request_id="r1")
        await s.h.run_until_parked()
        follow = await s.conv.submit(cid, "afterwards", request_id="r2")
        rejected = await s.conv.submit(cid, "now!", request_id="r4", when_busy="reject")
        assert (follow.status, rejected.status) == ("queued", "unanswered")
        [tool] = s.live_tools()
        await s.h.signal(tool.id, ANSWER, "answer", {"text": "fine"})
        await s.h.run_until_parked()
        assert s.texts() == [
            ("user", "start"),
            ("assistant", ""),
            ("tool_result", "fine"),
            ("assistant", "answered after: start"),
            ("user", "afterwards"),  # the follow-up starts a new run afterwards
            ("assistant", "answered after: afterwards"),
        ]
        statuses = {rid: s.conv.submission(cid, rid).status for rid in ("r1", "r2", "r4")}
        assert statuses == {"r1": "done", "r2": "done", "r4": "unanswered"}

    run(go())


def test_model_errors_retry_by_parking_on_time_then_give_up():
    async def go():
        throttled = ModelError("slow down", retryable=True, code="ThrottlingException")
        provider = ScriptedProvider([throttled, throttled, reply("finally")])
        s = Session(provider, backoff_base=10.0)
        cid = await s.start()
        await s.conv.submit(cid, "hi", request_id="r1")
        wake = await s.h.run_until_parked()
        [gen] = [r for r in s.h.live_tasks.values() if r.kind == "bide.generation"]
        assert isinstance(gen.state, Sleeping) and wake.at == s.kit.clock.now() + 10
        s.kit.clock.advance(10)
        wake = await s.h.run_until_parked()
        assert wake.at == s.kit.clock.now() + 20  # backoff doubles
        s.kit.clock.advance(20)
        await s.h.run_until_parked()
        assert s.conv.submission(cid, "r1").answer == "finally"

        fatal = Session(ScriptedProvider([ModelError("bad", retryable=False, code="Validation")]))
        cid = await fatal.start()
        await fatal.conv.submit(cid, "hi", request_id="r1")
        await fatal.h.run_until_parked()
        sub = fatal.conv.submission(cid, "r1")
        assert sub.status == "unanswered" and "Validation" in sub.error

    run(go())


def _subagent_session():
    def script(request: ModelRequest):
        last = request.messages[-1]
        if last.role == "user" and last.text == "delegate":
            return call_tool("subagent", {"task": "ask the person"}, id="sub-1")
        if last.role == "user" and last.text == "ask the person":
            return call_tool("ask_person", {"question": "?"}, id="ask-1")
        if last.role == "tool":
            return reply(f"got: {last.text}")
        return reply("?")

    s = Session(ScriptedProvider(script), tools=[define_tool("ask_person", "", Ask, ask_person)])
    s.registry.add(subagent_tool(s.agent))
    return s


def test_subagent_parks_while_its_child_waits_for_a_person():
    async def go():
        s = _subagent_session()
        cid = await s.start()
        await s.conv.submit(cid, "delegate", request_id="r1")
        wake = await s.h.run_until_parked()
        assert wake.active is False and wake.at is None
        tools = {r.input["name"]: r for r in s.live_tools()}
        assert tools["subagent"].state.status == "sleeping"
        assert tools["ask_person"].state.status == "sleeping"
        await s.h.signal(tools["ask_person"].id, ANSWER, "answer", {"text": "blue"})
        await s.h.run_until_parked()
        assert s.conv.submission(cid, "r1").answer == "got: got: blue"
        assert s.h.live_tasks == {}

    run(go())


def test_subagent_answering_before_the_park_wakes_it_at_once():
    async def go():
        # the child answers immediately (in the same pass), before the tool has parked
        provider = ScriptedProvider(
            lambda r: (
                call_tool("subagent", {"task": "quick"}, id="s1")
                if last_user(r) == "go" and r.messages[-1].role == "user"
                else reply(
                    "child done" if last_user(r) == "quick" else f"parent: {r.messages[-1].text}"
                )
            )
        )
        s = Session(provider)
        s.registry.add(subagent_tool(s.agent))
        cid = await s.start()
        await s.conv.submit(cid, "go", request_id="r1")
        await s.h.run_until_parked()
        assert s.conv.submission(cid, "r1").answer == "parent: child done"

    run(go())


def test_stop_while_a_subagent_is_parked_leaves_nothing_live():
    async def go():
        s = _subagent_session()
        cid = await s.start()
        await s.conv.submit(cid, "delegate", request_id="r1")
        await s.conv.submit(cid, "later", request_id="r2")  # queued follow-up
        await s.h.run_until_parked()
        assert len(s.h.live_tasks) >= 4  # generation, subagent call, child generation, ask
        assert await s.conv.stop(cid, "Stop") is True
        await s.h.run_until_parked()
        assert s.h.live_tasks == {}
        assert s.conv.submission(cid, "r1").status == "unanswered"
        assert s.conv.submission(cid, "r2").status == "unanswered"
        assert s.conv.head(cid).run is None

    run(go())


async def _review(task, rt):
    verdict = task.input["verdict"]
    result = {} if verdict == "ok" else {"continue": f"A reviewer found problems: {verdict}"}
    await rt.commit(Terminal(outcome=Completed(result=result)))


REVIEW = define_task("app.review", 1, lambda _: "review", {"review": _review})


def test_on_yield_review_sends_the_agent_back_with_continue():
    verdicts = iter(["missing tests", "ok"])

    async def on_yield(answer, api):
        return StartTasks([hook_task(REVIEW, {"verdict": next(verdicts)})])

    async def go():
        s = Session(
            ScriptedProvider(echo),
            hooks=[GenerationHooks("reviewer", on_yield=on_yield)],
            hook_tasks=[REVIEW],
        )
        cid = await s.start()
        await s.conv.submit(cid, "write code", request_id="r1")
        await s.h.run_until_parked()
        assert s.texts() == [
            ("user", "write code"),
            ("assistant", "echo: write code"),
            ("user", "A reviewer found problems: missing tests"),
            ("assistant", "echo: A reviewer found problems: missing tests"),
        ]
        assert s.conv.submission(cid, "r1").answer.startswith("echo: A reviewer")

    run(go())


def test_a_user_steer_wins_over_a_continue():
    async def slow_review(task, rt):
        state = await rt.read_signal(ANSWER, "verdict")
        if state is None:
            await rt.commit(Sleeping(checkpoint="review", signals=(ANSWER.key("verdict"),)))
            return
        await rt.commit(Terminal(outcome=Completed(result={"continue": "reviewer says redo"})))

    slow = define_task("app.slow-review", 1, lambda _: "review", {"review": slow_review})

    async def on_yield(answer, api):
        return StartTasks([hook_task(slow, {})]) if "redo" not in answer["text"] else None

    async def go():
        s = Session(
            ScriptedProvider(echo),
            hooks=[GenerationHooks("reviewer", on_yield=on_yield)],
            hook_tasks=[slow],
        )
        cid = await s.start()
        await s.conv.submit(cid, "draft", request_id="r1")
        await s.h.run_until_parked()
        await s.conv.submit(cid, "user says ship it", request_id="r2", when_busy="steer")
        [review] = [r for r in s.h.live_tasks.values() if r.kind == "app.slow-review"]
        await s.h.signal(review.id, ANSWER, "verdict", {"text": "x"})
        await s.h.run_until_parked()
        texts = [t for _, t in s.texts()]
        assert "user says ship it" in texts and "reviewer says redo" not in texts

    run(go())


def test_after_tools_terminate_ends_the_run_with_the_tool_calling_answer():
    decisions = iter(["go on", "stop"])

    async def echo_tool(args, api):
        return args.question

    holder = {}

    async def triage(task, rt):
        if task.input["say"] == "stop":
            await rt.commit(Terminal(outcome=Completed(result={"terminate": True})))
            return

        def build(tx):
            submit_in(
                holder["agent"],
                tx,
                "c1",
                "go on",
                request_id=f"steer:{task.id}",
                when_busy="steer",
                source=f"task:{task.id}",
            )
            return Terminal(outcome=Completed(result={}))

        await rt.commit(build)

    triage_kind = define_task("app.triage", 1, lambda _: "t", {"t": triage})

    async def after_tools(assistant, results, api):
        return StartTasks([hook_task(triage_kind, {"say": next(decisions)})])

    async def go():
        calls = iter(range(100))
        s = Session(
            ScriptedProvider(
                lambda r: call_tool("echo", {"question": "x"}, id=f"e{next(calls)}", text="calling")
            ),
            tools=[define_tool("echo", "", Ask, echo_tool)],
            hooks=[GenerationHooks("triage", after_tools=after_tools)],
            hook_tasks=[triage_kind],
        )
        holder["agent"] = s.agent
        cid = await s.start()
        await s.conv.submit(cid, "work", request_id="r1")
        await s.h.run_until_parked()
        texts = s.texts()
        assert ("user", "go on") in texts  # the first triage steered
        sub = s.conv.submission(cid, "r1")
        assert (
            sub.status == "done" and sub.answer == "calling"
        )  # ended with the tool-calling answer
        assert s.h.live_tasks == {}

    run(go())
