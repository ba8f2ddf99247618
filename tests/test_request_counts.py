"""Requests made by Bide per round after N waits of history (issue 12, goal 3): at most 6 per
signal -> next wait and 4 per timed wake -> re-park, one worker run each, the same at every N.

The rounds are ``bench/bench_requests_history.py``'s own, on moto, counted by botocore hooks
(``bench/bench_aws_requests.py``); this pins the operations, so a request that creeps back
(the worker's GetItem of a fresh key's document, before its sleep became a condition of the
commit: ``Store.commit(absent=...)``) fails here before it shows in the bench."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_requests_history as history
from bench_aws_requests import Tally, build_stack, fake_aws

SIGNAL_THEN_WAIT = Counter(
    {
        # The signal function: the head and the task together; then the worker's targeted
        # pass (its wake names the task): the head and that task alone, no Query of the rest.
        "dynamodb:TransactGetItems": 2,
        # Its commit, one record onto the head (bide.aws.pending); the worker's next sleep,
        # which carries the reservation of the wake (a first delivery holds it until the
        # task's first commit: bide.engine.deferred).
        "dynamodb:UpdateItem": 1,
        "dynamodb:TransactWriteItems": 1,
        "sqs:SendMessage": 1,  # the signal function's wake
    }
)
TIMED_THEN_REPARK = Counter(
    {
        "dynamodb:Query": 1,
        # The re-park, which carries the reservation of the one task the alarm's wake starts
        # (held until its first commit on a first delivery: bide.engine.deferred); one
        # small record, so onto the head (bide.aws.pending).
        "dynamodb:UpdateItem": 1,
        "scheduler:CreateSchedule": 1,
    }
)


def by_bide(tally: Tally) -> Counter[str]:
    return Counter({op: n for (origin, op), n in tally.requests.items() if origin == "bide" and n})


@pytest.mark.parametrize("waits", [3, 100])
def test_requests_per_round_stay_at_the_goal_whatever_the_history(waits: int) -> None:
    with fake_aws():
        stack = build_stack()
        cells = asyncio.run(history.measure_cell(stack, waits))
    for tally in cells["signal -> next wait"]:
        assert by_bide(tally) == SIGNAL_THEN_WAIT
        assert sum(tally.wakes.values()) == 1  # one worker run
    for tally in cells["timed -> re-park"]:
        assert by_bide(tally) == TIMED_THEN_REPARK
        assert sum(tally.wakes.values()) == 1
    assert sum(SIGNAL_THEN_WAIT.values()) <= history.GOAL["signal -> next wait"] == 6
    assert sum(TIMED_THEN_REPARK.values()) <= history.GOAL["timed -> re-park"] == 4
