"""Crash sweep over the examples in SWEPT: the process dies at every store write, before and
after the write took effect, and the scenario continues in a new process on the same store.

After recovery: the example's own checks hold (external effects exactly once, replay-unsafe
work never twice), every task reached its terminal state at most once and was never written
again afterwards, and nothing is left running or pending.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bide import SQLiteStore, Store, TaskRecord
from bide.testing import FaultyStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from scenario_kit import World, run_resilient  # noqa: E402

SWEPT = [
    "40_tool_waits_for_webhook",
    "41_tool_polls",
    "42_parallel_children",
    "43_subagent_waits",
    "44_approval_gate",
    "45_review_on_yield",
    "46_after_tools_terminate",
    "47_parallel_reads",
    "52_deploy_with_approval",
    "53_approval_deadline_escalation",
    "54_render_video_webhook",
    "55_refund_order_background",
    "56_remind_me_later",
    "57_remind_with_progress",
    "58_devbox_background",
    "60_steer_interrupts_parked_tool",
    "61_ci_failure_caught",
]


def load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Ledger:
    """Wraps a store and checks, on every commit that lands, that no ended task is written
    again (a call resolves exactly once)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.ended: dict[str, tuple[str, str]] = {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def commit(
        self, session_id, expected_seq, writes: Sequence[TaskRecord], docs=(), *, absent=()
    ) -> int:
        seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        for record in writes:
            assert record.id not in self.ended, f"{record.id} written after it ended"
            if record.state.status == "terminal":
                self.ended[record.id] = (record.kind, record.state.outcome.status)
        return seq

    def final_state(self, session_id: str) -> Counter[tuple[str, str]]:
        """What the session came to, free of ids and restart counts (which a crash changes):
        how many tasks of each kind ended with each outcome, and of each kind are still live
        in each state."""
        state = Counter(("ended", *kind_outcome) for kind_outcome in self.ended.values())
        for record in self.inner.load(session_id).tasks.values():
            state[("live", record.kind, record.state.status)] += 1
        return state


def world_for(
    fail_at: int | None, when: str, backend: Callable[[], Store] = SQLiteStore
) -> tuple[World, FaultyStore, Ledger]:
    ledger = Ledger(backend())
    store = FaultyStore(ledger, fail_at=fail_at, when=when)  # type: ignore[arg-type]
    world = World(store, quiet=True)
    world.flags.add("crash-demo")  # the sweep places the crashes itself
    return world, store, ledger


def sweep(name: str, backend: Callable[[], Store] = SQLiteStore) -> int:
    """Crash at every write of the example, before and after it lands; how many points."""
    module = load(name)
    world, store, ledger = world_for(None, "before", backend)
    baseline = asyncio.run(run_resilient(module.scenario, world))
    module.check(baseline, world)
    reference = ledger.final_state("demo")
    writes = store.commits
    assert writes > 3
    points = 0
    for fail_at in range(1, writes + 1):
        for when in ("before", "after"):
            world, store, ledger = world_for(fail_at, when, backend)
            result = asyncio.run(run_resilient(module.scenario, world))
            assert world.crashes == 1, (fail_at, when)
            module.check(result, world)
            live = ledger.load("demo").tasks.values()
            assert all(r.state.status in ("sleeping", "waiting") for r in live), (fail_at, when)
            # The crash changes nothing the session comes to: the same tasks end with the
            # same outcomes as in the run without a crash, and the same ones are left parked.
            assert ledger.final_state("demo") == reference, (fail_at, when)
            points += 1
    return points


@pytest.mark.parametrize("name", SWEPT)
def test_crash_at_every_write(name):
    points = sweep(name)
    print(f"{name}: {points} crash points on SQLite, all recovered")


@pytest.mark.parametrize("name", ["40_tool_waits_for_webhook", "43_subagent_waits"])
def test_crash_at_every_write_on_dynamodb(name):
    """The same sweep on the DynamoDB store (moto): a new session id per run keeps runs apart
    in one table."""
    import threading

    from aws_fixtures import LockedClient, aws_client, fake_aws_environment
    from moto import mock_aws

    from bide.aws.dynamodb import DynamoDBStore, create_table

    with fake_aws_environment(), mock_aws():
        ddb = LockedClient(aws_client("dynamodb"), threading.Lock())
        s3 = aws_client("s3")
        s3.create_bucket(Bucket="sweep-offload")
        tables = iter(range(10_000))

        def backend() -> Store:
            # each run gets its own table, so the fixed session id "demo" never collides
            table = f"sweep-{next(tables)}"
            create_table(ddb, table)
            return DynamoDBStore(table, ddb, bucket="sweep-offload", s3_client=s3)

        points = sweep(name, backend)
    print(f"{name}: {points} crash points on DynamoDB (moto), all recovered")
