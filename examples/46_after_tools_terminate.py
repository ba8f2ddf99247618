"""An after_tools task that steers on "go on" and ends the run on "stop"
(design 001 ch. IX).

After every tool round a triage task asks a supervisor what to do. "go on" submits a steer
that the next boundary places before the next request; "stop" completes with
``{"terminate": true}`` and the run ends with the tool-calling answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import Completed, SignalValue, Sleeping, Terminal, define_signal, define_task
from bide.agent import Agent, Conversations, GenerationHooks, StartTasks, hook_task, submit_in
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool
from bide.tools import ToolRegistry, define_tool


class Step(BaseModel):
    n: int


class Say(BaseModel):
    say: str


SUPERVISOR = define_signal("app.supervisor", 1, Say)
AGENT: dict[str, Agent] = {}


async def triage(task: Any, rt: Any) -> None:
    state = await rt.read_signal(SUPERVISOR, "say")
    if not isinstance(state, SignalValue):
        await rt.commit(Sleeping(checkpoint="triage", signals=(SUPERVISOR.key("say"),)))
        return
    if state.value.say == "stop":
        await rt.commit(Terminal(outcome=Completed(result={"terminate": True})))
        return

    def steer(tx: Any) -> Terminal:
        submit_in(
            AGENT["agent"],
            tx,
            task.input["conversation"],
            "go on",
            request_id=f"steer:{task.id}",
            when_busy="steer",
            source=f"task:{task.id}",
        )
        return Terminal(outcome=Completed(result={}))

    await rt.commit(steer)


TRIAGE = define_task("app.triage", 1, lambda _: "triage", {"triage": triage})


def script(request: ModelRequest) -> ModelResponse:
    steps = sum(1 for m in request.messages if m.role == "tool")
    return call_tool(
        "work", {"n": steps + 1}, id=f"w{steps + 1}", text=f"Working on step {steps + 1}"
    )


async def work(args: Step, api: Any) -> str:
    return f"step {args.n} done"


def build() -> Agent:
    async def after_tools(assistant: dict[str, Any], results: list[Any], api: Any) -> Any:
        return StartTasks([hook_task(TRIAGE, {"conversation": "c1", "round": assistant["i"]})])

    agent = Agent(
        ScriptedProvider(script),
        ToolRegistry([define_tool("work", "Do one step", Step, work)]),
        hooks=[GenerationHooks("triage", after_tools=after_tools)],
        hook_tasks=[TRIAGE],
    )
    AGENT["agent"] = agent
    return agent


async def scenario(world: World) -> dict[str, Any]:
    agent = world.services.setdefault("agent", build())
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    cid = await conv.create("c1")
    await conv.submit(cid, "Do the migration", request_id="r1")
    # The supervisor says "go on" after the first round and "stop" after any later one.
    # (Decided from the round, not from how often we asked, so a rerun after a crash agrees.)
    while True:
        await h.run_until_parked()
        waiting = [r for r in h.live_tasks.values() if r.kind == "app.triage"]
        if not waiting:
            break
        for triage_task in waiting:
            answer = "go on" if triage_task.input["round"] == 2 else "stop"
            result = await h.signal(triage_task.id, SUPERVISOR, "say", {"say": answer})
            world.say(f"   after a tool round the supervisor says {answer!r} -> {result}")
    for entry in conv.entries(cid):
        world.say(f"   {entry['type']:>11}: {entry['text']}")
    sub = conv.submission(cid, "r1")
    assert sub is not None
    world.say(f"   the run ended: {sub.status}, answer {sub.answer!r}")
    return {"answer": sub.answer, "texts": [e["text"] for e in conv.entries(cid)]}


def check(result: dict[str, Any], world: World) -> None:
    """One steer, then terminate with the tool-calling answer of the second round."""
    assert result["texts"].count("go on") == 1
    assert result["answer"] == "Working on step 2"


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: 'go on' steered, 'stop' ended the run with the tool-calling answer")
