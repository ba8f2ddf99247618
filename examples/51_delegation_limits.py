"""Delegation with root-scoped limits (design 002, delegation).

``agent_run`` hands a brief to a child agent and waits for its answer (joined); ``agent_spawn``
starts one and returns a promise handle at once. A child starts from its brief and its profile
(a system prompt), never from the parent's transcript. The tree under the root conversation is
limited to depth 1, 4 children in all, 1 open at a time, 30 minutes per child; every
reservation and refusal is recorded in the root's delegation document.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import MINUTE, SignalValue, define_signal
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.delegation import Delegation, DelegationLimits, read_tree
from bide.promises import promise_tools
from bide.tools import Sleep, ToolRegistry, define_tool

PROFILES = {
    "researcher": "You research one question and answer in one sentence.",
    "designer": "You settle design questions, asking the designer when needed.",
}


class Question(BaseModel):
    question: str


class Reply(BaseModel):
    text: str


PERSON = define_signal("app.designer-reply", 1, Reply)


async def ask_designer(args: Question, api: Any) -> Any:
    state = await api.read_signal(PERSON, "reply")
    if isinstance(state, SignalValue):
        return state.value.text
    return Sleep(signals=[PERSON.key("reply")])


def script(request: ModelRequest) -> ModelResponse:
    """Parent: one command per message. Children: answer, ask the designer, or nest."""
    last, n = request.messages[-1], len(request.messages)
    if request.system is None:
        if last.role == "tool":
            return reply(f"parent got: {last.text}")
        verb, _, rest = last.text.partition(": ")
        if verb in ("run", "spawn"):
            profile, _, brief = rest.partition(" | ")
            arguments = {"brief": brief, "profile": profile}
            return call_tool(f"agent_{verb}", arguments, id=f"{verb}{n}")
        if verb == "await":
            return call_tool("promise_await", {"promise_id": rest}, id=f"await{n}")
        return reply("?")
    if last.role == "tool":
        return reply(f"child got: {last.text}")
    brief = request.messages[0].text
    if brief.startswith("Ask the designer"):
        return call_tool("ask_designer", {"question": brief}, id=f"ask{n}")
    if brief.startswith("Delegate"):
        arguments = {"brief": "Check the font licence", "profile": "researcher"}
        return call_tool("agent_run", arguments, id=f"nest{n}")
    return reply(f"done: {brief}")


def build() -> tuple[Agent, Delegation]:
    limits = DelegationLimits(
        max_depth=1, max_descendants=4, max_open=1, child_deadline=30 * MINUTE
    )
    delegation = Delegation(PROFILES, limits)
    registry = ToolRegistry(
        [
            *delegation.tools,
            *promise_tools(),
            define_tool("ask_designer", "Ask the designer", Question, ask_designer, replay="safe"),
        ]
    )
    agent = Agent(ScriptedProvider(script), registry)
    return agent, delegation.bind(agent)


async def scenario(world: World) -> dict[str, Any]:
    say = world.say
    agent, delegation = world.services.setdefault("setup", build())
    provider: ScriptedProvider = agent.provider  # type: ignore[assignment]
    h = await world.process([*agent.task_kinds(), *delegation.task_kinds()])
    conv = Conversations(h, agent)
    await conv.create("root")

    async def say_to_agent(text: str, rid: str) -> str:
        await conv.submit("root", text, request_id=rid)
        await h.run_until_parked()
        sub = conv.submission("root", rid)
        return (sub.answer if sub is not None else None) or f"({sub and sub.status})"

    say("1. agent_run: a researcher child answers; the parent waits for it (joined).")
    await conv.submit("root", "(earlier private notes the child must not see)", request_id="r0")
    await h.run_until_parked()
    answer = await say_to_agent("run: researcher | Summarize changes.md", "r1")
    say(f"   {answer}")
    first = next(r for r in provider.requests if r.system == PROFILES["researcher"])
    say(f"   the child's first request: system={first.system!r}")
    say(f"   messages={[m.text for m in first.messages]}  (its brief only)")

    say("2. A child that tries to delegate further hits the depth limit.")
    say(f"   {await say_to_agent('run: researcher | Delegate the licence check', 'r2')}")

    say("3. agent_spawn: a designer child starts; the parent gets a promise handle at once.")
    spawned = await say_to_agent("spawn: designer | Ask the designer which colour to use", "r3")
    handle = spawned.split("promise handle: ")[1].split(".")[0]
    say(f"   {spawned[:70]}...")
    say(f"   a second spawn -> {await say_to_agent('spawn: designer | Pick a font', 'r4')}")

    say("4. Nobody answers the designer's question within the child's 30 minutes.")
    world.at(30 * MINUTE)
    await h.run_until_parked()
    say(f"   {await say_to_agent(f'await: {handle}', 'r5')}")
    say(f"   a fourth child -> {await say_to_agent('run: researcher | One more thing', 'r6')}")
    say(f"   a fifth child -> {await say_to_agent('run: researcher | And another', 'r7')}")

    tree = read_tree(h, "root")
    assert tree is not None
    say("5. The root's delegation document:")
    say(f"   total={tree.total} open={tree.open} max_depth={tree.max_depth}")
    for child in tree.children.values():
        say(f"   - {child.mode} {child.profile} depth {child.depth}: {child.status}")
    for reason in tree.refusals.values():
        say(f"   - refused: {reason}")
    return {
        "statuses": [c.status for c in tree.children.values()],
        "refusals": len(tree.refusals),
        "live": len(h.live_tasks),
    }


def check(result: dict[str, Any], world: World) -> None:
    """Four children ran (one expired); depth, open and total limits each refused one."""
    assert sorted(result["statuses"]) == ["answered", "answered", "answered", "expired"]
    assert result["refusals"] == 3
    assert result["live"] == 0


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: agent_run and agent_spawn under depth, total, open and deadline limits")
