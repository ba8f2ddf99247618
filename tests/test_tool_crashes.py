"""Design 001 ch. X "Crash points of run_ci", for a replay-safe and a replay-unsafe tool."""

from __future__ import annotations

import pytest
from ci_fake import CI_RESULT, FakeCi, run_ci_tool
from kit import run

from bide import Harness, ManualClock, SequentialIds, SQLiteStore, deliver_signal
from bide.testing import Crash, FaultyStore
from bide.tools import ToolRegistry

PASSED = {"status": "passed", "log_url": "https://ci.example/7"}


def parked_commit(writes):
    return any(
        r.state.status == "sleeping" and r.state.checkpoint["phase"] == "parked" for r in writes
    )


def woken_intent_commit(writes):
    return any(
        r.state.status == "running"
        and r.state.checkpoint["phase"] == "execute"
        and r.state.checkpoint.get("wake") is not None
        for r in writes
    )


def result_commit(writes):
    return any(r.state.status == "terminal" for r in writes)


class World:
    def __init__(self, replay: str) -> None:
        self.ci = FakeCi()
        self.registry = ToolRegistry([run_ci_tool(self.ci, replay)])
        self.store = FaultyStore(SQLiteStore())
        self.clock = ManualClock()
        self.ids = SequentialIds()

    async def process(self) -> Harness:
        """A new process: a fresh harness on the same store."""
        h = Harness(self.store, "s1", [self.registry.task], clock=self.clock, ids=self.ids)
        await h.open()
        return h

    async def run(self, h: Harness) -> bool:
        """Run until parked; False if the process died."""
        try:
            await h.run_until_parked()
            return True
        except Crash:
            return False

    def webhook(self, task_id: str, value=PASSED):
        return deliver_signal(
            self.store, "s1", task_id, CI_RESULT, "done", value, self.clock
        ).result


@pytest.mark.parametrize("replay", ["safe", "unsafe"])
def test_crash_before_the_park_is_stored(replay):
    async def go():
        w = World(replay)
        w.store.match = parked_commit
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        assert await w.run(h) is False
        assert w.ci.triggers == 1 and w.ci.executions == 1
        h = await w.process()
        assert h.task(t).restarts == 1
        assert await w.run(h)
        if replay == "safe":
            # execute() ran again; the memoized key made CI return the same build
            assert w.ci.executions == 2 and len(w.ci.builds) == 1
            assert h.task(t).state.status == "sleeping"
            assert w.webhook(t) == "delivered"
            await h.run_until_parked()
            assert (
                h.outcome(t)
                .result["text" if False else "content"][0]["text"]
                .startswith("CI passed")
            )
        else:
            # interrupted; only the tool's own key can find the build; no cancel
            assert w.ci.executions == 1
            assert h.outcome(t).result["code"] == "interrupted"
            assert w.ci.cancelled == []

    run(go())


@pytest.mark.parametrize("replay", ["safe", "unsafe"])
@pytest.mark.parametrize("webhook_at", ["before_restart", "after_restart"])
def test_crash_while_parked(replay, webhook_at):
    async def go():
        w = World(replay)
        w.store.match = parked_commit
        w.store.when = "after"  # the park is stored, then the process dies
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        assert await w.run(h) is False
        if webhook_at == "before_restart":
            assert w.webhook(t) == "delivered"
        h = await w.process()
        record = h.task(t)
        assert record.state.status == "sleeping" and record.restarts == 0
        if webhook_at == "after_restart":
            assert w.webhook(t) == "delivered"
        assert await w.run(h)
        assert h.outcome(t).result["is_error"] is False
        assert w.ci.executions == 2 and w.ci.triggers == 1

    run(go())


