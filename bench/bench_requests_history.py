"""Requests per signal -> next wait and per timed wake -> re-park, at 3, 100 and 1,000 waits of
history, against the goal of issue 12 ("The cost floor") and the figures before it.

Each measured round runs through the real code on moto, counted by the botocore hooks of
``bench_aws_requests.py`` (requests made by Bide: the signal function's
``service.signals.deliver`` and the worker function's ``handle_worker``; Lambda's poller,
Scheduler and the invocations are counted apart, as in that bench):

  signal -> next wait   a long-lived task that has already consumed N signal values (one per
                        wait) gets the next one and sleeps on the next key;
  timed -> re-park      a task that has already slept N times on a deadline is woken by its
                        alarm and sleeps again with a new deadline;
  workflow signal -> next wait
                        a workflow tool whose body has done N ``await ctx.wait_for(...)`` gets
                        the value of the one it is parked on and parks on the next
                        (``_workflow_rounds.py``), by a warm worker (its sealed pages cached)
                        and by a cold one (a new process: it lists them), against the same
                        budget as the task loop.

History is built quickly and uncounted: the same app and engine run the N rounds on an
in-memory SQLite store (a ``Harness`` that delivers and runs), and the task's record is then
committed as it stands into the DynamoDB store on moto (the session's sequence number differs,
nothing else). One uncounted worker run follows (for the timed task it arms its alarm; for
the signalled one it is the worker process's first run of the session, which is a whole pass:
``bide.service.whole_runs``). Then two rounds are counted; both must agree.

"before" is the figure recorded in docs/performance.md (run of 2026-11-30) for the code before
issue 12, which queued two wakes per signal; that path no longer exists, so it is not
measured again here.

Run from the repository root:  PYTHONPATH=shared python bench/bench_requests_history.py
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from _common import fake_aws, timed_run
from _workflow_rounds import COLD, NEW, WARM, measure_body
from bench_aws_requests import APP, REPLY, Looper, Napper, Stack, Tally, build_stack

from bide import Harness, RandomIds, SQLiteStore, TaskRecord
from bide.service import signals as signal_service

HISTORY = (3, 100, 1_000)
ROUNDS = 2  # counted rounds per cell; their counts must agree
SCENARIOS = ("signal -> next wait", "timed -> re-park", WARM, COLD, NEW)
# Requests made by Bide (issue 12); a workflow body's round is held to the task loop's budget.
# A new worker process's first run of a session is a whole pass (bide.service.whole_runs),
# shown against the same figure.
GOAL = {"signal -> next wait": 6, "timed -> re-park": 4, WARM: 6, COLD: 6, NEW: 6}
BEFORE = {"signal -> next wait": 11, "timed -> re-park": 6}  # recorded 2026-11-30
NAP_SECONDS = 60  # Napper sleeps a minute per round


async def built_history(stack: Stack, session_id: str, kind: Any, n: int) -> str:
    """Run ``n`` rounds of ``kind`` on SQLite (uncounted) and copy its record to the
    DynamoDB store. The task's id."""
    sqlite = SQLiteStore()
    harness = Harness(sqlite, session_id, APP.task_kinds(), clock=stack.clock, ids=RandomIds())
    await harness.attach()
    task_id = await harness.create_task(kind, {"naps": n + 2 * ROUNDS + 2})
    await harness.run_until_parked()
    for i in range(n):
        if kind is Looper:
            await harness.deliver(task_id, REPLY, f"k{i}", {"text": "x"})
        else:
            stack.clock.advance(NAP_SECONDS + 1)
        await harness.run_until_parked()
    record = sqlite.get_task(session_id, task_id)
    assert isinstance(record, TaskRecord) and record.state.status == "sleeping", record
    stack.deps.store.commit(session_id, 0, [record])
    sqlite.close()
    return task_id


async def warm_worker(stack: Stack, session_id: str) -> None:
    """One uncounted worker run of ``session_id``: a worker process runs a session whole the
    first time it runs it (bide.service.whole_runs); counted rounds are a warm worker's."""
    stack.deps.queue.wake(session_id, "api")
    await stack.worker()


