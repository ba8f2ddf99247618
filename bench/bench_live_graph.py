"""The live graph: one signal in a session with 10, 100 and 1,000 parked tasks (issue 12 goal 6:
at 1,000 it costs at most 3x what it costs at 10).

Every task of the session is a long-lived ``Looper`` (``bench_aws_requests.py``) parked on a
key of its own. A round is one signal to ONE of them through the real service code, as the
signal function and the worker run it: ``service.signals.deliver`` (store the value, queue one
wake), then the worker runs the session until it is parked again (the woken task reads the
value and sleeps on its next key; the others stay parked). Measured:

  SQLite (in memory)    a ``Deps`` over ``SQLiteStore``; the worker is ``service.worker.
                        run_session``, once per queued wake, with the task the wake names
                        (a signal's: the worker's targeted pass). Time: median of SQLITE_TRIALS
                        rounds (the sizes take turns, after a warm-up round each), with no
                        counting in the timed rounds; records and bytes of JSON read and
                        written: from separate rounds through a counting store wrapper.
  DynamoDB store, moto  the host services as the Lambdas run them (``bench_aws_requests.
                        build_stack``: ``DynamoDBStore`` behind ``ObservedStore``, the SQS FIFO
                        wake queue, the worker function's entry point ``handle_worker``, which
                        calls ``run_session``). Counted rounds: requests made by Bide (botocore
                        hooks), the items the live index's Query returned, DynamoDB request
                        units estimated from item sizes under AWS's rules, the live local index's
                        writes included (``cost_meter.Meter``, the metering of
                        ``bench_cost.py``), and the session head's size (a digest of the
                        live tasks: constant). moto cannot report consumed capacity (it answers
                        ``ReturnConsumedCapacity`` with a fixed figure), so units come from item
                        sizes. Time: separate rounds without counting; moto's Query walks
                        every item of the partition in Python, so its times are moto's.

The session is built on SQLite (tasks created 50 at a time and run until parked) and, for
DynamoDB, its records are committed as they stand into the DynamoDB store (99 items a commit at
most). Each round signals the same task with its next key, so the live set stays the same size.
Ratios are @N / @10, measured in the same run; the goal row says MET when the ratio at 1,000 is
at most 3.

Extra row (labelled, not the goal's): the same, but the signalled task is a ``Deadliner``, which
sleeps on its next key WITH a deadline an hour on (a webhook with a timeout); the other tasks are
Loopers as above, in sessions of their own (on moto, a table of their own: each row gets a
fresh moto, whose writes slow down with every item of the table). A targeted pass leaves the
session's alarm alone only when its task had no deadline as loaded and has none after, so here
a full pass (reading every live task) follows to arm the session-wide earliest deadline
(``service.worker``). The clock moves one second before each of its rounds, so each arms a
new time. Its SQLite time is the median of DEADLINE_SQLITE_TRIALS rounds (each reads the whole
session).

Run from the repository root:  PYTHONPATH=shared python bench/bench_live_graph.py
Nothing here asserts on timings; it prints ratios measured in this one run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from _common import Counting, fake_aws, load_line, median_ms, row, timed_run
from bench_aws_requests import APP, REPLY, Looper, Stack, build_stack, item_bytes
from cost_meter import Meter, Round

from bide import Harness, ManualClock, RandomIds, Sleeping, SQLiteStore, TaskRecord, define_task
from bide.app import App
from bide.aws.table import HEAD_SORT_KEY, PARTITION_KEY, SORT_KEY
from bide.engine.store import MAX_COMMIT_ITEMS, Store
from bide.service import signals as signal_service
from bide.service.deps import Deps
from bide.service.worker import run_session

SIZES = (10, 100, 1_000)
SQLITE_TRIALS = 15  # timed rounds per size on SQLite
MOTO_COUNTED = 2  # counted rounds per size on moto: their counts must agree
MOTO_TIMED = 3  # timed rounds per size on moto (moto's own time: shown, not the goal)
BATCH = 50  # tasks created per run while building (a reservation commit holds 99 records)
GOAL = 3.0  # issue 12 goal 6: a signal at 1,000 parked tasks <= 3x the same at 10
DEADLINE_SQLITE_TRIALS = 7  # the extra row: each round is a full pass too (reads every task)
DEADLINE_SECONDS = 3600.0  # the Deadliner's sleeps end an hour on (a webhook's timeout)
ROWS = ("plain", "deadline")  # the goal's row; the extra row (the signalled task has a deadline)


async def deadline_wait(task: Any, rt: Any) -> None:
    """The Looper's wait with a deadline: sleep on key k<n> until an hour from now; each wake
    reads its key and sleeps on the next one (the deadline never passes in this bench)."""
    n = task.checkpoint["n"]
    if task.wake is not None:
        await rt.read_signal(REPLY, f"k{n - 1}")
    await rt.commit(
        Sleeping(
            checkpoint={"phase": "wait", "n": n + 1},
            signals=(REPLY.key(f"k{n}"),),
            until=rt.now() + DEADLINE_SECONDS,
        )
    )


Deadliner = define_task(
    "bench.deadliner", 1, lambda _: {"phase": "wait", "n": 0}, {"wait": deadline_wait}
)
# The bench app (already wired) and the Deadliner: nothing else changes for the Loopers.
LIVE_APP = App(
    tasks=[*APP.tasks, Deadliner], signals=APP.signals, tools=APP.tools, wire_features=False
)


# --- the session ----------------------------------------------------------------------------


async def park_tasks(
    store: Store, session: str, n: int, clock: ManualClock, middle: Any = Looper
) -> list[str]:
    """``n`` tasks in ``session``, each parked on its own key, ``ids[n // 2]`` of kind
    ``middle`` and the others Loopers; their ids."""
    h = Harness(store, session, LIVE_APP.task_kinds(), clock=clock, ids=RandomIds())
    await h.open()
    ids: list[str] = []
    while len(ids) < n:
        for _ in range(min(BATCH, n - len(ids))):
            ids.append(await h.create_task(middle if len(ids) == n // 2 else Looper, None))
        await h.run_until_parked()
    assert len(h.live_tasks) == n and all(h.task(t).state.status == "sleeping" for t in ids)  # type: ignore[union-attr]
    await h.close()
    return ids


def copy_session(source: Store, target: Store, session: str) -> None:
    """Commit the session's live records as they stand into ``target``."""
    records = list(source.load(session).tasks.values())
    seq = 0
    for first in range(0, len(records), MAX_COMMIT_ITEMS):
        seq = target.commit(session, seq, records[first : first + MAX_COMMIT_ITEMS])


@dataclass
class Target:
    """One session and the task the rounds signal, with its next key."""

    session: str
    task: str
    sent: int = 0  # values sent so far: the task is parked on k<sent>
    clock: ManualClock | None = None  # a Deadliner's: moved on a second a round

    def next_key(self) -> str:
        if self.clock is not None:
            self.clock.advance(1.0)  # each of its sleeps then ends at a new time
        self.sent += 1
        return f"k{self.sent - 1}"


def check_parked(store: Store, target: Target) -> None:
    """The signalled task took every value sent and sleeps on the next key."""
    record = store.get_task(target.session, target.task)
    assert isinstance(record, TaskRecord) and record.state.status == "sleeping", record
    assert record.state.checkpoint["n"] == target.sent + 1, record
    if target.clock is not None:  # a Deadliner: its sleep ends an hour after the last round
        assert record.state.until == target.clock.now() + DEADLINE_SECONDS, record


# --- SQLite -----------------------------------------------------------------------------------


class Wakes:
    """The wake queue of the SQLite host: the worker runs each queued session, with the task
    a signal's wake names (as the worker's entry point reads it from the message)."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, tuple[str, str | None, tuple[int, float] | None] | None]] = []

    def wake(
        self,
        session_id: str,
        reason: str,
        *,
        task: str | None = None,
        owner: str | None = None,
        pages: tuple[int, float] | None = None,
    ) -> None:
        self.queued.append((session_id, None if task is None else (task, owner, pages)))


class NoAlarms:
    """Sessions parked on signals only never arm an alarm; any call for one would be a bug
    here. The sessions of the extra row (``timed``) arm theirs: the time is kept."""

    def __init__(self, timed: set[str]) -> None:
        self.timed = timed
        self.at: dict[str, float] = {}

    def arm(self, session_id: str, at: float) -> bool | None:
        if session_id not in self.timed:
            raise AssertionError(f"{session_id} armed an alarm at {at}")
        replaced = session_id in self.at
        self.at[session_id] = at
        return replaced

    def disarm(self, session_id: str) -> None:
        raise AssertionError(f"{session_id} disarmed an alarm")


async def host_round(deps: Deps, wakes: Wakes, target: Target) -> float:
    """One signal and the worker runs it queued: seconds."""
    began = time.perf_counter()
    decision = signal_service.deliver(
        deps, target.session, target.task, REPLY.name, target.next_key(), {"text": "x"}
    )
    runs = 0
    while wakes.queued:
        session, focus = wakes.queued.pop(0)
        await run_session(deps, session, focus=focus)
        runs += 1
    elapsed = time.perf_counter() - began
    assert decision.result.value == "delivered" and runs == 1, (decision, runs)
    return elapsed


@dataclass
class SqliteFigures:
    seconds: dict[int, list[float]]
    records: dict[int, int]  # task records read per round
    read: dict[int, int]  # bytes of JSON read per round
    written: dict[int, int]


async def measure_sqlite() -> dict[str, SqliteFigures]:
    """Both rows, by row; the extra row's sessions are separate, measured after the goal's."""
    inner = SQLiteStore()
    counting = Counting(inner)
    clock = ManualClock()
    wakes = Wakes()
    alarms = NoAlarms({f"live-deadline-{n}" for n in SIZES})
    plain, counted = (
        Deps(store=s, alarms=alarms, queue=wakes, app=LIVE_APP, clock=clock, ids=RandomIds())
        for s in (inner, counting)
    )
    targets: dict[str, dict[int, Target]] = {r: {} for r in ROWS}
    for n in SIZES:
        tasks = await park_tasks(inner, f"live-{n}", n, clock)
        targets["plain"][n] = Target(f"live-{n}", tasks[n // 2])
        tasks = await park_tasks(inner, f"live-deadline-{n}", n, clock, Deadliner)
        targets["deadline"][n] = Target(f"live-deadline-{n}", tasks[n // 2], clock=clock)
    out = {}
    for name, trials in (("plain", SQLITE_TRIALS), ("deadline", DEADLINE_SQLITE_TRIALS)):
        figures = out[name] = SqliteFigures({n: [] for n in SIZES}, {}, {}, {})
        for trial in range(trials + 1):
            for n in SIZES if trial % 2 else reversed(SIZES):  # alternate the order
                elapsed = await host_round(plain, wakes, targets[name][n])
                if trial:  # the first round of each size warms caches
                    figures.seconds[n].append(elapsed)
        for n in SIZES:
            # A worker process runs a session whole the first time it runs it, per store
            # object (bide.service.whole_runs), and the counting wrapper is a store of its
            # own: one uncounted round first, as the timed rounds had their warm-up.
            await host_round(counted, wakes, targets[name][n])
            counting.reset()
            await host_round(counted, wakes, targets[name][n])
            figures.records[n], figures.read[n], figures.written[n] = (
                counting.records_read,
                counting.read,
                counting.written,
            )
            check_parked(inner, targets[name][n])
            if name == "deadline":  # its round armed the session for the new deadline
                assert alarms.at[f"live-deadline-{n}"] == clock.now() + DEADLINE_SECONDS
    inner.close()
    return out


# --- DynamoDB on moto -------------------------------------------------------------------------


@dataclass
class MotoFigures:
    seconds: dict[int, list[float]]
    requests: dict[int, Counter[str]]  # made by Bide, "service:Operation"
    query_items: dict[int, tuple[int, int]]  # items and bytes the live index's Query returned
    units: dict[int, Round]  # DynamoDB request units (cost_meter)
    head_bytes: dict[int, int]  # the session head item after the rounds


class QueryItems:
    """Counts the items the store's Queries return and their size (an after-call hook on its
    client); ``None`` while not counting."""

    def __init__(self, client: Any) -> None:
        self.count: int | None = None
        self.bytes = 0
        client.meta.events.register("after-call.dynamodb.Query", self._after)

    def _after(self, parsed: dict[str, Any], **_: Any) -> None:
        if self.count is not None:
            self.count += len(parsed.get("Items", []))
            self.bytes += sum(item_bytes(i) for i in parsed.get("Items", []))


async def moto_round(stack: Stack, target: Target) -> float:
    began = time.perf_counter()
    stack.invoked("signal")
    decision = signal_service.deliver(
        stack.deps, target.session, target.task, REPLY.name, target.next_key(), {"text": "x"}
    )
    await stack.worker()
    elapsed = time.perf_counter() - began
    assert decision.result.value == "delivered", decision
    return elapsed


def by_bide(requests: Counter[tuple[str, str]]) -> Counter[str]:
    """The requests Bide made (not Lambda's poller, not the invocations), by operation."""
    return Counter({op: k for (origin, op), k in requests.items() if origin == "bide"})


async def measure_moto(name: str) -> MotoFigures:
    """One row (``ROWS``) on a stack of its own: each row's table holds its sessions only
    (moto's writes and Queries slow down with every item of the table)."""
    stack = build_stack()
    stack.deps.app = LIVE_APP
    units = Meter(stack.meter.inspector)
    units.install(stack.ddb.meta.events)
    items = QueryItems(stack.ddb)
    clock, targets = ManualClock(), {}
    for n in SIZES:
        sqlite = SQLiteStore()
        session = f"live-moto-{n}" if name == "plain" else f"live-moto-deadline-{n}"
        tasks = await park_tasks(
            sqlite, session, n, clock, Looper if name == "plain" else Deadliner
        )
        copy_session(sqlite, stack.deps.store, session)
        sqlite.close()
        targets[n] = Target(session, tasks[n // 2], clock=None if name == "plain" else stack.clock)
        await moto_round(stack, targets[n])  # warm-up: first Query of the table, cold paths
    return await moto_rounds(stack, units, items, targets)


async def moto_rounds(
    stack: Stack, units: Meter, items: QueryItems, targets: dict[int, Target]
) -> MotoFigures:
    """One row's timed, then counted rounds."""
    out = MotoFigures({n: [] for n in SIZES}, {}, {}, {}, {})
    for trial in range(MOTO_TIMED):
        for n in SIZES if trial % 2 else reversed(SIZES):
            out.seconds[n].append(await moto_round(stack, targets[n]))
    for n in SIZES:
        seen: list[tuple[Counter[str], tuple[int, int], Round]] = []
        for _ in range(MOTO_COUNTED):
            units.round, items.count, items.bytes = Round(), 0, 0
            with stack.meter.counting() as tally:
                await moto_round(stack, targets[n])
            seen.append((by_bide(tally.requests), (items.count, items.bytes), units.round))
            units.round, items.count = None, None
        if any((s[0], s[1]) != (seen[0][0], seen[0][1]) for s in seen):
            raise RuntimeError(f"{n} tasks: counts differ between rounds: {seen}")
        out.requests[n], out.query_items[n], out.units[n] = seen[-1]
        head = stack.meter.inspector.get_item(
            TableName=stack.deps.store.inner.table_name,
            Key={PARTITION_KEY: {"S": targets[n].session}, SORT_KEY: {"S": HEAD_SORT_KEY}},
            ConsistentRead=True,
        )["Item"]
        out.head_bytes[n] = item_bytes(head)
        check_parked(stack.deps.store, targets[n])
        if targets[n].clock is not None:  # the extra row's rounds armed its schedule
            assert stack.deps.alarms.armed_at(targets[n].session), targets[n]  # type: ignore[attr-defined]
    return out


# --- report -----------------------------------------------------------------------------------

W = 40  # label width


def table(title: str, metrics: dict[str, dict[int, float]], fmt: dict[str, str]) -> None:
    """Each metric by size, then each against its value at the first size."""
    first = SIZES[0]
    print(f"\n  {title}")
    print(row("per round", [f"{n:,} tasks" for n in SIZES], label_width=W))
    for name, by_n in metrics.items():
        print(row(name, [by_n[n] for n in SIZES], fmt[name], label_width=W))
    print(f"    @N / @{first}")
    for name, by_n in metrics.items():
        if by_n[first]:
            print(row(name, [by_n[n] / by_n[first] for n in SIZES], ".2f", label_width=W))


def goal_rows(rows: dict[str, dict[int, float]]) -> None:
    last, first = SIZES[-1], SIZES[0]
    print(f"\n  goal (issue 12, goal 6): one signal at {last:,} parked tasks / at {first}")
    print(row("", ["ratio", "goal", "verdict"], label_width=W))
    for name, by_n in rows.items():
        ratio = by_n[last] / by_n[first]
        verdict = "MET" if ratio <= GOAL else "NOT MET"
        print(row(name, [f"{ratio:.2f}", f"<= {GOAL:.0f}", verdict], label_width=W))


def sqlite_table(figures: SqliteFigures, trials: int, label: str) -> dict[str, dict[int, float]]:
    """Print one row's SQLite figures; its metrics."""
    metrics = {
        "ms (median)": {n: median_ms(figures.seconds[n]) for n in SIZES},
        "task records read": {n: float(figures.records[n]) for n in SIZES},
        "KB of JSON read": {n: figures.read[n] / 1024 for n in SIZES},
        "KB of JSON written": {n: figures.written[n] / 1024 for n in SIZES},
    }
    table(
        f"{label}SQLite in memory (time: median of {trials} rounds)",
        metrics,
        dict.fromkeys(metrics, ".1f") | {"ms (median)": ".3f", "task records read": ".0f"},
    )
    return metrics


def moto_table(moto: MotoFigures, label: str) -> dict[str, dict[int, float]]:
    """Print one row's DynamoDB figures; its metrics."""
    ops = sorted({op for n in SIZES for op in moto.requests[n]})
    metrics: dict[str, dict[int, float]] = {
        f"requests: {op}": {n: float(moto.requests[n][op]) for n in SIZES} for op in ops
    }
    metrics |= {
        "requests made by Bide": {n: float(sum(moto.requests[n].values())) for n in SIZES},
        "items returned by the live Query": {n: float(moto.query_items[n][0]) for n in SIZES},
        "KB returned by the live Query": {n: moto.query_items[n][1] / 1024 for n in SIZES},
        "RRU (est.)": {n: moto.units[n].rru for n in SIZES},
        "WRU table (est.)": {n: moto.units[n].wru for n in SIZES},
        "WRU live index (est.)": {n: moto.units[n].wru_index for n in SIZES},
        "request units, all (est.)": {
            n: moto.units[n].rru + moto.units[n].wru + moto.units[n].wru_index for n in SIZES
        },
        "session head item (bytes)": {n: float(moto.head_bytes[n]) for n in SIZES},
        "ms (moto, median)": {n: median_ms(moto.seconds[n]) for n in SIZES},
    }
    fmt = dict.fromkeys(metrics, ".0f") | {
        "ms (moto, median)": ".1f",
        "KB returned by the live Query": ".1f",
    }
    table(
        f"{label}DynamoDB store on moto (counts: {MOTO_COUNTED} rounds, equal; time: median of "
        f"{MOTO_TIMED})",
        metrics,
        fmt,
    )
    return metrics


def ratio_rows(
    sqlite: dict[str, dict[int, float]], moto: dict[str, dict[int, float]]
) -> dict[str, dict[int, float]]:
    """The four figures goal 6 is judged on."""
    return {
        "SQLite: time": sqlite["ms (median)"],
        "SQLite: bytes read": sqlite["KB of JSON read"],
        "DynamoDB: requests made by Bide": moto["requests made by Bide"],
        "DynamoDB: request units (RRU+WRU+index)": moto["request units, all (est.)"],
    }


def extra_rows(rows: dict[str, dict[int, float]]) -> None:
    """The extra row's ratios: shown against 3x, but not the goal's verdict."""
    last, first = SIZES[-1], SIZES[0]
    print(
        "\n  extra: the signalled task sleeps with a deadline (a full pass follows to arm the"
        " session's alarm)"
    )
    print(f"  one signal at {last:,} parked tasks / at {first} (not the goal's row)")
    print(row("", ["ratio", "at most 3?"], label_width=W))
    for name, by_n in rows.items():
        ratio = by_n[last] / by_n[first]
        print(row(name, [f"{ratio:.2f}", "yes" if ratio <= GOAL else "no"], label_width=W))


def main() -> None:
    print("One signal to one of N parked tasks (each on its own key) and the worker run until")
    print("the session is parked again, through service.signals.deliver and the worker.")
    load = load_line()
    sqlite = asyncio.run(measure_sqlite())
    moto = {}
    for name in ROWS:
        with fake_aws():  # a fresh moto for each row
            moto[name] = asyncio.run(measure_moto(name))
    plain = ratio_rows(
        sqlite_table(sqlite["plain"], SQLITE_TRIALS, ""), moto_table(moto["plain"], "")
    )
    goal_rows(plain)
    low, _, high = (q * 1000 for q in statistics.quantiles(sqlite["plain"].seconds[SIZES[-1]], n=4))
    print(f"\n  SQLite at {SIZES[-1]:,} tasks: quartiles {low:.2f}-{high:.2f} ms")
    print("\n  EXTRA ROW: the signalled task sleeps on its next key with a deadline an hour on")
    label = "extra (deadline): "
    extra_rows(
        ratio_rows(
            sqlite_table(sqlite["deadline"], DEADLINE_SQLITE_TRIALS, label),
            moto_table(moto["deadline"], label),
        )
    )
    print(f"\n  {load}")


if __name__ == "__main__":
    with timed_run():
        main()
