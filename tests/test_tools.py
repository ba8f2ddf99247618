"""Tools that park: results, parks, early signals, keys, nested calls, wrappers, timing."""

from __future__ import annotations

from ci_fake import CI_RESULT, FakeCi, run_ci_tool
from kit import ANSWER, HOUR, Kit, run
from pydantic import BaseModel

from bide import SignalValue, WakeTasks
from bide.tools import (
    Extension,
    KeyRequired,
    Sleep,
    ToolRegistry,
    ToolResult,
    Wait,
    define_tool,
    result_of,
    wrap_tool,
)


class NoArgs(BaseModel):
    pass


class Topic(BaseModel):
    topic: str


def kit(*tools, extensions=()):
    registry = ToolRegistry(tools, extensions)
    k = Kit(registry.task)
    return k, registry


async def call(k, registry, name, arguments, key=None):
    return await k.h.create_task(registry.task, registry.call(name, arguments), key=key)


def result(k, t):
    return result_of(k.h.outcome(t))


def test_schema_is_what_the_model_sees_and_bad_arguments_are_a_result():
    async def go():
        ci = FakeCi()
        k, registry = kit(run_ci_tool(ci))
        manifest = registry.manifest()
        assert manifest[0]["parameters"]["properties"]["ref"]["type"] == "string"
        await k.h.open()
        t = await call(k, registry, "run_ci", {"ref": ["not", "a", "string"]})
        await k.h.run_until_parked()
        r = result(k, t)
        assert r.is_error and r.code == "invalid_arguments"
        assert r.details[0]["field"] == "ref"
        assert k.h.outcome(t).status == "completed"  # a result, not a crash
        assert ci.executions == 0

    run(go())


def test_unknown_tool_fails_with_tool_unavailable():
    async def go():
        k, registry = kit()
        await k.h.open()
        t = await call(k, registry, "nope", {})
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "failed"
        assert result(k, t).code == "tool_unavailable"

    run(go())


def test_tool_removed_while_parked_settles_tool_unavailable():
    async def go():
        ci = FakeCi()
        k, registry = kit(run_ci_tool(ci))
        await k.h.open()
        t = await call(k, registry, "run_ci", {"ref": "main"})
        await k.h.run_until_parked()
        registry.remove("run_ci")
        await k.h.signal(t, CI_RESULT, "done", {"status": "passed", "log_url": "u"})
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "failed"
        assert result(k, t).code == "tool_unavailable"

    run(go())


def test_execute_raising_is_a_tool_error_result():
    async def boom(args, api):
        raise ValueError("disk full")

    async def go():
        k, registry = kit(define_tool("boom", "", NoArgs, boom))
        await k.h.open()
        t = await call(k, registry, "boom", {})
        await k.h.run_until_parked()
        r = result(k, t)
        assert r.code == "tool_error" and "disk full" in r.text

    run(go())


def test_early_signal_before_the_park_wakes_at_once():
    async def go():
        ci = FakeCi()
        tool = run_ci_tool(ci)
        k, registry = kit(tool)
        await k.h.open()
        t = await call(k, registry, "run_ci", {"ref": "main"})
        # the webhook lands before the tool ran at all
        value = {"status": "passed", "log_url": "u"}
        assert await k.h.signal(t, CI_RESULT, "done", value) == "delivered"
        wake = await k.h.run_until_parked()
        assert ci.executions == 1  # it read the value on its first run and never parked
        assert result(k, t).text == "CI passed: u"
        assert wake.active is False

    run(go())


def test_early_signal_while_running_wakes_the_park_at_once():
    seen = []

    async def execute(args, api):
        state = await api.read_signal(ANSWER, "k")
        if isinstance(state, SignalValue):
            seen.append(api.wake.to_dict())
            return state.value.text
        await k.h.signal(api.task_id, ANSWER, "k", {"text": "early"})  # before the park
        return Sleep(signals=[ANSWER.key("k")])

    k, registry = kit(define_tool("t", "", NoArgs, execute))

    async def go():
        await k.h.open()
        t = await call(k, registry, "t", {})
        await k.h.run_until_parked()
        assert result(k, t).text == "early"
        assert seen == [{"reason": "signal", "signal": "test.answer", "key": "k"}]

    run(go())


