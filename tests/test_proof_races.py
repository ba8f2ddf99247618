"""Races: many worker invocations and signal deliveries at once on one session, as threads
with real HTTP clients against a moto server on 127.0.0.1 and against AWS DynamoDB Local
(when ``BIDE_DYNAMODB_LOCAL_ENDPOINT`` is set, as CI sets it: DynamoDB there, SQS, Scheduler
and S3 on the moto server).

* One consistent history: every task ends exactly once and is never written after it ended
  (a ledger sees every commit that lands); each parked task gets exactly one ``delivered``
  answer among all racing senders and ends with that value; a replay-unsafe tool runs at
  most once per call, however many workers race for it.
* Duplicate queue deliveries are harmless: the same wake handled by two workers at once,
  then delivered again, runs nothing twice and leaves exactly the alarm the session needs.
* Injected throttling (DynamoDB ``ProvisionedThroughputExceededException`` on a share of
  calls, retried by the store; SQS and Scheduler ``ThrottlingException`` answers on a share
  of requests, retried by the SDK as deployed): nothing lost, nothing doubled.

moto's own transactions are not thread-safe, so calls to the moto server's DynamoDB are
serialized by the client (:class:`aws_fixtures.LockedClient`), as DynamoDB serializes
conflicting transactions; DynamoDB Local needs no such help. The threads still race for the
session between calls. ``pytest -s`` prints the counters of each race.

The clouds and their throttling are ``tests/race_cloud.py``; the rig (the session and the race
itself) is ``tests/race_kit.py``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aws_fixtures import (
    unique,
)
from race_cloud import THROTTLE_SHARE, Cloud, open_cloud, serve_moto
from race_kit import (
    HOUR,
    Rig,
    check_history,
    napper_kind,
    race,
    report,
    rig_maker,
    run_threads,
)

from bide import Harness, SignalResult
from bide.constants import WORKER_TIMEOUT_SECONDS
from bide.service import worker
from bide.service.worker import run_session

LEASE = WORKER_TIMEOUT_SECONDS + 30.0


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    with serve_moto() as address:
        yield address


@pytest.fixture(scope="module", params=["moto server", "DynamoDB Local"])
def cloud(request: pytest.FixtureRequest, moto_server: str) -> Iterator[Cloud]:
    with open_cloud(request.param, moto_server) as opened:
        yield opened


@pytest.fixture
def make_rig(cloud: Cloud) -> Iterator[Callable[..., Rig]]:
    with rig_maker(cloud) as make:
        yield make


@pytest.fixture
def leased_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers whose harnesses lease the tasks they run for the worker's timeout plus some
    slack (``Harness(lease_seconds=...)``), so a duplicate worker leaves them alone. The rig's
    clock does not move: no lease expires during the race."""
    monkeypatch.setattr(worker, "Harness", functools.partial(Harness, lease_seconds=LEASE))


@pytest.mark.usefixtures("leased_workers")
def test_racing_workers_and_signals_leave_one_history(make_rig: Callable[..., Rig]) -> None:
    """Three workers invoked four times each, Lambda's poller, and three senders, at once:
    every worker but the one running a task leaves it alone (its lease is live), so no call
    is interrupted and no task faulted by takeovers."""
    rig = make_rig()
    started = time.perf_counter()
    nappers, pays = race(rig, workers=3)
    check_history(rig, nappers, pays, takeovers=True)
    report(rig, "3 racing workers x 4 runs + poller + 3 senders", time.perf_counter() - started)


def test_signals_racing_the_worker_lose_nothing(make_rig: Callable[..., Rig]) -> None:
    """One worker at a time (the FIFO queue's promise) racing three senders: every value
    lands exactly once and is read; every call runs exactly once."""
    rig = make_rig()
    started = time.perf_counter()
    nappers, pays = race(rig, workers=0)
    check_history(rig, nappers, pays, takeovers=False)
    report(rig, "poller + 3 senders", time.perf_counter() - started)


def test_throttling_is_retried_and_nothing_is_lost(make_rig: Callable[..., Rig]) -> None:
    """The same, with a share of every service's calls throttled."""
    rig = make_rig(throttle=True)
    started = time.perf_counter()
    # Parked first, so Scheduler is called (armed, then disarmed) whatever the interleaving.
    nappers, pays = race(rig, workers=0, park_first=True)
    check_history(rig, nappers, pays, takeovers=False)
    for service in ("dynamodb", "sqs", "scheduler"):
        assert rig.tally[f"{service} throttled"] > 0, f"no {service} call was throttled"
    title = f"poller + 3 senders, {THROTTLE_SHARE:.0%} of calls throttled"
    report(rig, title, time.perf_counter() - started)


