"""One long-lived task waiting again and again: what a resume costs after N earlier waits.

The loop is the one of the AWS Durable Execution SDK (``bench_durable_sdk.py``): ONE task
sleeps on a fresh signal key, a value arrives, it reads it and sleeps on the next key. After
N earlier waits we time one more round, as the host runs it: ``deliver_signal`` (the signal
function: no session load), then a new Harness opens the session, runs until the task is
parked on the next key, and closes (the worker).

Stores: SQLite in memory; the DynamoDB store on AWS DynamoDB Local (a local Java server on
127.0.0.1, when ``$BIDE_DYNAMODB_LOCAL_ENDPOINT`` is set: run this under
``scripts/with_dynamodb_local.sh``), its offload bucket on a moto S3 server on 127.0.0.1; and
the DynamoDB store on moto in process (``mock_aws``, fake credentials: no request leaves the
machine), for N = 10 and 1,000 only. Both DynamoDB stores offload past the default 64 KB. moto
is not DynamoDB: its Query takes longer the more items the partition holds, whatever it
returns (a one-item Query took 66 ms with 10 items and 419 ms with 2,000 on this machine), so
its times grow with the documents a history leaves although the load's Query returns none of
them; its bytes and S3 counts are what Bide asked for. Neither local server's milliseconds are
DynamoDB's: they compare rounds with each other.

Per round, for N = 10, 1,000 and 10,000:

  ms         median wall time of a round
  read B     bytes of records and documents the store handed to Bide (their JSON), per round
  written B  bytes of records and documents Bide gave the store to write, per round
  S3 puts    S3 PutObject calls per round (large items offloaded; 0 on SQLite)
  record B   the task record's JSON after the round

and each against N = 10, measured in the same run. Bytes are counted by a StoreWrapper around
the store in every round (so the counting is inside the timed work, on every N alike).

The N = 10 history is built by looping. The larger ones are written directly, as the state a
real loop leaves: the task record (sleeping on ``k<N>``) and one document per consumed key.
That this is the same state is checked first: for N = 60 a looped and a written history give
equal records and equal documents (it stops otherwise). Each timed round adds one wait; a
built session serves at most max(1, N // 20) rounds, so the history stays within 5% of N.
The lengths take turns round by round, after three warm-up rounds of each.

Run from the repository root:
    PYTHONPATH=shared scripts/with_dynamodb_local.sh python bench/bench_long_task.py
Nothing here asserts on timings; it prints ratios measured in this one run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from _common import (
    Counting,
    boto3_client,
    fake_aws,
    fake_env,
    load_line,
    n_heads,
    row,
    timed_run,
)
from bench_engine import TICK, Cycler

from bide import Harness, ManualClock, SequentialIds, SignalResult, SQLiteStore, deliver_signal
from bide.engine import slots
from bide.engine.records import SignalSlot
from bide.engine.state import Sleeping
from bide.engine.store import Doc, Store

HISTORY = (10, 1_000, 10_000)
TRIALS = 21  # timed rounds per history length and store
WARMUP = 3  # rounds of each length run first and not kept (DynamoDB Local's JVM warms up)
CHECK_N = 60  # the history built both ways to show the direct build is a real loop's state
MOTO_HISTORY = (10, 1_000)  # moto slows with every item in a table: 10,000 takes too long
LOCAL_ENDPOINT_VAR = "BIDE_DYNAMODB_LOCAL_ENDPOINT"
BUCKET = "bide-bench-offload"
CHUNK = 90  # documents per commit when writing a history directly (a commit holds 99 items)


# --- building a history -------------------------------------------------------------------------


def harness(store: Store, session: str, ids: SequentialIds) -> Harness:
    return Harness(store, session, [Cycler], clock=ManualClock(), ids=ids)


async def looped(store: Store, session: str, history: int) -> str:
    """One Cycler that completed ``history`` waits by looping, parked on ``k<history>``."""
    h = harness(store, session, SequentialIds())
    await h.open()
    task = await h.create_task(Cycler, {"cycles": 10**9})
    await h.run_until_parked()
    for i in range(history):
        assert await h.signal(task, TICK, f"k{i}", i) == SignalResult.DELIVERED
        await h.run_until_parked()
    await h.close()
    return task


async def written(store: Store, session: str, history: int, revs: tuple[int, int]) -> str:
    """The same state written directly: a Cycler parked on ``k0``, then the documents of the
    consumed keys ``k0 .. k<history-1>`` and the record a loop leaves (``revs``: the record's
    revision after 0 waits and the revisions one wait adds)."""
    task = await looped(store, session, 0)
    start = store.get_task(session, task)
    assert start is not None
    for first in range(0, history, CHUNK):
        docs = []
        for i in range(first, min(history, first + CHUNK)):
            name = TICK.key(f"k{i}").slot
            slot = SignalSlot(version=TICK.version, value=i, has_value=True, consumed=True)
            docs.append(Doc(slots.doc_key(task, name), slots.to_body(name, slot)))
        store.commit(session, store.head(session), [], docs)
    state = Sleeping(
        checkpoint={"phase": "cycle", "n": history + 1}, signals=(TICK.key(f"k{history}"),)
    )
    record = start.replace(state=state, rev=revs[0] + revs[1] * history)
    store.commit(session, store.head(session), [record])
    return task


async def revisions(new_store: Callable[[], Store]) -> tuple[int, int]:
    """The record's revision after 0 waits, and what each wait adds (from two short loops)."""
    found = []
    for n in (0, 1):
        store = new_store()
        task = await looped(store, "probe", n)
        record = store.get_task("probe", task)
        assert record is not None
        found.append(record.rev)
    return found[0], found[1] - found[0]


