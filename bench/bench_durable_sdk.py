"""Resume cost versus history length: Bide and the AWS Durable Execution SDK for Python.

The same loop on both: wait for a callback (a signal), get it, wait for the next one. After N
earlier waits completed in one session (one durable execution), we measure ONE more round:
deliver the pending callback, and reach the next wait (durably recorded, its id handed out).

AWS Durable Execution SDK for Python (``aws-durable-execution-sdk-python``), run by its local
test runner (``aws-durable-execution-sdk-python-testing``, ``DurableFunctionTestRunner``: an
in-process emulation of the Lambda durable-execution backend with an in-memory store):

    for i in range(...): context.wait_for_callback(submitter, name=f"w{i}")

  A resume is ``runner.send_callback_success(id)``, after which the backend invokes the handler
  again and the SDK replays it from the start: every earlier ``wait_for_callback`` is answered
  from the checkpoint log until the new one is created and checkpointed and its submitter
  receives the new callback id. Measured from the send to that submitter call ("reach").
  Also shown: from the send to the start of the handler invocation (backend work:
  completing the callback, scheduling the invocation), and to the invocation's end (after
  the handler suspended; it includes the SDK shutting down its checkpoint thread, which polls
  for the stop signal every 100 ms in this SDK version, so it is nearly constant).

Bide, three shapes of the same history, on SQLite in memory (the SDK runner's store is in
memory too). A resume is what the signal function and the worker do: ``deliver_signal`` (no
session load), then a new Harness opens the session and runs until it is parked again:

  bide task loop  one task that slept on a signal key N times (a consumed key leaves its
                  record for a document, so the record does not grow with N; see
                  bench_long_task.py for that loop up to 10,000 waits on SQLite and DynamoDB);
  bide tool loop  one tool call whose execute() parked on a signal N times (the same, plus
                  the tool task's own fields);
  bide N tasks    N earlier tasks that each waited once and completed, and one live task
                  (loading reads live tasks only: as in bench_engine.py).

The first N earlier waits are completed before timing starts. For the SDK they are completed
inside one invocation (the submitter answers at once, so the handler sees each result on
the checkpoint response without suspending); the checkpoint log is the same as with N
separate invocations. Each timed round adds one wait to the history, so a session serves at
most max(1, N // 20) rounds (history stays within 5% of N) and more sessions are built.

Run from the repository root:  PYTHONPATH=shared python bench/bench_durable_sdk.py
Nothing here asserts on timings; it prints ratios measured in this one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner
from bench_engine import TICK, Cycler, Waiter, build_session
from pydantic import BaseModel

from bide import Harness, ManualClock, SequentialIds, SignalResult, SQLiteStore, deliver_signal
from bide.tools import Sleep, ToolRegistry, define_tool

HISTORY = (10, 100, 1_000)
TRIALS = 15  # timed rounds per history length and system (after one warm-up round)
WAIT_S = 120.0  # a round that takes longer than this is a failure, not a figure


def rounds_per_session(history: int) -> int:
    """Rounds timed on one built session: each adds a wait, so keep the drift within 5%."""
    return max(1, history // 20)


# --- the SDK side -----------------------------------------------------------------------------


@dataclass
class SdkLoop:
    """One durable execution of the callback loop, and the marks its invocations leave."""

    runner: Any = None
    feed_until: int = 0  # the first feed_until callbacks are answered at once (the history)
    ids: list[str] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    active: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def submitter(self, callback_id: str, _ctx: Any) -> None:
        """Runs once per new wait (never on replay): the next wait has been reached."""
        now = time.perf_counter()
        with self.changed:
            self.ids.append(callback_id)
            self.marks.setdefault("reach", now)
            self.changed.notify_all()
        if len(self.ids) <= self.feed_until:
            self.runner.send_callback_success(callback_id, b"1")

    def handler(self) -> Callable[[Any, Any], Any]:
        @durable_execution
        def loop(event: Any, context: DurableContext) -> int:
            for i in range(event["waits"]):
                context.wait_for_callback(self.submitter, name=f"w{i}")
            return int(event["waits"])

        def invocation(event: Any, lambda_context: Any) -> Any:
            with self.changed:
                self.active += 1
                self.marks.setdefault("start", time.perf_counter())
            try:
                return loop(event, lambda_context)
            finally:
                with self.changed:
                    self.active -= 1
                    self.marks["end"] = time.perf_counter()
                    self.changed.notify_all()

        return invocation

    def settle(self, waits: int) -> None:
        """Block until ``waits`` callbacks exist and no invocation runs."""
        with self.changed:
            ok = self.changed.wait_for(
                lambda: len(self.ids) >= waits and self.active == 0, timeout=WAIT_S
            )
        if not ok or len(self.ids) != waits:
            raise RuntimeError(f"SDK loop: {len(self.ids)} callbacks, expected {waits}")


class SdkSession:
    """A local test runner holding one execution of the loop, parked after ``history`` waits."""

    def __init__(self, history: int, name: str) -> None:
        self.history = history
        self.loop = SdkLoop(feed_until=history)  # callbacks 1..N answered at once
        self.runner = DurableFunctionTestRunner(handler=self.loop.handler(), poll_interval=0.01)
        self.loop.runner = self.runner
        self.rounds = 0
        try:
            self.runner.run_async(
                input=json.dumps({"waits": 10**9}), execution_timeout=3_600, execution_name=name
            )
            self.loop.settle(history + 1)  # callback N+1 is pending
        except BaseException:
            self.runner.close()
            raise

    def round(self) -> dict[str, float]:
        """Seconds from send_callback_success to the invocation's start, to the next wait
        reached, and to the invocation's end."""
        self.loop.marks.clear()
        pending = self.loop.ids[-1]
        began = time.perf_counter()
        self.runner.send_callback_success(pending, json.dumps(self.rounds).encode())
        self.loop.settle(self.history + 2 + self.rounds)
        self.rounds += 1
        return {name: mark - began for name, mark in self.loop.marks.items()}

    def close(self) -> None:
        self.runner.close()