def test_parking_on_a_consumed_key_is_invalid_park():
    async def execute(args, api):
        if api.wake is None:
            return Sleep(signals=[ANSWER.key("k")])
        return Sleep(signals=[ANSWER.key("k")])  # the same key again

    async def go():
        k, registry = kit(define_tool("t", "", NoArgs, execute))
        await k.h.open()
        t = await call(k, registry, "t", {})
        await k.h.run_until_parked()
        await k.h.signal(t, ANSWER, "k", {"text": "x"})
        await k.h.run_until_parked()
        assert result(k, t).code == "invalid_park"

    run(go())


def test_malformed_park_is_invalid_park():
    async def execute(args, api):
        return Sleep()  # neither until nor signals

    async def go():
        k, registry = kit(define_tool("t", "", NoArgs, execute))
        await k.h.open()
        t = await call(k, registry, "t", {})
        await k.h.run_until_parked()
        assert result(k, t).code == "invalid_park"

    run(go())


def test_polling_on_time_with_backoff():
    polls = []

    async def execute(args, api):
        attempt = (api.checkpoint or {}).get("attempt", 0)
        polls.append((attempt, api.wake.reason if api.wake else None))
        if attempt == 3:
            return "ready"
        return Sleep(checkpoint={"attempt": attempt + 1}, until=api.now() + 60 * 2**attempt)

    async def go():
        k, registry = kit(define_tool("poll", "", NoArgs, execute, replay="safe"))
        await k.h.open()
        t = await call(k, registry, "poll", {})
        waits = []
        while (wake := await k.h.run_until_parked()).at is not None:
            waits.append(wake.at - k.clock.now())
            k.clock.set(wake.at)
        assert waits == [60, 120, 240]
        assert polls == [(0, None), (1, "time"), (2, "time"), (3, "time")]
        assert result(k, t).text == "ready"

    run(go())


def _parallel(research_log):
    async def research(args, api):
        if api.wake is None:
            return Sleep(signals=[ANSWER.key("found")])
        state = await api.read_signal(ANSWER, "found")
        research_log.append(args.topic)
        return f"{args.topic}: {state.value.text}"

    async def both(args, api):
        a = await api.execute_tool("research", {"topic": "x"}, key="a", wait=False)
        b = await api.execute_tool("research", {"topic": "y"}, key="b", wait=False)
        done = set((api.checkpoint or {}).get("done", []))
        if isinstance(api.wake, WakeTasks):
            done.update(api.wake.ended)
        still = [c.task_id for c in (a, b) if c.task_id not in done]
        if still:
            return Wait(checkpoint={"done": sorted(done)}, on=still, policy="any")
        ra, rb = await a.result(), await b.result()
        return f"{ra.text} | {rb.text}"

    return [
        define_tool("research", "", Topic, research, replay="safe"),
        define_tool("research_both", "", NoArgs, both, replay="safe"),
    ]


def test_nested_calls_without_waiting_and_wait_any():
    log: list[str] = []

    async def go():
        k, registry = kit(*_parallel(log))
        await k.h.open()
        t = await call(k, registry, "research_both", {})
        await k.h.run_until_parked()
        children = [r for r in k.h.live_tasks.values() if r.owner == t]
        assert len(children) == 2 and k.h.task(t).state.policy == "any"
        by_topic = {c.input["arguments"]["topic"]: c.id for c in children}
        await k.h.signal(by_topic["y"], ANSWER, "found", {"text": "Y!"})
        await k.h.run_until_parked()
        assert k.h.outcome(t) is None  # woke on y, parks again on x
        assert k.h.task(t).state.on == (by_topic["x"],)
        await k.h.signal(by_topic["x"], ANSWER, "found", {"text": "X!"})
        await k.h.run_until_parked()
        assert result(k, t).text == "x: X! | y: Y!"
        assert sorted(log) == ["x", "y"]  # each nested call ran its result once

    run(go())


def test_children_stay_alive_while_their_caller_is_parked_even_across_a_crash():
    log: list[str] = []

    async def go():
        k, registry = kit(*_parallel(log))
        await k.h.open()
        t = await call(k, registry, "research_both", {})
        await k.h.run_until_parked()
        h = await k.reopen()
        assert len([r for r in h.live_tasks.values() if r.owner == t]) == 2
        assert all(not r.abort_marked for r in h.live_tasks.values())

    run(go())


