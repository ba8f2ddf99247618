"""Run limits of an agent (bide.agent.limits) on the SQLite store: a run that reaches its cap
on model rounds, tool calls or tokens ends with that cap's outcome, in the transcript and in
the submission; the tools past a cap never run; the next queued input still starts."""

from __future__ import annotations

import pytest
from kit import Kit, run
from pydantic import BaseModel

from bide.agent import Agent, Conversations
from bide.agent.limits import RunLimits, RunUsage, before_request, before_tools
from bide.agent.providers import ModelRequest
from bide.agent.providers.base import ModelResponse, ToolCallRequest, Usage
from bide.agent.providers.scripted import ScriptedProvider, reply
from bide.engine.store.sqlite import SQLiteStore
from bide.tools import ToolRegistry, define_tool


class NoArgs(BaseModel):
    pass


def counting_tool(calls: list[str]):
    async def tick(args: NoArgs, api) -> str:
        calls.append("tick")
        return f"tick {len(calls)}"

    return define_tool("tick", "count", NoArgs, tick)


def calls_per_answer(n: int, tokens: int = 0):
    """A model that always asks for ``n`` more ticks, each response costing ``tokens``."""

    def respond(request: ModelRequest) -> ModelResponse:
        round_no = sum(1 for m in request.messages if m.role == "assistant")
        return ModelResponse(
            tool_calls=[
                ToolCallRequest(id=f"r{round_no}-{i}", name="tick", arguments={}) for i in range(n)
            ],
            stop_reason="tool_use",
            usage=Usage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2),
        )

    return respond


class Session:
    def __init__(self, provider, limits: RunLimits):
        self.ticks: list[str] = []
        self.agent = Agent(provider, ToolRegistry([counting_tool(self.ticks)]), limits=limits)
        self.kit = Kit(*self.agent.task_kinds(), store=SQLiteStore())
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)

    async def ask(self, text: str = "go", rid: str = "r1") -> None:
        await self.h.open()
        await self.conv.create("c1")
        await self.conv.submit("c1", text, request_id=rid)
        await self.h.run_until_parked()

    def generation(self):
        # Every assistant entry names the run (generation task) that wrote it.
        [run_id] = {e["run"] for e in self.conv.entries("c1") if e["type"] == "assistant"}
        return self.h.task(run_id)


def ended_by_limit(s: Session, message: str, limit: str) -> None:
    """The user sees ``message`` as the submission's error and as the transcript's last entry;
    the generation failed with it."""
    submission = s.conv.submission("c1", "r1")
    assert submission is not None
    assert submission.status == "unanswered"
    assert submission.error == message
    last = {k: v for k, v in s.conv.entries("c1")[-1].items() if k not in ("i", "at")}
    assert last == {"type": "error", "text": message, "code": "run_limit", "limit": limit}
    outcome = s.generation().state.outcome
    assert outcome.status == "failed" and outcome.error == message
    assert s.conv.head("c1").run is None  # the conversation is free again


def test_a_run_stops_at_its_limit_of_model_rounds():
    provider = ScriptedProvider(calls_per_answer(1))
    # Each test sets the other caps as backstops: with the cap under test broken, the run
    # ends at another limit (a clear failure) instead of looping forever.
    s = Session(provider, RunLimits(max_model_rounds=3, max_tool_calls=10))
    run(s.ask())
    ended_by_limit(s, "stopped: the run reached its limit of 3 model rounds", "model_rounds")
    assert len(provider.requests) == 3  # never a fourth request
    assert len(s.ticks) == 3


def test_a_run_stops_at_its_limit_of_tool_calls_and_the_calls_past_it_never_run():
    provider = ScriptedProvider(calls_per_answer(2))
    s = Session(provider, RunLimits(max_model_rounds=10, max_tool_calls=3))
    run(s.ask())
    message = "stopped: the run reached its limit of 3 tool calls"
    ended_by_limit(s, message, "tool_calls")
    assert len(s.ticks) == 2  # the first round's two; the second round's would make 4
    refused = [e for e in s.conv.entries("c1") if e.get("code") == "run_limit"][:-1]
    assert [(e["type"], e["call_id"], e["text"]) for e in refused] == [
        ("tool_result", "r1-0", f"not run: {message}"),
        ("tool_result", "r1-1", f"not run: {message}"),
    ]
    assert all(e["is_error"] for e in refused)


def test_a_run_stops_at_its_limit_of_tokens():
    provider = ScriptedProvider(calls_per_answer(1, tokens=40))
    s = Session(provider, RunLimits(max_model_rounds=10, max_tool_calls=10, max_tokens=100))
    run(s.ask())
    ended_by_limit(s, "stopped: the run reached its limit of 100 tokens", "tokens")
    # 40 and 80 tokens: both rounds ran their tool; the third response (120) ran none.
    assert len(provider.requests) == 3
    assert len(s.ticks) == 2


def test_an_answer_within_the_limits_stands():
    one_tick = ModelResponse(
        tool_calls=[ToolCallRequest(id="t1", name="tick", arguments={})],
        stop_reason="tool_use",
        usage=Usage(input_tokens=3, output_tokens=3),
    )
    provider = ScriptedProvider([one_tick, reply("done")])
    s = Session(provider, RunLimits(max_model_rounds=2, max_tool_calls=1, max_tokens=10))
    run(s.ask())
    submission = s.conv.submission("c1", "r1")
    assert submission is not None and submission.status == "done"
    assert submission.answer == "done"


def test_limits_count_per_run_and_the_next_queued_input_starts_after_a_stop():
    provider = ScriptedProvider(calls_per_answer(1))
    s = Session(provider, RunLimits(max_model_rounds=2, max_tool_calls=10))

    async def go():
        await s.h.open()
        await s.conv.create("c1")
        await s.conv.submit("c1", "first", request_id="r1")
        await s.conv.submit("c1", "second", request_id="r2")  # queued behind the first
        await s.h.run_until_parked()

    run(go())
    message = "stopped: the run reached its limit of 2 model rounds"
    for rid in ("r1", "r2"):
        submission = s.conv.submission("c1", rid)
        assert submission is not None
        assert (submission.status, submission.error) == ("unanswered", message)
    # Each run got its own two rounds: the second run did not inherit the first's count.
    assert len(provider.requests) == 4


def test_before_request_and_before_tools():
    limits = RunLimits(max_model_rounds=5, max_tool_calls=4, max_tokens=100)
    assert before_request(limits, RunUsage(4, 4, 99)) is None
    assert before_request(limits, RunUsage(5, 0, 0)).limit == "model_rounds"
    assert before_request(limits, RunUsage(1, 0, 100)).limit == "tokens"
    assert before_tools(limits, RunUsage(1, 4, 0)) is None
    assert before_tools(limits, RunUsage(1, 5, 0)).limit == "tool_calls"
    assert before_tools(limits, RunUsage(1, 1, 100)).limit == "tokens"


@pytest.mark.parametrize("field", ["max_model_rounds", "max_tool_calls", "max_tokens"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_bad_limits_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"RunLimits.{field} must be a positive integer"):
        RunLimits(**{field: value})