# --- the Bide side ----------------------------------------------------------------------------


class NoArgs(BaseModel):
    pass


async def wait_in_turn(args: NoArgs, api: Any) -> Any:
    """A tool that parks on signal key k<n>, n = 0, 1, 2, ... for ever."""
    n = api.checkpoint or 0
    if n:
        await api.read_signal(TICK, f"k{n - 1}")  # what woke us, as real code would read it
    return Sleep(checkpoint=n + 1, signals=[TICK.key(f"k{n}")])


TOOLS = ToolRegistry([define_tool("wait_in_turn", "Wait for ticks", NoArgs, wait_in_turn)])


def harness(store: SQLiteStore, session: str, ids: SequentialIds) -> Harness:
    return Harness(store, session, [Cycler, Waiter, TOOLS.task], clock=ManualClock(), ids=ids)


@dataclass
class BideSession:
    store: SQLiteStore
    session: str
    task: str
    next_key: int  # the key the live task is parked on
    ids: SequentialIds


async def timed_round(s: BideSession, clock: ManualClock) -> float:
    """Seconds for one resume as the host does it: deliver (no session load), then a worker
    run (a new Harness opens the session and runs until it is parked again)."""
    began = time.perf_counter()
    decision = deliver_signal(s.store, s.session, s.task, TICK, f"k{s.next_key}", s.next_key, clock)
    h = harness(s.store, s.session, s.ids)
    await h.open()
    await h.run_until_parked()
    await h.close()
    elapsed = time.perf_counter() - began
    assert decision.result is SignalResult.DELIVERED, decision
    record = h.task(s.task)
    assert record is not None and record.state.status == "sleeping", record
    s.next_key += 1
    return elapsed


async def build_loop(store: SQLiteStore, session: str, history: int, tool: bool) -> BideSession:
    """One task (or tool call) that completed ``history`` waits and is parked on the next."""
    ids = SequentialIds()
    h = harness(store, session, ids)
    await h.open()
    if tool:
        task = await h.create_task(TOOLS.task, TOOLS.call("wait_in_turn", {}))
    else:
        task = await h.create_task(Cycler, {"cycles": 10**9})
    await h.run_until_parked()
    for i in range(history):
        await h.signal(task, TICK, f"k{i}", i)
        await h.run_until_parked()
    record = h.task(task)
    assert record is not None and record.state.status == "sleeping", record
    await h.close()
    return BideSession(store, session, task, history, ids)


async def build_tasks(store: SQLiteStore, session: str, history: int) -> BideSession:
    """``history`` completed one-wait tasks and one live looping task parked on k0."""
    ids = SequentialIds()
    live = await build_session(store, session, history, ids)
    return BideSession(store, session, live, 0, ids)