@pytest.mark.parametrize("lease", [False, True])
def test_duplicate_wake_deliveries_are_harmless(
    make_rig: Callable[..., Rig], lease: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every wake is handled by two workers at once (SQS delivered it twice), and after the
    session parked, the same wake is delivered once more: each call runs once, each value is
    read once, and the session keeps exactly the alarm it needs. With leases, the duplicate
    leaves a call the other worker runs alone: it always ends ``paid``, never interrupted."""
    if lease:
        monkeypatch.setattr(worker, "Harness", functools.partial(Harness, lease_seconds=LEASE))
    rig = make_rig()
    start = rig.clock.now()
    kind = napper_kind(rig)
    registry = rig.deps.app.tools
    assert registry is not None
    (napper,) = rig.create(kind, [{"rounds": [{"keys": ["k"], "after": HOUR}]}])
    (pay,) = rig.create(registry.task, [registry.call("pay", {})])
    sqs = rig.cloud.sqs

    def twice(messages: list[dict[str, Any]]) -> None:
        for _ in messages:
            assert run_threads([rig.invoke, rig.invoke]) == []
        for message in messages:
            sqs.delete_message(QueueUrl=rig.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def drain_twice() -> list[dict[str, Any]]:
        seen = []
        while messages := sqs.receive_message(
            QueueUrl=rig.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60
        ).get("Messages", []):
            twice(messages)
            seen += messages
        return seen

    first = drain_twice()
    assert rig.probe.paid.count(pay) <= 1
    assert rig.task(napper).state.status == "sleeping"
    found = rig.schedule()
    assert found is not None and json.loads(found["Target"]["Input"])["at"] == start + HOUR
    # The same wake again, long after: nothing is runnable, nothing is written.
    seq = rig.raw.head(rig.session_id)
    for message in first:
        sqs.send_message(
            QueueUrl=rig.queue_url,
            MessageBody=message["Body"],
            MessageGroupId=rig.session_id,
            MessageDeduplicationId=unique("again"),
        )
    drain_twice()
    assert rig.raw.head(rig.session_id) == seq
    assert rig.send(napper, "hello") is SignalResult.DELIVERED
    drain_twice()
    assert rig.task(napper).state.outcome.result["values"] == {"k": "hello"}  # type: ignore[union-attr]
    outcome = rig.task(pay).state.outcome  # type: ignore[union-attr]
    assert rig.probe.paid.count(pay) <= 1
    paid = outcome.result["content"][0]["text"] == "paid"
    assert paid or (not lease and outcome.result["code"] == "interrupted"), outcome.result
    assert set(rig.ledger.endings.values()) == {1} and set(rig.ledger.endings) == {napper, pay}
    left = rig.schedule()
    if left is not None:
        # The duplicate worker ran on a state the other one had already moved on from: it
        # may create an alarm (for the other's lease's expiry, or, without leases, for the
        # napper's own deadline it still saw) after the other deleted the napper's alarm. A
        # create replaced nothing, so no re-check follows (docs/reliability.md, "One wake per
        # signal"): the alarm is a spare wake, seen in CI on DynamoDB Local without leases
        # too. Its fire must find nothing to run. (Disarming at the end is pinned without
        # races: tests/test_handlers_beats.py and the worker's handler tests.)
        seq = rig.raw.head(rig.session_id)
        sqs.send_message(
            QueueUrl=rig.queue_url,
            MessageBody=left["Target"]["Input"],
            MessageGroupId=rig.session_id,
            MessageDeduplicationId=unique("spare"),
        )
        drain_twice()
        assert rig.raw.head(rig.session_id) == seq  # the spare wake ran nothing


class GatedAlarms:
    """Alarms that hold one worker between its final check and its arming call until told
    to go on: a worker stalled there (a paused Lambda, a slow network) while another runs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reached = threading.Event()
        self.go = threading.Event()

    def arm(self, session_id: str, at: float) -> None:
        self.reached.set()
        assert self.go.wait(60)
        self.inner.arm(session_id, at)

    def disarm(self, session_id: str) -> None:
        self.reached.set()
        assert self.go.wait(60)
        self.inner.disarm(session_id)


@pytest.mark.parametrize("stalls_in", ["arm", "disarm"])
def test_a_stalled_worker_does_not_undo_a_newer_alarm(
    make_rig: Callable[..., Rig], stalls_in: str
) -> None:
    """Worker A finishes its run and stalls just before its Scheduler call: about to arm for
    a deadline an hour away (``arm``), or to delete the alarm because its task ended
    (``disarm``). Meanwhile a new task parks for a minute and worker B arms for it. Then A's
    call lands. The session must still be woken in a minute (not in an hour, not never):
    A notices the session moved on after its final check and queues a wake, and that run
    arms for the newest state."""
    rig = make_rig()
    start = rig.clock.now()
    kind = napper_kind(rig)
    (first,) = rig.create(kind, [{"rounds": [{"keys": ["k"], "after": HOUR}]}])
    rig.drain()
    gate = GatedAlarms(rig.deps.alarms)
    stalled = rig.deps.replace(alarms=gate)
    if stalls_in == "disarm":
        assert rig.send(first, "done") is SignalResult.DELIVERED  # A's run will end it
    worker_a = threading.Thread(
        target=lambda: asyncio.run(run_session(stalled, rig.session_id)), daemon=True
    )
    worker_a.start()
    assert gate.reached.wait(60)
    (short,) = rig.create(kind, [{"rounds": [{"after": 60}]}])
    rig.drain()  # worker B parks the new task and arms for it
    gate.go.set()
    worker_a.join(60)
    rig.drain()
    found = rig.schedule()
    assert found is not None, "the alarm the new task needs was deleted"
    at = json.loads(found["Target"]["Input"])["at"]
    assert at == start + 60, f"armed for {at - start:.0f}s from now, not 60s"
    assert rig.task(short).state.status == "sleeping"