@pytest.mark.parametrize("replay", ["safe", "unsafe"])
def test_crash_between_the_wake_and_the_intent(replay):
    async def go():
        w = World(replay)
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        w.webhook(t)
        w.store.match = woken_intent_commit
        assert await w.run(h) is False
        assert w.ci.executions == 1  # nothing of the tool ran in the woken attempt
        h = await w.process()
        record = h.task(t)
        assert record.state.status == "pending"
        assert record.state.checkpoint["phase"] == "parked"
        assert record.state.wake.reason == "signal"
        assert await w.run(h)
        assert h.outcome(t).result["is_error"] is False
        assert w.ci.executions == 2 and w.ci.cancelled == []

    run(go())


@pytest.mark.parametrize("replay", ["safe", "unsafe"])
def test_crash_while_a_woken_run_runs(replay):
    async def go():
        w = World(replay)
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        w.webhook(t)
        w.ci.crash_on_woken_run = Crash("dies inside execute()")
        assert await w.run(h) is False
        assert w.ci.executions == 2
        h = await w.process()
        assert await w.run(h)
        result = h.outcome(t).result
        if replay == "safe":
            # the run repeats with the same wake
            assert w.ci.executions == 3 and result["is_error"] is False
            assert w.ci.cancelled == []
        else:
            # cancel runs with the last park's checkpoint, then interrupted; never a rerun
            assert w.ci.executions == 2
            assert w.ci.cancelled == ["build-1"]
            assert result["code"] == "interrupted"

    run(go())


@pytest.mark.parametrize("replay", ["safe", "unsafe"])
def test_crash_after_the_result(replay):
    async def go():
        w = World(replay)
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        w.webhook(t)
        w.store.match = result_commit
        w.store.when = "after"
        assert await w.run(h) is False
        h = await w.process()
        assert await w.run(h)
        assert h.outcome(t).result["is_error"] is False
        assert w.ci.executions == 2 and w.ci.triggers == 1 and w.ci.cancelled == []

    run(go())


def test_cancel_runs_when_aborted_while_parked():
    async def go():
        w = World("unsafe")
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        await h.abort(t, "Stop")
        await h.run_until_parked()
        assert w.ci.cancelled == ["build-1"]
        outcome = h.outcome(t)
        assert outcome.status == "aborted" and outcome.result["code"] == "aborted"
        assert w.webhook(t) == "closed"

    run(go())


def test_cancel_runs_when_a_woken_run_is_aborted_before_execute():
    async def go():
        w = World("safe")
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        w.webhook(t)
        w.store.match = woken_intent_commit
        w.store.when = "after"  # intent with the wake is stored; execute() never entered
        assert await w.run(h) is False
        h = await w.process()
        await h.abort(t, "Stop")
        await h.run_until_parked()
        assert w.ci.executions == 1
        assert w.ci.cancelled == ["build-1"]
        assert h.outcome(t).status == "aborted"

    run(go())


def test_cancel_runs_when_a_park_returns_after_the_abort_mark():
    async def go():
        w = World("unsafe")
        h = await w.process()
        inner = w.registry.get("run_ci")

        async def execute(args, api):
            park = await inner.execute(args, api)
            await h.abort(api.task_id, "Stop while running")  # the abort lands mid-run
            return park

        from bide.tools import define_tool

        w.registry.add(define_tool("run_ci", "", inner.parameters, execute, cancel=inner.cancel))
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        await h.run_until_parked()
        # cancel ran with the returned park's checkpoint (possibly twice; it is idempotent)
        assert set(w.ci.cancelled) == {"build-1"}
        assert h.outcome(t).status == "aborted"

    run(go())


def test_cancel_never_runs_for_a_first_run_cut_off_before_it_parked():
    async def go():
        w = World("unsafe")
        w.store.match = parked_commit
        h = await w.process()
        t = await h.create_task(w.registry.task, w.registry.call("run_ci", {"ref": "main"}))
        assert await w.run(h) is False
        h = await w.process()
        await h.abort(t, "Stop")
        await h.run_until_parked()
        assert w.ci.cancelled == []
        assert h.outcome(t).status == "aborted"

    run(go())