async def measure_cell(stack: Stack, n: int) -> dict[str, list[Tally]]:
    """The counted rounds of both scenarios after ``n`` waits of history."""
    out: dict[str, list[Tally]] = {s: [] for s in SCENARIOS}
    looping = f"hist-loop-{n}"
    looper = await built_history(stack, looping, Looper, n)
    await warm_worker(stack, looping)
    for i in range(n, n + ROUNDS):
        with stack.meter.counting() as tally:
            stack.invoked("signal")
            decision = signal_service.deliver(
                stack.deps, looping, looper, REPLY.name, f"k{i}", {"text": "x"}
            )
            await stack.worker()
        assert decision.result.value == "delivered", decision
        out["signal -> next wait"].append(tally)
    record = stack.deps.store.get_task(looping, looper)
    assert record is not None and record.state.status == "sleeping", record

    napping = f"hist-nap-{n}"
    built_history_task = await built_history(stack, napping, Napper, n)
    stack.deps.queue.wake(napping, "api")  # one uncounted run: it arms the alarm
    await stack.worker()
    for _ in range(ROUNDS):
        stack.clock.advance(NAP_SECONDS + 1)
        with stack.meter.counting() as tally:
            stack.fire_alarm(napping)
            await stack.worker()
        out["timed -> re-park"].append(tally)
    record = stack.deps.store.get_task(napping, built_history_task)
    assert record is not None and record.state.status == "sleeping", record
    return out


def by_bide(tally: Tally) -> Counter[str]:
    """Requests made by Bide, by AWS service."""
    counts: Counter[str] = Counter()
    for (origin, operation), n in tally.requests.items():
        if origin == "bide":
            counts[operation.split(":", 1)[0]] += n
    return counts


def measure_history() -> dict[tuple[str, int], Tally]:
    """One agreed tally per (scenario, history)."""
    result: dict[tuple[str, int], Tally] = {}
    with fake_aws():
        stack = build_stack()
        for n in HISTORY:
            cells = asyncio.run(measure_cell(stack, n))
            cells.update(asyncio.run(measure_body(stack, n, ROUNDS)))
            for scenario, tallies in cells.items():
                if any(t.requests != tallies[0].requests for t in tallies):
                    raise RuntimeError(f"{scenario} at {n}: counts differ between rounds")
                result[(scenario, n)] = tallies[-1]
    return result


def print_table(result: dict[tuple[str, int], Tally]) -> None:
    heads = [f"{n:,}" for n in HISTORY] + ["goal", "before"]
    print(f"    {'requests made by Bide':<34}" + "".join(f"{h:>8}" for h in heads))
    for scenario in SCENARIOS:
        services = sorted({s for n in HISTORY for s in by_bide(result[(scenario, n)])})
        print(f"    {scenario}")
        for service in services:
            cells = [by_bide(result[(scenario, n)])[service] for n in HISTORY]
            print(f"      {service:<32}" + "".join(f"{c:>8}" for c in cells))
        totals = [sum(by_bide(result[(scenario, n)]).values()) for n in HISTORY]
        row = [*totals, GOAL[scenario], BEFORE.get(scenario, "-")]
        print(f"      {'total':<32}" + "".join(f"{c:>8}" for c in row))
        runs = [sum(result[(scenario, n)].wakes.values()) for n in HISTORY]
        print(f"      {'worker runs (wake messages)':<32}" + "".join(f"{c:>8}" for c in runs))
        goal = GOAL[scenario]
        over = [f"{n:,}" for n, total in zip(HISTORY, totals, strict=True) if total > goal]
        print(f"      goal NOT met at {', '.join(over)}" if over else "      goal met at all three")
    print()
    print("    RRU / WRU (estimated) per round:")
    for scenario in SCENARIOS:
        cells = ", ".join(
            f"{n:,}: {result[(scenario, n)].rru:.0f} / {result[(scenario, n)].wru:.0f}"
            for n in HISTORY
        )
        print(f"      {scenario:<30} {cells}")


def main() -> None:
    print("Requests made by Bide per round after N waits of history, on moto, against the")
    print("goal of issue 12 and the figure recorded before it (docs/performance.md).")
    print()
    print_table(measure_history())


if __name__ == "__main__":
    with timed_run():
        main()
