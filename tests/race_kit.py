"""The rig the race proofs (``tests/test_proof_races.py``) run on: one session with parked
nappers and replay-unsafe ``pay`` calls on a cloud of ``tests/race_cloud.py`` (a table and a
FIFO queue of its own, throttled or not), the race itself (senders, Lambda's poller, extra
workers as threads) and the check of its one history.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aws_fixtures import unique, wake_queue
from handler_fixtures import REPLY, ROLE_ARN
from proof_fixtures import Ledger, ProofProbe, proof_app
from race_cloud import (
    THROTTLE_SHARE,
    Cloud,
    client,
    throttle_calls,
    throttle_requests,
)

from bide import Harness, ManualClock, RandomIds, SignalResult, TaskRecord
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.aws.scheduler import SchedulerAlarms, schedule_name
from bide.aws.sqs import SqsWakeQueue, parse_wake, wake_focus
from bide.service.deps import Deps
from bide.service.signals import deliver
from bide.service.worker import run_session

HOUR = 3600.0


# --- one racing deployment -----------------------------------------------------------------------


@dataclass
class Rig:
    """A table and a FIFO queue of their own, the services wired to them, and the counters
    of what happened."""

    cloud: Cloud
    deps: Deps
    ledger: Ledger
    raw: DynamoDBStore
    probe: ProofProbe
    clock: ManualClock
    table: str
    queue_url: str
    session_id: str
    tally: Counter[str] = field(default_factory=Counter)
    answers: dict[str, list[SignalResult]] = field(default_factory=dict)
    delivered: dict[str, list[str]] = field(default_factory=dict)
    maybe: dict[str, list[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.tally[what] += n

    def harness(self) -> Harness:
        return Harness(
            self.deps.store,
            self.session_id,
            self.deps.app.task_kinds(),
            clock=self.clock,
            ids=self.deps.ids,
            services=self.deps.harness_services(),
        )

    def create(self, kind: Any, inputs: list[Any]) -> list[str]:
        async def create() -> list[str]:
            harness = self.harness()
            await harness.attach()
            return [await harness.create_task(kind, value) for value in inputs]

        ids = asyncio.run(create())
        self.deps.queue.wake(self.session_id, "submitted")
        return ids

    # --- what runs in the threads

    def invoke(self, focus: tuple[str, str | None] | None = None, *, first: bool = False) -> bool:
        """One worker invocation for the session (a Lambda run); False if it failed (its
        wake would be delivered again). ``focus``: the task a signal's wake names (a
        targeted pass, as handle_worker runs it); ``first``: the wake's first delivery (the
        pass holds the task's reservation until its first commit, as handle_worker does)."""
        self.count("worker runs" if focus is None else "worker runs (a signal's task)")
        try:
            run = run_session(self.deps, self.session_id, focus=focus, hold_reservation=first)
            asyncio.run(run)
        except Exception as exc:
            self.count(f"worker failed: {type(exc).__name__}")
            return False
        return True

    def poll(self) -> int:
        """Lambda's SQS poller, one batch: run the worker per wake; delete what succeeded,
        make the rest visible again. How many wakes it handled."""
        sqs = self.cloud.sqs
        try:
            found = sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=60,
                AttributeNames=["ApproximateReceiveCount"],
            )
        except Exception:
            self.count("poll failed")
            return 0
        messages = found.get("Messages", [])
        failed = False
        for message in messages:
            assert parse_wake(message["Body"])[0] == self.session_id
            first = message.get("Attributes", {}).get("ApproximateReceiveCount") == "1"
            failed = failed or not self.invoke(wake_focus(message["Body"]), first=first)
            handle = message["ReceiptHandle"]
            for _ in range(5):  # the poller's own calls are throttled too: it retries
                try:
                    if failed:
                        sqs.change_message_visibility(
                            QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
                        )
                    else:
                        sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=handle)
                    break
                except Exception:
                    self.count("poller call retried")
        return len(messages)

    def send(self, task_id: str, value: str) -> SignalResult:
        """A sender of one signal: a 5xx (the function failed, the store stayed busy) makes
        it send again, as a webhook sender does. When an attempt failed and a later one is
        answered ``duplicate`` or ``closed``, the failed attempt may have stored this very
        value (its answer was lost): such values are kept apart as ``maybe``."""
        failed = False
        for _ in range(20):
            try:
                decision = deliver(
                    self.deps, self.session_id, task_id, REPLY.name, "k", {"text": value}
                )
            except Exception as exc:
                self.count(f"signal retried: {type(exc).__name__}")
                failed = True
                continue
            with self._lock:
                self.answers.setdefault(task_id, []).append(decision.result)
                if decision.result is SignalResult.DELIVERED:
                    self.delivered.setdefault(task_id, []).append(value)
                elif failed and decision.result in (SignalResult.DUPLICATE, SignalResult.CLOSED):
                    # The lost attempt may have stored this value: the retry then finds it
                    # (duplicate), or finds the task already ended on it (closed).
                    self.maybe.setdefault(task_id, []).append(value)
            return decision.result
        raise AssertionError(f"signal to {task_id} never got an answer")

    def drain(self, rounds: int = 200) -> None:
        """Poll until the queue stays empty."""
        for _ in range(rounds):
            if self.poll() == 0 and self.poll() == 0:
                return
        raise AssertionError("the queue did not drain")

    def schedule(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.cloud.scheduler.get_schedule(
                Name=schedule_name(self.session_id), GroupName=self.cloud.group
            )
        except self.cloud.scheduler.exceptions.ResourceNotFoundException:
            return None
        return found

    def task(self, task_id: str) -> TaskRecord:
        record = self.raw.get_task(self.session_id, task_id)
        assert record is not None
        return record

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cloud.sqs.delete_queue(QueueUrl=self.queue_url)
        with contextlib.suppress(Exception):
            self.cloud.ddb.delete_table(TableName=self.table)


@contextlib.contextmanager
def rig_maker(cloud: Cloud) -> Iterator[Callable[..., Rig]]:
    """A factory of rigs on ``cloud``; every rig made is closed when the block ends."""
    made: list[Rig] = []

    def make(*, throttle: bool = False, seed: int = 7) -> Rig:
        raw_sqs = client("sqs", _endpoint(cloud.sqs), sdk_attempts=3)
        raw_scheduler = client("scheduler", _endpoint(cloud.scheduler), sdk_attempts=3)
        tally: Counter[str] = Counter()
        ddb: Any = cloud.ddb
        if throttle:
            throttle_requests(raw_sqs, THROTTLE_SHARE, seed, tally)
            throttle_requests(raw_scheduler, THROTTLE_SHARE, seed + 1, tally)
            ddb = throttle_calls(cloud.ddb, THROTTLE_SHARE, seed + 2, tally)
        sqs, scheduler = raw_sqs, raw_scheduler
        table = unique("race")
        create_table(cloud.ddb, table)
        queue_url, queue_arn = wake_queue(cloud.sqs, "race-wakes", 60)
        timing = {"base_delay": 0.005, "max_delay": 0.2, "max_attempts": 10}
        store = DynamoDBStore(table, ddb, bucket=cloud.bucket, s3_client=cloud.s3, **timing)
        raw = DynamoDBStore(table, cloud.ddb, bucket=cloud.bucket, s3_client=cloud.s3)
        ledger = Ledger(store, raw)
        probe, clock = ProofProbe(), ManualClock()
        deps = Deps(
            store=ledger,  # type: ignore[arg-type]
            alarms=SchedulerAlarms(
                scheduler, group=cloud.group, queue_arn=queue_arn, role_arn=ROLE_ARN
            ),
            queue=SqsWakeQueue(sqs, queue_url),
            app=proof_app(probe),
            clock=clock,
            ids=RandomIds(),
        )
        rig = Rig(cloud, deps, ledger, raw, probe, clock, table, queue_url, unique("s"), tally)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()


def _endpoint(raw_client: Any) -> str:
    return str(raw_client.meta.endpoint_url)


def run_threads(targets: list[Callable[[], Any]]) -> list[BaseException]:
    """Start every target together (a barrier) and wait for all; the errors raised."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def wrap(target: Callable[[], Any]) -> Callable[[], None]:
        def go() -> None:
            try:
                barrier.wait()
                target()
            except BaseException as exc:
                errors.append(exc)

        return go

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    return errors


# --- the races -----------------------------------------------------------------------------------

NAPPERS, PAYS, SENDERS = 6, 4, 3
RESTART_LIMIT_REACHED = "restart limit reached"


def napper_kind(rig: Rig) -> Any:
    return next(k for k in rig.deps.app.tasks if k.name == "test.napper")


def race(
    rig: Rig, *, workers: int, runs: int = 4, park_first: bool = False
) -> tuple[list[str], list[str]]:
    """Nappers parked on key ``k`` (with an hour's deadline, so workers arm alarms) and
    replay-unsafe ``pay`` calls in one session; then, all at once: ``workers`` threads
    invoking the worker ``runs`` times each, SENDERS threads each sending a value to every
    napper (each in its own order), and Lambda's poller draining the wakes the others queue.
    ``park_first``: the nappers are run until parked (their alarm armed) before the race;
    otherwise their first run races the senders too, and may find every value already
    there (then no alarm is ever armed)."""
    rounds = [{"keys": ["k"], "after": HOUR}]
    nappers = rig.create(napper_kind(rig), [{"rounds": rounds}] * NAPPERS)
    if park_first:
        rig.drain()
    registry = rig.deps.app.tools
    assert registry is not None
    pays = rig.create(registry.task, [registry.call("pay", {}) for _ in range(PAYS)])
    done = threading.Event()

    def poller() -> None:
        while not done.is_set():
            if rig.poll() == 0:
                time.sleep(0.01)

    def worker() -> None:
        for _ in range(runs):
            rig.invoke()

    def sender(n: int) -> Callable[[], None]:
        def go() -> None:
            order = list(nappers)
            random.Random(n).shuffle(order)
            for task_id in order:
                rig.send(task_id, f"sender {n} -> {task_id}")

        return go

    polling = threading.Thread(target=poller)
    polling.start()
    try:
        errors = run_threads([worker] * workers + [sender(n) for n in range(SENDERS)])
    finally:
        done.set()
        polling.join(timeout=120)
    assert errors == [], errors
    # A direct invocation that failed has no message to be delivered again: one more wake
    # stands in for that redelivery (harmless when nothing failed).
    rig.deps.queue.wake(rig.session_id, "redelivery")
    rig.drain()
    return nappers, pays


def check_history(rig: Rig, nappers: list[str], pays: list[str], *, takeovers: bool) -> None:
    """One consistent history, whatever the interleaving.

    ``takeovers``: workers ran the session at the same time. With leases (see
    :func:`leased_workers`) a worker leaves a task another one is running alone, so racing
    adds no outcome of its own: a call ends ``interrupted``, or a task faulted by the restart
    limit, only after a worker run failed (a store error stops a run like a crash, and its
    tasks are recovered as after one). Those are counted, and nothing may run twice."""
    failed_runs = sum(n for what, n in rig.tally.items() if what.startswith("worker failed"))
    takeovers = takeovers and failed_runs > 0
    live = rig.raw.load(rig.session_id).tasks
    assert live == {}, {t: r.state for t, r in live.items()}
    for task_id in nappers:
        answers = Counter(r.value for r in rig.answers[task_id])
        assert sum(answers.values()) == SENDERS and answers["delivered"] <= 1, answers
        assert set(answers) <= {"delivered", "duplicate", "closed"}, answers
        delivered = rig.delivered.get(task_id, [])
        outcome = rig.task(task_id).state.outcome  # type: ignore[union-attr]
        if outcome.status == "faulted" and takeovers:
            assert outcome.error == RESTART_LIMIT_REACHED, outcome
            rig.count("napper faulted by takeovers")
            if delivered:
                rig.count("napper faulted by takeovers holding an unread value")
            continue
        assert outcome.status == "completed", (task_id, outcome, answers)
        (value,) = outcome.result["values"].values()
        if delivered:
            assert [value] == delivered, (task_id, value, delivered)
        else:  # the sender's answer was lost; its retry was told duplicate or closed
            assert value in rig.maybe.get(task_id, []), (task_id, value, answers)
            rig.count("value stored, answer lost, retry told duplicate or closed")
    paid = Counter(rig.probe.paid)
    for call in pays:
        assert paid[call] <= 1, f"pay ran {paid[call]} times for {call}"
        outcome = rig.task(call).state.outcome  # type: ignore[union-attr]
        if takeovers and outcome.status == "faulted":
            assert outcome.error == RESTART_LIMIT_REACHED, outcome
            rig.count("pay faulted by takeovers")
        elif takeovers and outcome.result.get("code") == "interrupted":
            rig.count("pay interrupted by a takeover (never run twice)")
        else:
            assert outcome.status == "completed", outcome
            assert outcome.result["content"][0]["text"] == "paid", outcome.result
            assert paid[call] == 1
    # Every task ended exactly once: one terminal write each, never written after.
    assert set(rig.ledger.endings) == {*nappers, *pays}
    assert set(rig.ledger.endings.values()) == {1}, rig.ledger.endings
    # Nothing is left to wake for: no alarm is needed (a stale one would fire once, harmlessly).
    if rig.schedule() is not None:
        rig.count("stale schedule left (fires once, finds nothing)")


def report(rig: Rig, title: str, seconds: float) -> None:
    tally = dict(sorted(rig.tally.items()))
    answers = Counter(r.value for results in rig.answers.values() for r in results)
    print(
        f"\n{title} on {rig.cloud.name}: {seconds:.1f}s; {rig.ledger.commits} commits, "
        f"{rig.ledger.conflicts} refused (a racing writer won; it reloaded); signal answers "
        f"{dict(sorted(answers.items()))}; {tally}"
    )
