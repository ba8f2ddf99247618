"""A review on yield sends the agent back with ``continue``; a user message wins over it
(design 001 ch. IX).

An ``on_yield`` hook starts a review task for every final answer. The first review finds a
problem and completes with ``{"continue": ...}``: the agent goes back to work. In a second
conversation the review waits for a person, and meanwhile the user steers: the user's message
is placed and the reviewer's continue is dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import Completed, SignalValue, Sleeping, Terminal, define_signal, define_task
from bide.agent import Agent, Conversations, GenerationHooks, StartTasks, hook_task
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, reply


class Verdict(BaseModel):
    ok: bool
    notes: str = ""


VERDICT = define_signal("app.review-verdict", 1, Verdict)


async def review(task: Any, rt: Any) -> None:
    state = await rt.read_signal(VERDICT, "verdict")
    if not isinstance(state, SignalValue):
        await rt.commit(Sleeping(checkpoint="review", signals=(VERDICT.key("verdict"),)))
        return
    verdict = state.value
    result = {} if verdict.ok else {"continue": f"A reviewer found problems: {verdict.notes}"}
    await rt.commit(Terminal(outcome=Completed(result=result)))


REVIEW = define_task("app.review", 1, lambda _: "review", {"review": review})


def script(request: ModelRequest) -> ModelResponse:
    last = [m for m in request.messages if m.role == "user"][-1].text
    if "problems" in last:
        return reply("Here is the function, now with tests.")
    if "ship" in last:
        return reply("Shipping it as it is.")
    if "lexer" in last:
        return reply("Here is the lexer.")
    return reply("Here is the function.")


def build() -> Agent:
    async def on_yield(answer: dict[str, Any], api: Any) -> Any:
        if answer["text"].startswith("Shipping"):
            return None
        return StartTasks([hook_task(REVIEW, {"answer": answer["text"]})])

    return Agent(
        ScriptedProvider(script),
        hooks=[GenerationHooks("reviewer", on_yield=on_yield)],
        hook_tasks=[REVIEW],
    )


async def deliver_verdict(h: Any, verdict: dict[str, Any], answer: str | None = None) -> str | None:
    """Answer the review that is waiting (of ``answer`` when given), if one is.

    Naming the answer keeps the outside world idempotent: when the scenario runs again after
    a crash, a verdict meant for the first answer is never given to the review of a later one.
    """
    for record in h.live_tasks.values():
        if record.kind != "app.review" or record.state.status != "sleeping":
            continue
        if answer is not None and (record.input or {}).get("answer") != answer:
            continue
        return str(await h.signal(record.id, VERDICT, "verdict", verdict))
    return None


async def scenario(world: World) -> dict[str, Any]:
    agent = world.services.setdefault("agent", build())
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)

    world.say("1. A reviewer sends the agent back once, then accepts:")
    one = await conv.create("auto")
    await conv.submit(one, "Write a parser", request_id="a1")
    await h.run_until_parked()
    verdicts = (
        ("Here is the function.", {"ok": False, "notes": "add tests"}),
        ("Here is the function, now with tests.", {"ok": True}),
    )
    for answer, verdict in verdicts:
        result = await deliver_verdict(h, verdict, answer)
        if result is not None:
            world.say(f"   verdict {verdict} -> {result}")
        await h.run_until_parked()
    for entry in conv.entries(one):
        world.say(f"   {entry['type']:>9}: {entry['text']}")

    world.say("2. A person reviews; the user steers before the verdict:")
    two = await conv.create("manual")
    await conv.submit(two, "Write a lexer", request_id="m1")
    await h.run_until_parked()
    await conv.submit(two, "Never mind, ship it", request_id="m2", when_busy="steer")
    world.say("   the user steers while the review waits for a person")
    result = await deliver_verdict(h, {"ok": False, "notes": "rename things"}, "Here is the lexer.")
    if result is not None:
        world.say(f"   the reviewer's verdict arrives -> {result}")
    await h.run_until_parked()
    for entry in conv.entries(two):
        world.say(f"   {entry['type']:>9}: {entry['text']}")
    return {
        "auto": [e["text"] for e in conv.entries(one)],
        "manual": [e["text"] for e in conv.entries(two)],
    }


def check(result: dict[str, Any], world: World) -> None:
    """The review's continue ran the agent again; the user's steer won over the review."""
    assert result["auto"][-1] == "Here is the function, now with tests."
    assert "A reviewer found problems: add tests" in result["auto"]
    assert "Never mind, ship it" in result["manual"]
    assert not any("rename things" in text for text in result["manual"])


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: continue sent the agent back; a user message won over the reviewer")
