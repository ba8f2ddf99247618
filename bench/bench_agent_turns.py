"""What one agent turn costs at 10 and at 500 turns of history, with and without compaction.

For each store (SQLite; the DynamoDB store on moto's ``mock_aws`` with fake credentials,
nothing leaves the process) and each agent (``plain``: no compaction; ``compacted``: the
compaction hook, threshold 96 entries, keeping 32), a conversation is seeded with 10 or 500
turns of history (each: a user input, an answer calling a tool, the tool's result, the
final answer; about 2.2 KB of entries a turn), one warm-up turn runs (with compaction it is
the turn that compacts; its cost is printed separately), then two kinds of turn are measured,
five times each on SQLite, once on moto, alternating (counts: the largest; time: the smallest):

  turn        a plain turn: the input is answered at once (one model request);
  tool turn   the model calls a tool, the tool runs, the model answers (two model requests
              and a tool round).

Counted through a store wrapper, the same on both stores: store calls (``reqs``; on
DynamoDB the bench also counts the API calls made, ``api``, which adds a Query's further 1 MB
pages), documents read (``docs``) and the bytes of JSON they held (``bytes``), and the wall
time (``ms``; on moto the DynamoDB time is moto's: its Query walks every item of the table
in Python, so it grows with the table whatever the Query returns, unlike DynamoDB's, and is
not a figure for DynamoDB; DynamoDB bills a strongly consistent Query by the bytes it returns,
1 RRU per 4 KB, which ``bytes`` shows, and pages it at 1 MB:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html).
Each 500-turn figure is also printed as a ratio to the 10-turn figure of the same store,
agent and turn kind from the same run (the goal: <= 2x with compaction).

Run from the repository root:  PYTHONPATH=shared python bench/bench_agent_turns.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from _common import REGION, fake_aws, timed_run
from pydantic import BaseModel

from bide import Harness, ManualClock, SequentialIds, SQLiteStore
from bide.agent import Agent, Compaction, Conversations, GenerationHooks
from bide.agent.conversation import append_entry
from bide.agent.providers import ModelRequest, UserMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.engine.host import host_commit
from bide.engine.store.wrapper import StoreWrapper
from bide.tools import ToolRegistry, define_tool

CID = "c1"
HISTORIES = (10, 500)
COMPACTION = Compaction(threshold=96, keep=32)  # the 10-turn history never compacts
# Each measured turn kind, alternating; no repeat compacts (see COMPACTION). On moto one:
# its counts do not vary and its times are moto's (see above).
REPEATS = {"sqlite": 5, "dynamodb": 1}
SEED_TURNS_PER_COMMIT = 20  # 4 entries + the head a turn: 81 items, under the 99 a commit


class Q(BaseModel):
    q: str


async def lookup(args: Q, api: Any) -> str:
    return f"found {args.q}: " + "r" * 1200


def respond() -> ScriptedProvider:
    """Calls ``lookup`` for an input that asks for a tool, answers otherwise."""
    calls = iter(range(1, 10**9))

    def step(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("tool"):
            return call_tool("lookup", {"q": last.text}, id=f"live-{next(calls)}")
        return reply("a" * 500)

    return ScriptedProvider(step)


class Counting(StoreWrapper):
    """Counts store calls, documents and records read, and their bytes of JSON."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.docs = 0
        self.bytes = 0

    def _read(self, bodies: list[Any]) -> None:
        self.calls += 1
        self.docs += len(bodies)
        self.bytes += sum(len(json.dumps(b, separators=(",", ":"))) for b in bodies)

    def load(self, session_id: str) -> Any:
        snap = self.inner.load(session_id)
        self._read([r.to_dict() for r in snap.tasks.values()])
        return snap

    def get_task(self, session_id: str, task_id: str) -> Any:
        record = self.inner.get_task(session_id, task_id)
        self._read([] if record is None else [record.to_dict()])
        return record

    def head(self, session_id: str) -> int:
        self.calls += 1
        return self.inner.head(session_id)

    def commit(
        self, session_id: str, expected_seq: int, writes: Any, docs: Any = (), *, absent: Any = ()
    ) -> int:
        self.calls += 1
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)

    def get_doc(self, session_id: str, key: str) -> Any:
        doc = self.inner.get_doc(session_id, key)
        self._read([] if doc is None else [doc.body])
        return doc

    def list_docs(self, session_id: str, prefix: str, **kw: Any) -> Any:
        found = self.inner.list_docs(session_id, prefix, **kw)
        self._read([d.body for d in found])
        return found


@dataclass
class Cost:
    reqs: int
    api: int
    docs: int
    bytes: int
    ms: float


