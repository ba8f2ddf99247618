"""38: signals. A typed value delivered from outside to a live task, under a key.

A CI task starts a build and sleeps until the CI service calls back with the result (a
webhook), or until a one-hour deadline. The example walks through:

1. a signal token and its keys;
2. every result of ``harness.signal()``: delivered, duplicate (the first value is kept),
   invalid (and which fields failed), closed (the task ended; the key's deadline passed)
   and not_found;
3. an early signal: the webhook lands while the task is still running, before it sleeps,
   and the sleep wakes at once; the same through ``deliver_signal``, what a webhook handler
   calls without loading the session;
4. an abort-marked task, which takes no more signals;
5. one key serves one wait: sleeping again on a key that already woke the task is refused.

Run it from the repository root:  PYTHONPATH=shared python examples/38_signals.py
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from bide import (
    HOUR,
    MINUTE,
    Aborted,
    Completed,
    Harness,
    InvalidPark,
    ManualClock,
    SequentialIds,
    SignalExpired,
    SignalResult,
    SignalValue,
    Sleeping,
    SQLiteStore,
    TaskRuntime,
    TaskView,
    Terminal,
    Wake,
    define_signal,
    define_task,
    deliver_signal,
)

# --- the signal -------------------------------------------------------------------------------


class CiResult(BaseModel):
    """What the CI service posts to our webhook when a build ends."""

    status: Literal["passed", "failed"]
    log_url: str


CI_RESULT = define_signal("app.ci-result", 1, CiResult)


# --- a fake CI service ------------------------------------------------------------------------


class FakeCi:
    """Records triggered builds. When ``hold`` is set, ``trigger`` waits for it, so the example
    can deliver a webhook while the task is still running."""

    def __init__(self) -> None:
        self.builds: list[str] = []
        self.hold: asyncio.Event | None = None
        self.triggered = asyncio.Event()

    async def trigger(self, ref: str) -> str:
        build = f"build-{len(self.builds) + 1}"
        self.builds.append(build)
        print(f"  [ci] {build} started for ref {ref!r}")
        self.triggered.set()
        if self.hold is not None:
            await self.hold.wait()
        return build


CI = FakeCi()


# --- the task ---------------------------------------------------------------------------------


async def trigger(task: TaskView, rt: TaskRuntime) -> None:
    await CI.trigger(task.input["ref"])
    await rt.commit(
        Sleeping(
            checkpoint="report",
            signals=(CI_RESULT.key("done"),),
            until=rt.now() + HOUR,
        )
    )
    print(f"  [task {task.id}] committed: sleeping on key 'done', deadline in 1 hour")


async def report(task: TaskView, rt: TaskRuntime) -> None:
    assert task.wake is not None
    state = await rt.read_signal(CI_RESULT, "done")
    result: dict[str, Any] = {"wake": task.wake.reason}
    if isinstance(state, SignalValue):
        result["status"] = state.value.status
        result["log_url"] = state.value.log_url
    elif isinstance(state, SignalExpired):
        result["status"] = "no result within the hour"
    print(f"  [task {task.id}] woke: {task.wake!r}")
    print(f"  [task {task.id}] read_signal('done') -> {state!r}")
    # One key serves one wait: a key that woke the task is consumed, one whose deadline passed
    # is expired, and a sleep on either is refused (the commit raises, nothing is written).
    if task.input.get("sleep_again"):
        try:
            await rt.commit(Sleeping(checkpoint="report", signals=(CI_RESULT.key("done"),)))
        except InvalidPark as exc:
            result["sleep_again_on_done"] = "refused"
            print(f"  [task {task.id}] a second sleep on 'done' is refused: {exc}")
    await rt.commit(Terminal(outcome=Completed(result=result)))


RunCi = define_task(
    "app.run-ci", 1, initial=lambda _input: "trigger", phases={"trigger": trigger, "report": report}
)


# --- helpers ----------------------------------------------------------------------------------


def when(at: float | None) -> str:
    if at is None:
        return "None"
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(wake: Wake) -> str:
    return f"wake(): active={wake.active}, at={when(wake.at)}"


def step(title: str) -> None:
    print(f"\n== {title}")


async def main() -> None:
    clock = ManualClock()  # starts at 2026-01-01 00:00 UTC
    start = clock.now()
    store = SQLiteStore()
    harness = Harness(store, "session-38", [RunCi], clock=clock, ids=SequentialIds())
    await harness.open()

    step("1. A token names a signal; a key names one wait")
    print(f"  token: name={CI_RESULT.name!r} version={CI_RESULT.version}")
    key = CI_RESULT.key("done")
    print(f"  CI_RESULT.key('done') -> {key!r}")
    print(f"  stored on the task under the slot {key.slot!r}")
    assert (key.signal, key.key, key.slot) == ("app.ci-result", "done", "app.ci-result/done")

    step("2. A task starts a build and sleeps until the webhook or the deadline")
    t1 = await harness.create_task(RunCi, {"ref": "main", "sleep_again": True})
    wake = await harness.run_until_parked()
    record = harness.task(t1)
    assert record is not None
    print(f"  task {t1} is {record.status}; {describe(wake)}")
    assert record.status == "sleeping"
    assert wake == Wake(active=False, at=clock.now() + HOUR)

    step("3. Every result of signal()")
    bad = {"status": "green", "log_url": 42}
    decision = await harness.deliver(t1, CI_RESULT, "done", bad)
    print(f"  deliver({t1}, 'done', {bad}) -> {decision.result}   (signal() plus the errors)")
    for error in decision.errors:
        print(f"      field {error['field']!r}: {error['message']}")
    assert decision.result is SignalResult.INVALID
    assert [e["field"] for e in decision.errors] == ["status", "log_url"]

    good = {"status": "passed", "log_url": "https://ci.example/1"}
    result = await harness.signal(t1, CI_RESULT, "done", good)
    print(f"  signal({t1}, 'done', passed) -> {result}   (stored; the sleep can wake)")
    assert result is SignalResult.DELIVERED

    late = {"status": "failed", "log_url": "https://ci.example/1-retry"}
    result = await harness.signal(t1, CI_RESULT, "done", late)
    print(f"  signal({t1}, 'done', failed) -> {result}   (the first value is kept)")
    assert result is SignalResult.DUPLICATE

    result = await harness.signal("t-404", CI_RESULT, "done", good)
    print(f"  signal(t-404, 'done', passed) -> {result}   (no such task in this session)")
    assert result is SignalResult.NOT_FOUND

    print(f"  {describe(harness.wake())}   (a listed key holds a value: runnable now)")
    assert harness.wake().active

    wake = await harness.run_until_parked()
    outcome = harness.outcome(t1)
    print(f"  task {t1} ended: {outcome!r}")
    assert isinstance(outcome, Completed)
    assert outcome.result["wake"] == "signal"
    assert outcome.result["status"] == "passed"
    assert outcome.result["sleep_again_on_done"] == "refused"
    assert wake == Wake(active=False, at=None)

    result = await harness.signal(t1, CI_RESULT, "done", good)
    print(f"  signal({t1}, 'done', passed) -> {result}   (the task has ended)")
    assert result is SignalResult.CLOSED

    step("4. A webhook after the deadline is closed")
    t2 = await harness.create_task(RunCi, {"ref": "feature", "sleep_again": True})
    await harness.run_until_parked()
    clock.advance(HOUR + MINUTE)
    print(f"  the clock moves 61 minutes on; {describe(harness.wake())}")
    result = await harness.signal(t2, CI_RESULT, "done", good)
    print(f"  signal({t2}, 'done', passed) -> {result}   (deadline passed, not yet woken)")
    assert result is SignalResult.CLOSED
    await harness.run_until_parked()
    outcome = harness.outcome(t2)
    print(f"  task {t2} ended: {outcome!r}")
    assert isinstance(outcome, Completed)
    assert outcome.result["wake"] == "expired"
    assert outcome.result["sleep_again_on_done"] == "refused"

    step("5. An early signal: the webhook lands while the task still runs")
    CI.hold = asyncio.Event()
    CI.triggered.clear()
    t3 = await harness.create_task(RunCi, {"ref": "hotfix"})
    run = asyncio.create_task(harness.run_until_parked())
    await CI.triggered.wait()  # the task is inside trigger(), before its sleep
    record = harness.task(t3)
    assert record is not None
    print(f"  task {t3} is {record.status} (the build started, the task has not slept yet)")
    assert record.status == "running"
    fast = {"status": "failed", "log_url": "https://ci.example/3"}
    result = await harness.signal(t3, CI_RESULT, "done", fast)
    print(f"  signal({t3}, 'done', failed) -> {result}   (stored on the running task)")
    assert result is SignalResult.DELIVERED
    CI.hold.set()  # let the task go on to its sleep
    wake = await run
    outcome = harness.outcome(t3)
    print(f"  task {t3} ended: {outcome!r}")
    print(f"  {describe(wake)}   (the sleep woke at once; nothing is left to run)")
    assert isinstance(outcome, Completed)
    assert outcome.result["wake"] == "signal"
    assert outcome.result["status"] == "failed"
    assert clock.now() == start + HOUR + MINUTE  # no time passed for the early wake

    step("6. The same from a webhook handler that does not load the session")
    CI.hold = asyncio.Event()
    CI.triggered.clear()
    t4 = await harness.create_task(RunCi, {"ref": "release"})
    run = asyncio.create_task(harness.run_until_parked())
    await CI.triggered.wait()
    # A webhook handler (another process, later a Lambda) reads the session head and this one
    # task, decides with the same rules, and commits conditioned on the session's sequence.
    decision = deliver_signal(store, "session-38", t4, CI_RESULT, "done", good, clock)
    print(f"  deliver_signal(store, {t4}, 'done', passed) -> {decision.result}")
    assert decision.result is SignalResult.DELIVERED
    record = harness.task(t4)
    assert record is not None and not record.signals
    print(f"  the worker's view is stale: task {t4} is {record.status}, signals={record.signals}")
    CI.hold.set()  # the sleep commit conflicts; the worker reloads and decides again
    wake = await run
    outcome = harness.outcome(t4)
    print(f"  task {t4} ended: {outcome!r}")
    assert isinstance(outcome, Completed)
    assert outcome.result["wake"] == "signal"
    assert outcome.result["status"] == "passed"
    assert wake == Wake(active=False, at=None)

    step("7. An abort-marked task takes no more signals")
    t5 = await harness.create_task(RunCi, {"ref": "abandoned"})
    await harness.run_until_parked()
    aborted = await harness.abort(t5, "the user pressed Stop")
    print(f"  abort({t5}) -> {aborted}   (a durable mark; the sleep ends at once)")
    result = await harness.signal(t5, CI_RESULT, "done", good)
    print(f"  signal({t5}, 'done', passed) -> {result}   (abort-marked)")
    assert result is SignalResult.CLOSED
    await harness.run_until_parked()
    outcome = harness.outcome(t5)
    print(f"  task {t5} ended: {outcome!r}")
    assert outcome == Aborted(reason="the user pressed Stop")

    await harness.close()
    store.close()
    print("\nok: every signal() result shown; the early signal woke the sleep at once")


if __name__ == "__main__":
    asyncio.run(main())
