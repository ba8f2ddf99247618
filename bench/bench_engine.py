"""Engine benchmark: park/wake cycles per second, and what one resume costs.

(a) Park/wake cycles: one task sleeps on a signal key, gets the signal, wakes, and sleeps on
    the next key, N times. One cycle is three commits (the delivery, the reservation that
    wakes the task, the next sleep). Measured on SQLite in a file (WAL, synchronous=FULL)
    and in memory.

(b) Resume cost: a worker that starts cold opens a new Harness on the store, delivers one
    signal and runs until the session is parked again. Measured in a session with 10 earlier
    completed waits and in one with 1,000 (earlier tasks that each slept on a signal and
    completed; they stay in the store). Loading reads live tasks only, so the ratio of the
    medians (resume@1000 / resume@10) should stay close to 1.0.

Run from the repository root:  PYTHONPATH=shared python bench/bench_engine.py
Nothing here asserts on timings; it prints a table.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import timed_run

from bide import (
    Completed,
    Harness,
    ManualClock,
    SequentialIds,
    Sleeping,
    SQLiteStore,
    Store,
    TaskRuntime,
    TaskView,
    Terminal,
    define_signal,
    define_task,
)

CYCLES = 1_000
HISTORY_SIZES = (10, 1_000)
RESUME_TRIALS = 25
BATCH = 50  # tasks created per run: one reservation commit holds at most 99 records

TICK = define_signal("bench.tick", 1, int)


async def cycle(task: TaskView, rt: TaskRuntime) -> None:
    """Read what woke us (as real code would), then sleep on the next key, or finish."""
    n = task.checkpoint["n"]
    if task.wake is not None:
        await rt.read_signal(TICK, f"k{n - 1}")
    if n >= task.input["cycles"]:
        await rt.commit(Terminal(outcome=Completed(result=n)))
        return
    await rt.commit(
        Sleeping(checkpoint={"phase": "cycle", "n": n + 1}, signals=(TICK.key(f"k{n}"),))
    )


Cycler = define_task("bench.cycler", 1, lambda _input: {"phase": "cycle", "n": 0}, {"cycle": cycle})


async def wait_once(task: TaskView, rt: TaskRuntime) -> None:
    """One earlier wait: sleep on "done", complete when it arrives."""
    await rt.commit(Sleeping(checkpoint="answered", signals=(TICK.key("done"),)))


async def answered(task: TaskView, rt: TaskRuntime) -> None:
    state = await rt.read_signal(TICK, "done")
    await rt.commit(Terminal(outcome=Completed(result=getattr(state, "value", None))))


Waiter = define_task(
    "bench.waiter", 1, lambda _input: "wait", {"wait": wait_once, "answered": answered}
)


def harness(store: Store, session: str, ids: SequentialIds) -> Harness:
    return Harness(store, session, [Cycler, Waiter], clock=ManualClock(), ids=ids)


# --- (a) park/wake cycles ---------------------------------------------------------------------


async def park_wake_cycles(store: Store, cycles: int) -> list[float]:
    """Seconds of each signal -> wake -> sleep-on-the-next-key cycle, in order."""
    h = harness(store, "cycles", SequentialIds())
    await h.open()
    task_id = await h.create_task(Cycler, {"cycles": cycles})
    await h.run_until_parked()  # parked on k0
    times = []
    for i in range(cycles):
        start = time.perf_counter()
        await h.signal(task_id, TICK, f"k{i}", i)
        await h.run_until_parked()
        times.append(time.perf_counter() - start)
    outcome = h.outcome(task_id)
    assert isinstance(outcome, Completed) and outcome.result == cycles, outcome
    await h.close()
    return times


# --- (b) resume cost --------------------------------------------------------------------------


async def build_session(store: Store, session: str, history: int, ids: SequentialIds) -> str:
    """``history`` completed waits, then one live task parked on a signal; its id."""
    h = harness(store, session, ids)
    await h.open()
    done = 0
    while done < history:
        batch = [await h.create_task(Waiter) for _ in range(min(BATCH, history - done))]
        await h.run_until_parked()
        for task_id in batch:
            await h.signal(task_id, TICK, "done", 1)
        await h.run_until_parked()
        assert all(h.outcome(t) is not None for t in batch)
        done += len(batch)
    live = await h.create_task(Cycler, {"cycles": 10**9})
    await h.run_until_parked()
    assert set(h.live_tasks) == {live}
    await h.close()
    return live


async def resume_once(store: Store, session: str, live: str, ids: SequentialIds, i: int) -> float:
    """Seconds for: a new Harness opens the session, one signal, run until parked again."""
    start = time.perf_counter()
    h = harness(store, session, ids)
    await h.open()
    await h.signal(live, TICK, f"k{i}", i)
    await h.run_until_parked()
    elapsed = time.perf_counter() - start
    record = h.task(live)
    assert record is not None and record.state.checkpoint["n"] == i + 2, record
    await h.close()
    return elapsed


async def resume_cost(store: Store) -> dict[int, list[float]]:
    ids = SequentialIds()  # one id source per store: ids never repeat across sessions
    sessions = {
        n: (f"resume-{n}", await build_session(store, f"resume-{n}", n, ids)) for n in HISTORY_SIZES
    }
    times: dict[int, list[float]] = {n: [] for n in HISTORY_SIZES}
    for trial in range(RESUME_TRIALS + 1):
        for n in HISTORY_SIZES if trial % 2 else reversed(HISTORY_SIZES):  # alternate the order
            session, live = sessions[n]
            elapsed = await resume_once(store, session, live, ids, trial)
            if trial > 0:  # the first round warms caches
                times[n].append(elapsed)
    return times


# --- report -----------------------------------------------------------------------------------


def with_store(kind: str, run: Callable[[Store], Any]) -> Any:
    if kind == "memory":
        store = SQLiteStore()
        try:
            return asyncio.run(run(store))
        finally:
            store.close()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(os.path.join(tmp, "bench.sqlite"))
        try:
            return asyncio.run(run(store))
        finally:
            store.close()


def main() -> None:
    print("(a) park/wake cycles: signal -> wake -> sleep on the next key (3 commits each)")
    print("    A used key leaves the live task for a document of its own, so the record stays")
    print("    the same size: the first and last tenth of the cycles should run alike.")
    head = f"{'store':<14}{'cycles':>8}{'cycles/s':>10}{'first 10%/s':>13}{'last 10%/s':>12}"
    print(f"    {head}")
    for kind, cycles in (("sqlite file", CYCLES), ("sqlite memory", CYCLES)):
        times = with_store(kind.split()[1], lambda s, c=cycles: park_wake_cycles(s, c))
        tenth = max(1, cycles // 10)
        rate, first, last = (len(t) / sum(t) for t in (times, times[:tenth], times[-tenth:]))
        print(f"    {kind:<14}{cycles:>8}{rate:>10.0f}{first:>13.0f}{last:>12.0f}")

    print()
    print(
        "(b) one resume: new Harness + open + signal + run_until_parked (median of "
        f"{RESUME_TRIALS} trials)"
    )
    print(f"    {'store':<14}{'history':>8}{'median ms':>11}{'p10 ms':>9}{'p90 ms':>9}")
    ratios = []
    for kind in ("sqlite file", "sqlite memory"):
        times = with_store(kind.split()[1], resume_cost)
        medians = {}
        for n in HISTORY_SIZES:
            ms = sorted(t * 1000 for t in times[n])
            deciles = statistics.quantiles(ms, n=10)
            medians[n] = statistics.median(ms)
            print(f"    {kind:<14}{n:>8}{medians[n]:>11.3f}{deciles[0]:>9.3f}{deciles[-1]:>9.3f}")
        ratios.append((kind, medians[HISTORY_SIZES[-1]] / medians[HISTORY_SIZES[0]]))
    print()
    for kind, ratio in ratios:
        print(f"    resume@{HISTORY_SIZES[-1]} / resume@{HISTORY_SIZES[0]} ({kind}): {ratio:.2f}")


if __name__ == "__main__":
    with timed_run():
        main()