def seed(h: Harness, turns: int) -> None:
    """``turns`` turns of history, written as the agent writes them, in few commits."""
    for start in range(0, turns, SEED_TURNS_PER_COMMIT):

        def write(tx: Any, start: int = start) -> None:
            for n in range(start, min(turns, start + SEED_TURNS_PER_COMMIT)):
                call = {"id": f"old-{n}", "name": "lookup", "arguments": {"q": f"q{n}"}}
                append_entry(tx, CID, {"type": "user", "text": f"question {n} " + "u" * 180})
                append_entry(
                    tx,
                    CID,
                    {"type": "assistant", "text": "", "tool_calls": [call], "run": f"old-{n}"},
                )
                result = {"type": "tool_result", "call_id": f"old-{n}", "name": "lookup"}
                append_entry(tx, CID, {**result, "text": "r" * 1200, "is_error": False})
                append_entry(
                    tx,
                    CID,
                    {"type": "assistant", "text": "a" * 500, "tool_calls": [], "run": f"old-{n}"},
                )

        host_commit(h, write)


class Api:
    """Counts the DynamoDB API calls a client makes (botocore's before-call event)."""

    def __init__(self) -> None:
        self.calls = 0

    def hook(self, client: Any) -> Any:
        def before(**_: Any) -> None:
            self.calls += 1

        client.meta.events.register("before-call.dynamodb.*", before)
        return client


async def measure(store_kind: str, compacted: bool, history: int) -> dict[str, Cost]:
    api = Api()
    if store_kind == "sqlite":
        inner: Any = SQLiteStore()
    else:
        import boto3

        from bide.aws.dynamodb import DynamoDBStore, create_table

        table = f"bench-turns-{int(compacted)}-{history}"
        create_table(boto3.client("dynamodb", region_name=REGION), table)
        inner = DynamoDBStore(table, api.hook(boto3.client("dynamodb", region_name=REGION)))
    store = Counting(inner)
    hooks = [GenerationHooks("compaction", compact=COMPACTION)] if compacted else []
    agent = Agent(respond(), ToolRegistry([define_tool("lookup", "", Q, lookup)]), hooks=hooks)
    h = Harness(store, "s1", agent.task_kinds(), clock=ManualClock(), ids=SequentialIds())
    conv = Conversations(h, agent)
    await h.open()
    await conv.create(CID)
    seed(h, history)
    costs: dict[str, Cost] = {}
    plan = [("warm-up", "tool warm-up")]
    plan += [("turn", "hello"), ("tool turn", "tool go")] * REPEATS[store_kind]
    for n, (label, text) in enumerate(plan):
        store.reset()
        api.calls = 0
        began = time.perf_counter()
        await conv.submit(CID, text, request_id=f"r-{n}")
        await h.run_until_parked()
        elapsed = (time.perf_counter() - began) * 1000
        cost = Cost(store.calls, api.calls, store.docs, store.bytes, elapsed)
        before = costs.get(label)
        # Counts: the largest of the repeats; time: the smallest (the least disturbed).
        costs[label] = (
            cost
            if before is None
            else Cost(
                max(before.reqs, cost.reqs),
                max(before.api, cost.api),
                max(before.docs, cost.docs),
                max(before.bytes, cost.bytes),
                min(before.ms, cost.ms),
            )
        )
    await h.close()
    return costs


def row(name: str, cost: Cost, base: Cost | None, dynamo: bool) -> str:
    def ratio(a: float, b: float) -> str:
        return f"{a / b:5.2f}x" if b else "   - "

    api = f"{cost.api:4d}" if dynamo else "   -"
    line = f"{name:<34} {cost.reqs:5d} {api} {cost.docs:6d} {cost.bytes:9d} {cost.ms:8.1f}"
    if base is not None:
        line += (
            f"   {ratio(cost.reqs, base.reqs)} "
            + (f"{ratio(cost.api, base.api)} " if dynamo else "   -   ")
            + f"{ratio(cost.docs, base.docs)} {ratio(cost.bytes, base.bytes)} "
            + f"{ratio(cost.ms, base.ms)}"
        )
    return line


def main() -> None:
    print("One agent turn at 10 and at 500 turns of history (ratios: 500 / 10, same run).")
    header = f"{'':<34} {'reqs':>5} {'api':>4} {'docs':>6} {'bytes':>9} {'ms':>8}"
    print(header + "   reqs   api    docs   bytes  ms")
    for store_kind in ("sqlite", "dynamodb"):
        for compacted in (False, True):
            agent = "compacted" if compacted else "plain"
            with fake_aws() if store_kind == "dynamodb" else contextlib.nullcontext():
                results = {n: asyncio.run(measure(store_kind, compacted, n)) for n in HISTORIES}
            for label in ("warm-up", "turn", "tool turn"):
                for n in HISTORIES:
                    base = results[HISTORIES[0]][label] if n != HISTORIES[0] else None
                    name = f"{store_kind} {agent} {label} @{n}"
                    print(row(name, results[n][label], base, store_kind == "dynamodb"))
            print()


if __name__ == "__main__":
    with timed_run():
        main()