async def same_state(new_store: Callable[[], Store], revs: tuple[int, int]) -> None:
    """Stop unless a written history is exactly a looped one (record and documents)."""
    a, b = new_store(), new_store()
    ta = await looped(a, "check", CHECK_N)
    tb = await written(b, "check", CHECK_N, revs)
    ra, rb = a.get_task("check", ta), b.get_task("check", tb)
    assert ra is not None and rb is not None and ra.to_json() == rb.to_json(), (ra, rb)
    prefix = slots.task_prefix(ta)
    da, db = a.list_docs("check", prefix), b.list_docs("check", prefix)
    assert len(da) == CHECK_N and da == db, "the written documents differ from the looped ones"


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Round:
    seconds: float
    read: int
    written: int
    s3_puts: int
    record: int


class S3Puts:
    """Counts PutObject calls of one boto3 S3 client."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        client.meta.events.register("before-parameter-build.s3.PutObject", self._put)

    def _put(self, **_: Any) -> None:
        self.count += 1


async def timed_round(
    store: Counting, puts: S3Puts | None, session: str, task: str, n: int
) -> Round:
    """One resume: deliver the value of ``k<n>``, then a worker run on a new Harness."""
    store.reset()
    before = puts.count if puts else 0
    began = time.perf_counter()
    decision = deliver_signal(store, session, task, TICK, f"k{n}", n, ManualClock())
    h = harness(store, session, SequentialIds())
    await h.open()
    await h.run_until_parked()
    await h.close()
    elapsed = time.perf_counter() - began
    assert decision.result is SignalResult.DELIVERED, decision
    record = store.inner.get_task(session, task)
    assert record is not None and isinstance(record.state, Sleeping), record
    assert record.state.signals == (TICK.key(f"k{n + 1}"),), record.state
    return Round(
        elapsed,
        store.read,
        store.written,
        (puts.count if puts else 0) - before,
        len(record.to_json().encode()),
    )


@dataclass
class Built:
    """A built session: its task, the key it sleeps on, and the rounds it may still serve."""

    session: str
    task: str
    key: int
    left: int


async def measure(
    new_store: Callable[[], Store], puts: S3Puts | None, history: Sequence[int] = HISTORY
) -> dict[int, list[Round]]:
    """Rounds by history length. The lengths take turns round by round (after WARMUP rounds
    of each that are not kept), so a change in the machine's load or a server warming up
    shows in all of them alike."""
    revs = await revisions(new_store)
    await same_state(new_store, revs)
    stores = {n: Counting(new_store()) for n in history}
    built: dict[int, Built | None] = dict.fromkeys(history)
    count = dict.fromkeys(history, 0)
    out: dict[int, list[Round]] = {n: [] for n in history}
    for i in range(WARMUP + TRIALS):
        for n in history:
            store, current = stores[n], built[n]
            if current is None or current.left == 0:
                session = f"s-{n}-{count[n]}"
                count[n] += 1
                if n <= 100:
                    task = await looped(store.inner, session, n)
                else:
                    task = await written(store.inner, session, n, revs)
                current = built[n] = Built(session, task, n, max(1, n // 20))
            result = await timed_round(store, puts, current.session, current.task, current.key)
            current.key += 1
            current.left -= 1
            if i >= WARMUP:
                out[n].append(result)
    return out


def dynamodb_stores(ddb: Any, s3: Any) -> tuple[Callable[[], Store], S3Puts]:
    """A factory of DynamoDB stores (a new table each, so sessions never collide) sharing one
    offload bucket, and the counter of that bucket's PutObject calls."""
    from bide.aws.dynamodb import DynamoDBStore, create_table

    s3.create_bucket(Bucket=BUCKET)
    tables = iter(range(1_000))

    def new_store() -> Store:
        name = f"bide-bench-{os.getpid()}-{next(tables)}"
        create_table(ddb, name)
        return DynamoDBStore(name, ddb, bucket=BUCKET, s3_client=s3)

    return new_store, S3Puts(s3)


