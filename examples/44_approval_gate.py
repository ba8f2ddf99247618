"""Gates before a tool runs (design 001 ch. VIII).

An approvals extension makes risky commands wait for a person, with a one-day deadline fixed
once in a memo; a quiet-hours extension lets commands run only between 08:00 and 20:00. Every
wake before intent asks every gate again, so an approval at 23:30 still waits for morning.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import DAY, HOUR, SignalExpired, define_signal
from bide.tools import Block, Extension, Sleep, ToolRegistry, define_tool, result_of


class Command(BaseModel):
    command: str


class Decision(BaseModel):
    allow: bool


APPROVAL = define_signal("approvals.decision", 1, Decision)


def approvals(log: list[str]) -> Extension:
    async def gate(call: Any, api: Any) -> Any:
        if not call.arguments["command"].startswith("rm"):
            return None
        key = call.arguments["command"].replace(" ", "_")
        state = await api.read_signal(APPROVAL, key)
        # One deadline per question, fixed at the first pass: later passes keep it.
        until = await api.memo(f"approvals.until.{key}", api.now() + DAY)
        seen = (
            "no answer yet"
            if state is None
            else "expired"
            if isinstance(state, SignalExpired)
            else "answered"
        )
        log.append(f"approvals asked ({seen})")
        if state is None:
            return Sleep(signals=[APPROVAL.key(key)], until=until)
        if isinstance(state, SignalExpired):
            return Block("No approval within a day")
        return None if state.value.allow else Block("Not approved")

    return Extension("approvals", before_tool=gate)


def quiet_hours(log: list[str]) -> Extension:
    async def gate(call: Any, api: Any) -> Any:
        hour = (api.now() % DAY) / HOUR
        log.append(f"quiet-hours asked at {hour:05.2f}h")
        if 8 <= hour < 20:
            return None
        next_morning = api.now() - (api.now() % DAY) + (DAY if hour >= 20 else 0) + 8 * HOUR
        return Sleep(until=next_morning)

    return Extension("quiet-hours", before_tool=gate)


def tools(ran: list[str], log: list[str]) -> ToolRegistry:
    async def bash(args: Command, api: Any) -> Any:
        ran.append(args.command)
        return f"$ {args.command}\n(done)"

    return ToolRegistry(
        [define_tool("bash", "Run a shell command", Command, bash)],
        [approvals(log), quiet_hours(log)],
    )


async def scenario(world: World) -> dict[str, Any]:
    ran: list[str] = world.services.setdefault("ran", [])
    log: list[str] = world.services.setdefault("log", [])
    registry = tools(ran, log)
    world.at(19 * HOUR)  # 19:00
    h = await world.process([registry.task])
    t = await h.create_task(
        registry.task, registry.call("bash", {"command": "rm -rf build"}), key="rm"
    )
    wake = await h.run_until_parked()
    left = (wake.at or 0) - world.clock.now()
    world.say(f"   19:00 the call waits at its gates: {h.task(t).state.status}, at=+{left:.0f}s")
    world.at(23 * HOUR + 30 * 60)  # 23:30
    answer = await h.signal(t, APPROVAL, "rm_-rf_build", {"allow": True})
    world.say(f"   23:30 a person approves -> {answer}")
    await h.run_until_parked()
    world.say(f"   still waiting (quiet hours): {h.task(t).state.status}; ran so far: {ran}")
    world.at(DAY + 8 * HOUR)  # next morning 08:00
    await h.run_until_parked()
    world.say(f"   08:00 the gates pass; the command ran: {ran}")
    second = await h.create_task(
        registry.task, registry.call("bash", {"command": "rm x"}), key="rm2"
    )
    await h.run_until_parked()
    world.at(2 * DAY + 9 * HOUR)  # nobody answers for a day
    await h.run_until_parked()
    blocked = result_of(h.outcome(second))
    world.say(f"   an unanswered approval expires: {blocked.code}: {blocked.text}")
    first = result_of(h.outcome(t))
    return {"first": first.text, "first_code": first.code, "second": blocked.code, "ran": list(ran)}


def check(result: dict[str, Any], world: World) -> None:
    """The approved command ran once, in the morning; the unanswered one was blocked. bash is
    replay-unsafe: a crash after its intent ends it ``interrupted``, and it never runs twice."""
    assert len(result["ran"]) <= 1
    if result["first_code"] == "interrupted":
        assert world.crashes > 0
    else:
        assert result["ran"] == ["rm -rf build"]
    assert result["second"] == "blocked"


if __name__ == "__main__":
    world = World()
    world.say("bash('rm -rf build') needs an approval and must respect quiet hours:")
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    for line in world.services["log"]:
        print("   gate log:", line)
    print("ok: approved at 23:30, ran at 08:00; unanswered approval blocked")
