"""End to end on the twin: the real worker handler (``handle_worker``) behind the FIFO event
source mapping, DynamoDB on moto through the twin, alarms on the Scheduler twin, over
simulated hours. Nothing here waits on the wall clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from twin_fixtures import TwinBench, start_napper, twin_bench

from bide import Completed, Sleeping, Terminal
from bide.engine.clock import HOUR


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    # The worker logs every wake as JSON; hours of simulation need not print them.
    logging.disable(logging.INFO)
    yield
    logging.disable(logging.NOTSET)


def sleep_an_hour(bench: TwinBench, after: float, hours: float = 3) -> str:
    """Start a session whose task sleeps ``after`` seconds, run ``hours`` simulated hours;
    the task id."""

    async def scenario() -> str:
        bench.worker.start()
        task_id = await start_napper(bench, [{"after": after}], "s-1")
        await bench.twin.clock.sleep(hours * HOUR)
        return task_id

    return bench.twin.clock.run(scenario())


def test_a_session_sleeping_an_hour_is_woken_by_its_alarm_through_queue_and_worker() -> None:
    with twin_bench(seed=4, duplicate_rate=1.0) as bench:
        start = bench.twin.clock.now()
        task_id = sleep_an_hour(bench, after=HOUR)  # deadline on a whole minute
        task = bench.store.get_task("s-1", task_id)
        assert task is not None and isinstance(task.state, Terminal)
        assert isinstance(task.state.outcome, Completed)
        assert task.state.outcome.result["wake"] == {"reason": "time"}
        fires = bench.twin.scheduler.invocations
        assert [f.duplicate for f in fires] == [False, True]  # at least once: twice here
        assert all(start + HOUR <= f.at < start + HOUR + 60 for f in fires)
        # The submit wake and one alarm ran the worker; the duplicate was deduplicated.
        runs = bench.worker.invocations
        assert [r.outcome for r in runs] == ["success", "success"]
        assert bench.twin.sqs.bodies(bench.twin.queue_url) == []  # nothing left behind
        assert runs[1].started == fires[0].at
        assert bench.twin.clock.now() == start + 3 * HOUR


def test_the_session_completes_through_throttles_and_transaction_conflicts() -> None:
    with twin_bench(seed=9) as bench:
        bench.ddb.throttle_rate = 0.2
        bench.ddb.conflict_rate = 0.2
        task_id = sleep_an_hour(bench, after=HOUR)
        task = bench.store.get_task("s-1", task_id)
        assert task is not None and isinstance(task.state, Terminal)
        assert sum(bench.ddb.injected.values()) > 0
        assert {"TransactionCanceledException"} <= set(bench.ddb.injected)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_alarm_firing_early_in_its_minute_still_wakes_the_session(seed: int) -> None:
    with twin_bench(seed=seed) as bench:
        # Deadline at hh:mm:30: an at() naming that minute would fire before it with these
        # seeds (and the early wake once re-armed an identical, deduplicated Input).
        task_id = sleep_an_hour(bench, after=HOUR + 30)
        task = bench.store.get_task("s-1", task_id)
        assert task is not None
        assert not isinstance(task.state, Sleeping), "the session never woke again"
        assert isinstance(task.state, Terminal)