async def build_bide(store: SQLiteStore, history: int, batch: int) -> dict[str, BideSession]:
    name = f"{history}-{batch}"
    return {
        "bide task loop": await build_loop(store, f"loop-{name}", history, tool=False),
        "bide tool loop": await build_loop(store, f"tool-{name}", history, tool=True),
        "bide N tasks": await build_tasks(store, f"tasks-{name}", history),
    }


# --- measurement ------------------------------------------------------------------------------

SDK_REACH, SDK_START, SDK_END = (
    "sdk: reach next wait",
    "sdk: to invocation start",
    "sdk: to invocation end",
)
SDK_MARKS = {"reach": SDK_REACH, "start": SDK_START, "end": SDK_END}
BIDE_SERIES = ("bide task loop", "bide tool loop", "bide N tasks")


def measure() -> dict[str, dict[int, list[float]]]:
    """Seconds per round, by series and history length. Rounds of every series alternate, so
    a change in the machine's load during the run shows in all of them alike."""
    times: dict[str, dict[int, list[float]]] = {
        label: {n: [] for n in HISTORY} for label in (*SDK_MARKS.values(), *BIDE_SERIES)
    }
    loop = asyncio.new_event_loop()
    clock = ManualClock()
    try:
        for n in HISTORY:
            store = SQLiteStore()
            per, done, batch = rounds_per_session(n), 0, 0
            while done < TRIALS:
                bide = loop.run_until_complete(build_bide(store, n, batch))
                sdk = SdkSession(n, f"loop-{n}-{batch}")
                try:
                    warm = 1 if batch == 0 else 0  # the first round of a length warms caches
                    count = min(per, TRIALS - done)
                    for i in range(warm + count):
                        marks = sdk.round()
                        elapsed = {
                            label: loop.run_until_complete(timed_round(s, clock))
                            for label, s in bide.items()
                        }
                        if i < warm:
                            continue
                        for name, label in SDK_MARKS.items():
                            times[label][n].append(marks[name])
                        for label, seconds in elapsed.items():
                            times[label][n].append(seconds)
                finally:
                    sdk.close()
                done += count
                batch += 1
            store.close()
    finally:
        loop.close()
    return times


# --- report -----------------------------------------------------------------------------------


def row(label: str, values: list[float], fmt: str) -> str:
    return f"    {label:<26}" + "".join(f"{v:>12{fmt}}" for v in values)


def main() -> None:
    began = time.perf_counter()
    print("Resume cost vs history length: deliver one callback (signal) after N earlier waits")
    print("in one session and reach the next wait. AWS Durable Execution SDK for Python, run by")
    print("its local test runner (in-process backend emulation, in-memory store), vs Bide on")
    print(f"SQLite in memory; rounds of all series alternate. Median of {TRIALS} rounds per cell.")
    load = os.getloadavg()[0]
    times = measure()
    medians = {
        label: {n: statistics.median(t) * 1000 for n, t in by_n.items()}
        for label, by_n in times.items()
    }
    first = HISTORY[0]
    print()
    print(row("median ms", [], "") + "".join(f"{f'N={n:,}':>12}" for n in HISTORY))
    for label in (SDK_START, SDK_REACH, SDK_END, *BIDE_SERIES):
        print(row(label, [medians[label][n] for n in HISTORY], ".3f"))
    print()
    print(f"    resume@N / resume@{first}: each system against itself")
    for label in (SDK_REACH, *BIDE_SERIES):
        print(row(label, [medians[label][n] / medians[label][first] for n in HISTORY], ".2f"))
    print()
    print("    Bide / SDK at each N (against 'sdk: reach next wait'; below 1 = Bide faster)")
    for label in BIDE_SERIES:
        print(row(label, [medians[label][n] / medians[SDK_REACH][n] for n in HISTORY], ".3f"))
    print()
    print("    The SDK replays its handler from the start on each resume: every earlier")
    print("    operation is answered again from the checkpoint log. Bide loads the live tasks")
    print("    and runs the woken one; a key a task or tool consumed leaves its record for a")
    print("    document of its own (read by key when needed); ended tasks are not loaded.")
    print("    'to invocation end' also holds the SDK stopping its checkpoint thread as the")
    print("    invocation ends (it polls for the stop signal every 100 ms in this version).")
    print(f"\n    load average at start: {load:.2f} on {os.cpu_count()} cores")
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