def measure_moto() -> tuple[dict[int, list[Round]], int]:
    """Rounds on the DynamoDB store on moto (in process), and the objects in its bucket."""
    with fake_aws():
        ddb, s3 = boto3_client("dynamodb"), boto3_client("s3")
        new_store, puts = dynamodb_stores(ddb, s3)
        rounds = asyncio.run(measure(new_store, puts, MOTO_HISTORY))
        objects = s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
    return rounds, objects


def measure_dynamodb_local(endpoint: str) -> tuple[dict[int, list[Round]], int]:
    """Rounds on the DynamoDB store on AWS DynamoDB Local at ``endpoint`` (127.0.0.1), with
    the offload bucket on a moto S3 server on 127.0.0.1."""
    from moto.server import ThreadedMotoServer

    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"{LOCAL_ENDPOINT_VAR}={endpoint}: only a local endpoint is used here")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the S3 server's request log
    with fake_env():
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            s3_host, s3_port = server.get_host_and_port()
            ddb = boto3_client("dynamodb", endpoint)
            s3 = boto3_client("s3", f"http://{s3_host}:{s3_port}")
            new_store, puts = dynamodb_stores(ddb, s3)
            rounds = asyncio.run(measure(new_store, puts))
            objects = s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
        finally:
            server.stop()
    return rounds, objects


# --- report -------------------------------------------------------------------------------------


def report(label: str, rounds: dict[int, list[Round]]) -> None:
    history = list(rounds)
    first = history[0]

    def med(n: int, part: str) -> float:
        return statistics.median(getattr(r, part) for r in rounds[n])

    print(f"\n  {label}")
    print(row("", n_heads(history), label_width=22))
    rows = [
        ("ms per round", "seconds", 1000.0, ".3f"),
        ("read B per round", "read", 1.0, ".0f"),
        ("written B per round", "written", 1.0, ".0f"),
        ("S3 puts per round", "s3_puts", 1.0, ".0f"),
        ("record B", "record", 1.0, ".0f"),
    ]
    for name, part, scale, fmt in rows:
        print(row(name, [med(n, part) * scale for n in history], fmt, label_width=22))
    print(f"    against N={first}:")
    for name, part, _scale, _fmt in rows:
        base = med(first, part)
        if base == 0:
            continue
        print(row(name, [med(n, part) / base for n in history], ".2f", label_width=22))


def main() -> None:
    print("One task waiting again and again (the AWS Durable Execution SDK's loop): one resume")
    print("(deliver_signal + a worker run) after N earlier waits. Median of")
    print(f"{TRIALS} rounds per cell; bytes are JSON of records and documents through the Store.")
    print(f"Written histories checked equal to a looped one at N={CHECK_N} (record, documents).")
    load = load_line()
    sqlite = asyncio.run(measure(SQLiteStore, None))
    report("SQLite (in memory)", sqlite)
    endpoint = os.environ.get(LOCAL_ENDPOINT_VAR, "").strip()
    if endpoint:
        local, objects = measure_dynamodb_local(endpoint)
        report("DynamoDB store on AWS DynamoDB Local (S3 offload at 64 KB on moto)", local)
        print(f"    objects in the offload bucket after every build and round: {objects}")
    else:
        print(f"\n  ({LOCAL_ENDPOINT_VAR} unset: no DynamoDB Local run; see the module docstring)")
    moto, objects = measure_moto()
    report("DynamoDB store on moto in process (S3 offload at 64 KB)", moto)
    print(f"    objects in the offload bucket after every build and round: {objects}")
    print("    moto's Query takes longer the more items a partition holds, whatever it returns:")
    print("    read its bytes and S3 rows; the times that matter are the ones above.")
    print(f"\n  {load}")


if __name__ == "__main__":
    with timed_run():
        main()
