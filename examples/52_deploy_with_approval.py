"""52: deploy, with a person's approval in the middle (design 003, "Define a workflow tool").

``deploy`` is a workflow tool: straight-line code that plans (a step), asks a person to
confirm (``ctx.ask``) and deploys (a step). The ask parks the call, and with it the turn:
nothing runs while the person reads the plan. The answer resumes the call; the body is
replayed from its history, so the plan step does not run again, and the model gets one tool
result. Steps talk to the deployer with their idempotency key, so even a step cut off by a
crash and run again deploys once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import MINUTE
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import ToolRegistry
from bide.workflow import answer_in, define_workflow_tool, install, pending_asks

APPROVE_OR_CANCEL = [
    {"id": "approve", "label": "Deploy", "style": "primary"},
    {"id": "cancel", "label": "Cancel"},
]


class DeployArgs(BaseModel):
    service: str


class FakeDeployer:
    """The deploy service: plans and deployments are idempotent by key."""

    def __init__(self) -> None:
        self.plans: dict[str, dict[str, str]] = {}
        self.deploys: dict[str, str] = {}

    def plan(self, service: str, key: str) -> dict[str, str]:
        return self.plans.setdefault(key, {"service": service, "summary": "3 pods, 1 migration"})

    def apply(self, plan: dict[str, str], key: str) -> str:
        return self.deploys.setdefault(
            key, f"https://{plan['service']}.example/v{len(self.deploys) + 2}"
        )


def build(deployer: FakeDeployer) -> Agent:
    async def deploy(args: DeployArgs, ctx: Any) -> dict[str, Any]:
        plan = await ctx.step(lambda s: deployer.plan(args.service, s.idempotency_key), name="plan")
        answer = await ctx.ask(
            f"Deploy {args.service}?\n\n{plan['summary']}",
            display="confirmation",
            options=APPROVE_OR_CANCEL,
        )
        if answer.option_id != "approve":
            return {"deployed": False, "reason": "rejected"}
        url = await ctx.step(lambda s: deployer.apply(plan, s.idempotency_key), name="apply")
        return {"deployed": True, "url": url}

    def script(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "user":
            return call_tool("deploy", {"service": "api"}, id="deploy-1")
        return reply(f"Deploy finished: {last.text}")

    tools = ToolRegistry(
        [
            define_workflow_tool(
                "deploy", "Deploy a service after a person approves", DeployArgs, deploy
            )
        ]
    )
    agent = Agent(ScriptedProvider(script), tools)
    install(agent)
    return agent


async def scenario(world: World) -> dict[str, Any]:
    deployer = world.services.setdefault("deployer", FakeDeployer())
    agent = world.services.setdefault("agent", build(deployer))
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    cid = await conv.create("main")

    world.say("1. The user asks for a deploy; the model calls deploy(service='api').")
    await conv.submit(cid, "Please deploy api", request_id="r1")
    wake = await h.run_until_parked()
    calls = [r for r in h.live_tasks.values() if r.kind == "bide.tool"]
    for call in calls:
        world.say(f"   the deploy call is {call.state.status}; the turn waits for it")
        world.say(f"   wake(): active={wake.active}, at={wake.at}  (no alarm: a person decides)")
    for ask in pending_asks(h):
        world.say(f"   the session shows a question: {ask.prompt!r}")
        world.say(f"   options: {[o.label for o in ask.options]} ({ask.display})")

    world.at(20 * MINUTE)
    for ask in pending_asks(h):
        approved = answer_in(h, ask.id, option_id="approve")
        world.say(f"2. Twenty minutes later the person approves -> {approved}")
        world.say(
            f"   a second click on the same card -> {answer_in(h, ask.id, option_id='cancel')}"
        )
    await h.run_until_parked()
    sub = conv.submission(cid, "r1")
    assert sub is not None
    world.say(f"3. The model's answer: {sub.answer!r}")
    world.say(f"   plans made: {len(deployer.plans)}, deploys: {list(deployer.deploys.values())}")
    return {"answer": sub.answer, "plans": len(deployer.plans), "deploys": len(deployer.deploys)}


def check(result: dict[str, Any], world: World) -> None:
    """One plan, one deploy, one tool result, whatever crashed on the way."""
    assert (
        result["answer"] == 'Deploy finished: {"deployed": true, "url": "https://api.example/v2"}'
    )
    assert result["plans"] == 1 and result["deploys"] == 1


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: the turn waited for the person; planned once, deployed once")
