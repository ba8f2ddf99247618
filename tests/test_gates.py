"""Gates (design 001 ch. VIII): before_tool hooks that block, replace arguments or sleep."""

from __future__ import annotations

from kit import HOUR, Kit, run
from pydantic import BaseModel

from bide import DAY, SignalExpired, define_signal
from bide.tools import Block, Extension, Replace, Sleep, ToolRegistry, define_tool, result_of


class Cmd(BaseModel):
    command: str


class Decision(BaseModel):
    allow: bool


APPROVAL = define_signal("approvals.decision", 1, Decision)


def approvals(log):
    async def gate(call, api):
        log.append(("approvals", call.arguments["command"]))
        if "rm" not in call.arguments["command"]:
            return None
        key = call.arguments["command"].replace(" ", "_")
        state = await api.read_signal(APPROVAL, key)
        until = await api.memo(f"approvals.until.{key}", api.now() + DAY)
        if state is None:
            return Sleep(signals=[APPROVAL.key(key)], until=until)
        if isinstance(state, SignalExpired):
            return Block("No approval within a day")
        return None if state.value.allow else Block("Not approved")

    return Extension("approvals", before_tool=gate)


def quiet_hours(log, clock_start):
    """Calls may run only in the first 12 hours of each day after clock_start."""

    async def gate(call, api):
        log.append(("quiet", call.arguments["command"]))
        into_day = (api.now() - clock_start) % DAY
        if into_day < 12 * HOUR:
            return None
        return Sleep(until=api.now() - into_day + DAY)

    return Extension("quiet-hours", before_tool=gate)


def setup(*extensions, executions):
    async def bash(args, api):
        executions.append(args.command)
        return f"ran {args.command}"

    registry = ToolRegistry([define_tool("bash", "", Cmd, bash)], extensions)
    return Kit(registry.task), registry


def key_of(command):
    return command.replace(" ", "_")


def test_approval_gate_sleeps_then_passes_and_intent_runs_once():
    log, runs = [], []

    async def go():
        k, registry = setup(approvals(log), executions=runs)
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "rm -rf x"}))
        wake = await k.h.run_until_parked()
        assert k.h.task(t).state.checkpoint["phase"] == "call"
        assert wake.at == k.clock.now() + DAY and runs == []
        k.clock.advance(HOUR)
        await k.h.signal(t, APPROVAL, key_of("rm -rf x"), {"allow": True})
        await k.h.run_until_parked()
        assert runs == ["rm -rf x"]
        assert result_of(k.h.outcome(t)).text == "ran rm -rf x"
        assert log == [("approvals", "rm -rf x")] * 2

    run(go())


def test_approval_deadline_is_memoized_and_expiry_blocks():
    log, runs = [], []

    async def go():
        k, registry = setup(approvals(log), executions=runs)
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "rm a"}))
        first = await k.h.run_until_parked()
        k.clock.advance(HOUR)
        second = await k.reopen()  # the first pass after open reruns the gate
        wake = await second.run_until_parked()
        assert wake.at == first.at  # the deadline was fixed at the first pass
        k.clock.set(first.at)
        await second.run_until_parked()
        assert result_of(second.outcome(t)).code == "blocked"
        assert "within a day" in result_of(second.outcome(t)).text
        assert runs == []
        assert await second.signal(t, APPROVAL, key_of("rm a"), {"allow": True}) == "closed"

    run(go())


def test_quiet_hours_gate_is_asked_again_after_the_approval_wake():
    log, runs = [], []

    async def go():
        k, registry = setup(approvals(log), quiet_hours(log, clock_start=0), executions=runs)
        start = k.clock.now()
        k.clock.set(start - (start % DAY) + 10 * HOUR)  # 10:00 in the allowed window
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "rm b"}))
        await k.h.run_until_parked()
        assert log == [("approvals", "rm b")]  # the first gate sleeps; the chain stops
        k.clock.advance(13 * HOUR + 30 * 60)  # 23:30: approval arrives in quiet hours
        await k.h.signal(t, APPROVAL, key_of("rm b"), {"allow": True})
        wake = await k.h.run_until_parked()
        assert runs == [] and log[-2:] == [("approvals", "rm b"), ("quiet", "rm b")]
        next_morning = k.clock.now() - (k.clock.now() % DAY) + DAY
        assert wake.at == next_morning
        k.clock.set(next_morning)
        await k.h.run_until_parked()
        assert runs == ["rm b"]
        # every gate asked again, in extension order, on the final pass
        assert log[-2:] == [("approvals", "rm b"), ("quiet", "rm b")]

    run(go())


def test_replacements_chain_in_order_and_gates_never_run_after_intent():
    log, runs = [], []

    async def prefix(call, api):
        log.append(("prefix", call.arguments["command"]))
        return Replace({"command": "nice " + call.arguments["command"]})

    async def observe(call, api):
        log.append(("observe", call.arguments["command"]))
        return None

    async def go():
        k, registry = setup(
            Extension("prefix", before_tool=prefix),
            Extension("observe", before_tool=observe),
            executions=runs,
        )
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "ls"}))
        await k.h.run_until_parked()
        assert log == [("prefix", "ls"), ("observe", "nice ls")]
        assert runs == ["nice ls"]
        assert result_of(k.h.outcome(t)).text == "ran nice ls"

    run(go())


def test_block_stops_the_chain():
    log, runs = [], []

    async def deny(call, api):
        log.append("deny")
        return Block("never")

    async def later(call, api):
        log.append("later")

    async def go():
        k, registry = setup(
            Extension("deny", before_tool=deny),
            Extension("later", before_tool=later),
            executions=runs,
        )
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "ls"}))
        await k.h.run_until_parked()
        assert log == ["deny"] and runs == []
        assert result_of(k.h.outcome(t)).code == "blocked"

    run(go())


def test_registry_change_wakes_calls_parked_at_their_gates():
    log, runs = [], []

    async def go():
        k, registry = setup(approvals(log), executions=runs)
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "rm c"}))
        await k.h.run_until_parked()
        assert k.h.wake().active is False
        registry.remove_extension("approvals")  # the gate is uninstalled
        assert k.h.wake().active is True
        await k.h.run_until_parked()
        assert runs == ["rm c"]  # the gates installed now decide
        assert result_of(k.h.outcome(t)).text == "ran rm c"

    run(go())


def test_registry_change_with_a_passed_deadline_takes_the_expired_path():
    log, runs = [], []

    async def go():
        k, registry = setup(approvals(log), executions=runs)
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("bash", {"command": "rm d"}))
        await k.h.run_until_parked()
        k.clock.advance(DAY)
        registry.add_extension(Extension("noop"))
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(t)).code == "blocked"  # keys expired as they would have
        assert runs == []

    run(go())


def test_gate_sleep_committed_after_a_registry_change_reruns_at_once():
    log, runs = [], []
    registry_box = []

    async def racing_gate(call, api):
        log.append("racing")
        if len(log) == 1:
            registry_box[0].add_extension(Extension("late"))  # changes while this pass runs
            return Sleep(until=api.now() + HOUR)
        return None

    async def go():
        k, registry = setup(Extension("racing", before_tool=racing_gate), executions=runs)
        registry_box.append(registry)
        await k.h.open()
        await k.h.create_task(registry.task, registry.call("bash", {"command": "ls"}))
        await k.h.run_until_parked()
        assert log == ["racing", "racing"] and runs == ["ls"]

    run(go())
