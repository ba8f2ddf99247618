"""Requests made by Bide for one signal -> next wait of a workflow body, on moto, at 3 and 100
earlier waits: ``bench/bench_requests_history.py``'s workflow rounds
(``bench/_workflow_rounds.py``), counted by the botocore hooks of
``bench/bench_aws_requests.py``.

This pins today's count, issue 12's budget of 6 (the task loop's): 6 for a warm worker and
for a cold one (the worker's targeted read fetches the sealed pages its cache lacks with the
task, the signal's wake naming how many: 7 for a cold one with sealed pages while a Query
listed them; 8 and 9 while the woken run committed the tool
task's intent and the resolution of the wait the body was parked on had a commit of its own;
9 and 10 while the poll of the next key read its signal document; 10 and 11 before the next
wait's record rode with its park). A
commit or read that creeps in fails
here; a change that removes one must lower the pin (and docs/performance.md's figure). What each
request is for is said below, from the code path that makes it.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import _workflow_rounds as flow
from bench_aws_requests import Tally, build_stack, fake_aws

WARM = Counter(
    {
        # The signal function: the head and the task read together, then its commit (the
        # value stored on the task's record, the task made runnable), then the wake message
        # (naming the task). The worker: a targeted pass, the head and the task (and its
        # owner, if any) read together (a second TransactGetItems, no Query of the session);
        "dynamodb:TransactGetItems": 2,
        "sqs:SendMessage": 1,
        # then the signal function's commit and the worker's one: the park on the next key
        # (sleeping), which carries
        #   * the claim the worker held until then (a first delivery: bide.engine.deferred):
        #     the consumed value moved to its signal document. No intent commit comes
        #     between: a replay-safe workflow body needs none (docs/reliability.md, "a woken
        #     workflow body commits no intent");
        #   * the resolution of the wait the body was parked on (its two memos, held: the
        #     value is in the consumed key's document, so a replay reads the same one) and
        #     the next wait's record (its operation memo, staged when the wait began:
        #     Runtime.stage_memo), requiring the next key's signal document absent instead
        #     of the poll reading it (a key consumed or expired earlier is no longer on the
        #     record).
        "dynamodb:TransactWriteItems": 2,
    }
)
# A cold worker (no sealed page cached) makes the same requests: the pages come with the task
# in the worker's TransactGetItems (the wake carries their count), no Query lists them.
COLD = WARM
# A new process's first run is whole: a Query in place of the worker's TransactGetItems (its
# reservation is held all the same: a whole pass holds it too when it reserves that task alone).
NEW_PROCESS = WARM - Counter({"dynamodb:TransactGetItems": 1}) + Counter({"dynamodb:Query": 1})


def by_bide(tally: Tally) -> Counter[str]:
    return Counter({op: n for (origin, op), n in tally.requests.items() if origin == "bide" and n})


@pytest.mark.parametrize("waits", [3, 100])
def test_a_workflow_body_signal_then_next_wait_makes_the_pinned_requests(waits: int) -> None:
    with fake_aws():
        stack = build_stack()
        cells = asyncio.run(flow.measure_body(stack, waits, 2))
    for tally in cells[flow.WARM]:
        assert by_bide(tally) == WARM
        assert sum(tally.wakes.values()) == 1  # one worker run
    for tally in cells[flow.COLD]:
        assert by_bide(tally) == COLD
        assert sum(tally.wakes.values()) == 1
    # A new worker process's first run of the session is a whole pass: the live set's Query in
    # place of the worker's TransactGetItems, and once a page is sealed (32 waits fill the
    # first, 64 memos) the replay's Query listing the pages, which a whole pass does not read.
    new = NEW_PROCESS + (Counter({"dynamodb:Query": 1}) if waits >= 32 else Counter())
    for tally in cells[flow.NEW]:
        assert by_bide(tally) == new
        assert sum(tally.wakes.values()) == 1
    assert sum(WARM.values()) == 5 < 6  # under issue 12 goal 3's budget (the task loop's)