def test_nested_call_waiting_in_memory():
    async def double(args, api):
        return args.topic * 2

    async def outer(args, api):
        first = await api.execute_tool("double", {"topic": "ab"})
        second = await api.execute_tool("double", {"topic": first.text})
        return second.text

    async def go():
        k, registry = kit(
            define_tool("double", "", Topic, double), define_tool("outer", "", NoArgs, outer)
        )
        await k.h.open()
        t = await call(k, registry, "outer", {})
        await k.h.run_until_parked()
        assert result(k, t).text == "abababab"

    run(go())


def test_key_rules_for_nested_calls():
    errors = []

    async def leaf(args, api):
        return args.topic

    async def outer(args, api):
        if api.wake is None:
            a = await api.execute_tool("leaf", {"topic": "a"}, key="k", wait=False)
            again = await api.execute_tool("leaf", {"topic": "a"}, key="k", wait=False)
            assert a.task_id == again.task_id  # a key always returns the same child
            try:
                await api.execute_tool("leaf", {"topic": "other"}, key="k", wait=False)
            except Exception as exc:
                errors.append(type(exc).__name__)
            return Wait(on=[a.task_id])
        try:
            await api.execute_tool("leaf", {"topic": "b"}, wait=False)
        except KeyRequired as exc:
            errors.append(type(exc).__name__)
        return "done"

    async def go():
        k, registry = kit(define_tool("leaf", "", Topic, leaf), define_tool("o", "", NoArgs, outer))
        await k.h.open()
        t = await call(k, registry, "o", {})
        await k.h.run_until_parked()
        assert result(k, t).text == "done"
        assert errors == ["KeyReuseError", "KeyRequired"]

    run(go())


def test_wrapper_that_parks_becomes_an_error_and_one_that_passes_parks_through():
    async def sleepy(args, api):
        if api.wake is None:
            return Sleep(until=api.now() + 10)
        return "woke"

    async def honest(args, api, base):
        return await base(args, api)

    async def liar(args, api, base):
        await base(args, api)
        return Sleep(until=api.now() + 5)  # a park the base did not return

    base_tool = define_tool("sleepy", "", NoArgs, sleepy)

    async def go():
        k, registry = kit(
            wrap_tool(base_tool, honest, name="honest"), wrap_tool(base_tool, liar, name="liar")
        )
        await k.h.open()
        good = await call(k, registry, "honest", {})
        bad = await call(k, registry, "liar", {})
        await k.h.run_until_parked()
        assert result(k, bad).code == "invalid_park"
        k.clock.advance(10)
        await k.h.run_until_parked()
        assert result(k, good).text == "woke"

    run(go())


def test_duration_spans_the_whole_call_and_diagnostics_carry_over():
    async def slow(args, api):
        await api.diagnostic(f"run {'woken' if api.wake else 'fresh'}")
        if api.wake is None:
            return Sleep(until=api.now() + HOUR)
        return "ok"

    async def go():
        k, registry = kit(define_tool("slow", "", NoArgs, slow))
        await k.h.open()
        t = await call(k, registry, "slow", {})
        await k.h.run_until_parked()
        k.clock.advance(HOUR)
        await k.h.run_until_parked()
        r = result(k, t)
        assert r.duration_ms == HOUR * 1000
        assert r.diagnostics == ("run fresh", "run woken")

    run(go())


def test_after_tool_runs_on_every_result_including_blocked_and_aborted():
    seen = []

    async def after(call, result, api):
        seen.append((call.name, result.code))
        return result.model_copy(update={"details": "seen by audit"})

    async def before(call, api):
        from bide.tools import Block

        return Block("no deletes") if call.name == "delete" else None

    async def ok(args, api):
        return "fine"

    async def park(args, api):
        return Sleep(signals=[ANSWER.key("never")])

    async def go():
        k, registry = kit(
            define_tool("ok", "", NoArgs, ok),
            define_tool("delete", "", NoArgs, ok),
            define_tool("park", "", NoArgs, park),
            extensions=[Extension("audit", before_tool=before, after_tool=after)],
        )
        await k.h.open()
        a = await call(k, registry, "ok", {})
        b = await call(k, registry, "delete", {})
        c = await call(k, registry, "park", {})
        await k.h.run_until_parked()
        await k.h.abort(c, "Stop")
        await k.h.run_until_parked()
        assert sorted(seen, key=str) == sorted(
            [("ok", None), ("delete", "blocked"), ("park", "aborted")], key=str
        )
        assert result(k, a).details == "seen by audit"
        assert result(k, b).code == "blocked"
        assert ToolResult.model_validate(k.h.outcome(c).result).details == "seen by audit"

    run(go())
