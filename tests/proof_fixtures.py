"""Shared pieces of the proof suites (``tests/test_proof_*.py``): an AWS fault injector that
kills the process at any client call, a ledger that sees every commit that lands, and a
small "deployment" on moto that plays Lambda's SQS poller and EventBridge Scheduler around
the real services.

The injector wraps boto3 clients: :class:`CrashPlan` numbers every call made through any
client of one deployment (DynamoDB, SQS, Scheduler, S3) and raises :class:`bide.testing.Crash`
at the chosen one, either before the request is sent or after the service applied it (the
answer is lost with the process). ``Crash`` is a ``BaseException``: no ``except Exception``
in the engine, the services or the tools can swallow it.

Import explicitly (``from proof_fixtures import ...``): ``tests/conftest.py`` is owned
elsewhere. Nothing here reaches a non-loopback address; credentials are fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aws_fixtures import LockedClient, aws_client, fake_aws_environment, unique, wake_queue
from handler_fixtures import ROLE_ARN, NoArgs, Probe, make_app

from bide import Harness, ManualClock, RandomIds, TaskRecord
from bide.app import App
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.aws.scheduler import SchedulerAlarms, alarm_minute, at_expression, schedule_name
from bide.aws.sqs import SqsWakeQueue, fired_for, parse_wake, wake_focus
from bide.constants import WORKER_TIMEOUT_SECONDS
from bide.engine.errors import ConflictError
from bide.engine.rules import Wake
from bide.engine.store.base import Doc, Store
from bide.service.deps import Deps
from bide.service.worker import run_session
from bide.testing import Crash
from bide.tools import ToolResult, define_tool

When = Literal["before", "after"]

# --- the fault injector ------------------------------------------------------------------------


class CrashPlan:
    """Numbers every AWS call of one deployment and kills the process at call ``fail_at``
    (1-based), ``before`` the request is sent or ``after`` the service applied it. One death
    per plan: the restarted process runs without faults."""

    def __init__(self, fail_at: int | None = None, when: When = "before") -> None:
        self.fail_at = fail_at
        self.when = when
        self.calls: list[str] = []
        self.fired: str | None = None  # "after #12 dynamodb.transact_write_items"
        self._lock = threading.Lock()

    def call(self, operation: str, send: Callable[[], Any]) -> Any:
        """Make the call ``send`` (named ``operation``), or die around it."""
        with self._lock:
            self.calls.append(operation)
            hit = self.fail_at is not None and len(self.calls) == self.fail_at
            if hit:
                self.fail_at = None
                self.fired = f"{self.when} #{len(self.calls)} {operation}"
        if hit and self.when == "before":
            raise Crash(f"crash {self.fired}")
        try:
            answer = send()
        except Exception:
            if hit:  # the service answered with an error; the process died before reading it
                raise Crash(f"crash {self.fired}") from None
            raise
        if hit:
            raise Crash(f"crash {self.fired}")
        return answer

    def counts(self) -> Counter[str]:
        """How many calls of each operation were made."""
        return Counter(self.calls)


class CrashingClient:
    """A boto3 client whose every operation goes through a :class:`CrashPlan`."""

    def __init__(self, inner: Any, service: str, plan: CrashPlan) -> None:
        self._inner = inner
        self._service = service
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr) or name in ("get_waiter", "get_paginator"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._plan.call(f"{self._service}.{name}", lambda: attr(*args, **kwargs))

        return call


# --- the ledger ----------------------------------------------------------------------------------


class Ledger:
    """Wraps the services' store; records every commit that lands, including one whose
    answer a crash swallowed (``check`` is a fault-free store on the same table, read after
    a crash to tell whether the write landed; the sweeps run one writer at a time).

    Asserts as commits land that no ended task is ever written again; :attr:`endings`
    counts terminal writes per task (a call resolves exactly once: each count is 1)."""

    def __init__(self, inner: Store, check: Store) -> None:
        self.inner = inner
        self.check = check
        self.endings: Counter[str] = Counter()
        self.commits = 0
        self.conflicts = 0  # commits refused because another writer moved the session on
        self._lock = threading.Lock()  # racing threads share one ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, session_id: str) -> Any:
        """Pass through."""
        return self.inner.load(session_id)

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """Pass through."""
        return self.inner.get_task(session_id, task_id)

    def head(self, session_id: str) -> int:
        """Pass through."""
        return self.inner.head(session_id)

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """Pass through."""
        return self.inner.get_doc(session_id, key)

    def list_docs(self, session_id: str, prefix: str, **kw: Any) -> list[Doc]:
        """Pass through."""
        return self.inner.list_docs(session_id, prefix, **kw)

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """Commit through the inner store and record what landed."""
        try:
            seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        except ConflictError:
            with self._lock:
                self.conflicts += 1
            raise
        except Crash:
            if self.check.head(session_id) > expected_seq:
                self._landed(writes)
            raise
        self._landed(writes)
        return seq

    def _landed(self, writes: Sequence[TaskRecord]) -> None:
        with self._lock:
            self.commits += 1
            for record in writes:
                assert self.endings[record.id] == 0, f"{record.id} written after it ended"
                if record.state.status == "terminal":
                    self.endings[record.id] += 1

    def close(self) -> None:
        """Pass through."""
        self.inner.close()


# --- the app ------------------------------------------------------------------------------------


@dataclass
class ProofProbe(Probe):
    """The handler tests' probe, plus the call ids ``pay`` ran for (a list: appending is
    atomic, so racing threads lose no count)."""

    paid: list[str] = field(default_factory=list)


def proof_app(probe: ProofProbe) -> App:
    """The handler tests' app (napper, ``await_hook``, ``fetch_big``, ``charge``, a scripted
    agent) plus, declared replay-safe so a crash inside a run is recovered by running it
    again, ``await_hook_safe`` (the minted URL is memoized: the same one) and
    ``fetch_big_safe``; and ``pay``, replay-unsafe, which records each run."""
    app = make_app(probe)
    registry = app.tools
    assert registry is not None
    for name in ("await_hook", "fetch_big"):
        tool = registry.get(name)
        assert tool is not None
        registry.add(
            define_tool(
                f"{name}_safe", tool.description, tool.parameters, tool.execute, replay="safe"
            )
        )

    async def pay(args: NoArgs, api: Any) -> Any:
        probe.paid.append(api.task_id)
        await asyncio.sleep(0.005)  # real time: racing workers get to run meanwhile
        return ToolResult.of_text("paid")

    registry.add(define_tool("pay", "Pay an invoice (not replay-safe)", NoArgs, pay))
    return app


# --- a deployment on moto ------------------------------------------------------------------------


@dataclass
class Account:
    """A moto account (``mock_aws``) with one bucket and schedule group shared by a module's
    deployments; each deployment gets its own table, queue and session. (A table per run:
    moto deep-copies a whole table for every item of a transaction, so a table that grew
    over hundreds of runs would make each run slower than the last.)"""

    ddb: Any
    s3: Any
    sqs: Any
    scheduler: Any
    bucket: str
    group: str


@contextlib.contextmanager
def moto_account() -> Iterator[Account]:
    """Enter moto (fake credentials, no endpoint override) and make the shared resources."""
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        lock = threading.Lock()  # moto's transactions are not thread-safe (see LockedClient)
        clients = {s: LockedClient(aws_client(s), lock) for s in ("dynamodb", "s3", "sqs")}
        scheduler = LockedClient(aws_client("scheduler"), lock)
        bucket, group = unique("proof-offload"), unique("proof-alarms")
        clients["s3"].create_bucket(Bucket=bucket)
        scheduler.create_schedule_group(Name=group)
        yield Account(clients["dynamodb"], clients["s3"], clients["sqs"], scheduler, bucket, group)


@dataclass
class Deployment:
    """One session's worth of a deployed stack on moto: the real services (worker, signal
    delivery, sessions) on clients that crash as ``plan`` says, and fault-free stand-ins for
    what AWS itself does: Lambda's SQS poller (a batch whose invocation died is delivered
    again, as after its visibility timeout) and EventBridge Scheduler (fires a due schedule
    into the queue, then deletes it)."""

    account: Account
    plan: CrashPlan
    probe: ProofProbe
    clock: ManualClock
    deps: Deps
    ledger: Ledger
    raw: DynamoDBStore  # fault-free, for checks
    queue_url: str
    table: str
    session_id: str
    crashes: list[str] = field(default_factory=list)
    worker_runs: int = 0
    stale_schedules: int = 0

    @classmethod
    def create(
        cls, account: Account, plan: CrashPlan, *, offload_threshold: int | None = None
    ) -> Deployment:
        sqs = account.sqs
        table = unique("proof")
        create_table(account.ddb, table)
        queue_url, queue_arn = wake_queue(sqs)
        crashing = {
            name: CrashingClient(getattr(account, attr), name, plan)
            for name, attr in (
                ("dynamodb", "ddb"),
                ("s3", "s3"),
                ("sqs", "sqs"),
                ("scheduler", "scheduler"),
            )
        }
        fast: dict[str, Any] = {"base_delay": 0.001, "max_delay": 0.01}
        if offload_threshold is not None:
            fast["offload_threshold"] = offload_threshold
        store = DynamoDBStore(
            table,
            crashing["dynamodb"],
            bucket=account.bucket,
            s3_client=crashing["s3"],
            **fast,
        )
        raw = DynamoDBStore(table, account.ddb, bucket=account.bucket, s3_client=account.s3, **fast)
        ledger = Ledger(store, raw)
        probe, clock = ProofProbe(), ManualClock()
        deps = Deps(
            store=ledger,  # type: ignore[arg-type]
            alarms=SchedulerAlarms(
                crashing["scheduler"],
                group=account.group,
                queue_arn=queue_arn,
                role_arn=ROLE_ARN,
            ),
            queue=SqsWakeQueue(crashing["sqs"], queue_url),
            app=proof_app(probe),
            clock=clock,
            ids=RandomIds(),
            webhook_base_url="https://hooks.example.test",
        )
        return cls(account, plan, probe, clock, deps, ledger, raw, queue_url, table, unique("s"))

    def close(self) -> None:
        """Delete the run's table and queue."""
        self.account.sqs.delete_queue(QueueUrl=self.queue_url)
        self.account.ddb.delete_table(TableName=self.table)

    # --- the outside world ----------------------------------------------------------------

    def external(self, action: Callable[[], Any], attempts: int = 10) -> Any:
        """A caller of an API (a person, a CI system sending a webhook): when the function
        dies under it, it gets no answer and sends the same request again."""
        for _ in range(attempts):
            try:
                return action()
            except Crash as crash:
                self.crashes.append(f"api: {crash}")
        raise AssertionError(f"no answer after {attempts} attempts")

    def harness(self, store: Store | None = None) -> Harness:
        return Harness(
            store or self.deps.store,
            self.session_id,
            self.deps.app.task_kinds(),
            clock=self.clock,
            ids=self.deps.ids,
            services=self.deps.harness_services(),
        )

    def start_task(self, kind: Any, input: Any, key: str) -> str:
        """Create a task by key (a retry finds the same task), arming before and after the
        write, as the sessions API does."""

        async def create() -> str:
            harness = self.harness()
            await harness.attach()
            return await harness.create_task(kind, input, key=key)

        def action() -> str:
            self.deps.queue.wake(self.session_id, "submit")
            task_id = asyncio.run(create())
            self.deps.queue.wake(self.session_id, "submitted")
            return task_id

        return str(self.external(action))

    def start_tool(self, name: str, arguments: dict[str, Any]) -> str:
        registry = self.deps.app.tools
        return self.start_task(registry.task, registry.call(name, arguments), key=f"call-{name}")

    # --- Lambda's SQS poller ------------------------------------------------------------------

    def drain(self, max_batches: int = 60) -> None:
        """Hand wake batches to the worker until the queue is empty. A batch whose invocation
        died is not deleted: every message of it is delivered again. Then check that the
        parked session has a path to wake."""
        sqs = self.account.sqs
        for _ in range(max_batches):
            messages = sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=30,
                AttributeNames=["ApproximateReceiveCount"],
            ).get("Messages", [])
            if not messages:
                self.check_path_to_wake()
                return
            try:
                for message in messages:
                    session_id, _ = parse_wake(message["Body"])
                    self.worker_runs += 1
                    # As handle_worker does: an alarm's first delivery names its deadline.
                    receives = message.get("Attributes", {}).get("ApproximateReceiveCount")
                    fired = fired_for(message["Body"]) if receives == "1" else None
                    # And a signal's wake names its task: the run is a targeted pass.
                    focus = wake_focus(message["Body"])
                    # (Its reservation held until the task's first commit on a first delivery.)
                    first = dict(focus=focus, hold_reservation=receives == "1")
                    asyncio.run(run_session(self.deps, session_id, fired_for=fired, **first))
            except Crash as crash:
                self.crashes.append(f"worker: {crash}")
                # The batch comes back after the queue's visibility timeout (6 x the worker's
                # timeout), when the dead worker's lease on its tasks has long expired.
                self.advance(REDELIVERY_SECONDS)
                for message in messages:
                    sqs.change_message_visibility(
                        QueueUrl=self.queue_url,
                        ReceiptHandle=message["ReceiptHandle"],
                        VisibilityTimeout=0,
                    )
                continue
            for message in messages:
                sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        raise AssertionError(f"the queue did not drain in {max_batches} batches")

    # --- EventBridge Scheduler ----------------------------------------------------------------

    def schedule(self) -> dict[str, Any] | None:
        """The session's schedule (at most one exists by name), or None."""
        scheduler = self.account.scheduler
        name = schedule_name(self.session_id)
        listed = scheduler.list_schedules(GroupName=self.account.group, NamePrefix=name)
        if not listed["Schedules"]:
            return None
        found: dict[str, Any] = scheduler.get_schedule(Name=name, GroupName=self.account.group)
        return found

    def advance(self, seconds: float) -> None:
        """Time passes; a due schedule fires (its target Input into the queue, with the
        session as message group) and deletes itself."""
        self.clock.advance(seconds)
        found = self.schedule()
        if found is None:
            return
        target = found["Target"]
        if json.loads(target["Input"])["at"] > self.clock.now():
            return
        self.account.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=target["Input"],
            MessageGroupId=target["SqsParameters"]["MessageGroupId"],
            MessageDeduplicationId=unique("fire"),
        )
        self.account.scheduler.delete_schedule(Name=found["Name"], GroupName=self.account.group)

    # --- invariants -------------------------------------------------------------------------

    def wake(self, at: float | None = None) -> Wake:
        """The session's ``wake()`` as the store holds it (read fault-free), at ``at`` or now."""

        async def read() -> Wake:
            harness = self.harness(self.raw)
            if at is not None:
                harness.clock = ManualClock(at)
            await harness.attach()
            return harness.wake()

        return asyncio.run(read())

    def check_path_to_wake(self) -> None:
        """With no wake queued, every live task is parked and can be woken: a timed park has
        its schedule at ``wake().at`` (expression: the first whole minute at or after it); a
        park on signals alone needs none. (A worker that died
        before disarming may leave a schedule nothing needs: it fires once, finds nothing to
        do and deletes itself; :meth:`fire_stale_schedule` shows that.)"""
        wake = self.wake()
        live = self.raw.load(self.session_id).tasks
        stuck = {t: r.state.status for t, r in live.items() if r.state.status not in PARKED}
        assert not stuck, f"no wake queued, yet {stuck} (crashes: {self.crashes})"
        if wake.active and wake.at is not None and wake.at <= self.clock.now():
            # A deadline passed and Scheduler has not fired yet (it fires within the minute
            # after, at least once): only that may be due. Just before it, nothing may be.
            wake = self.wake(at=wake.at - 0.001)
        assert not wake.active, f"runnable work and no wake queued (crashes: {self.crashes})"
        if wake.at is not None:
            found = self.schedule()
            assert found is not None, f"parked until {wake.at}, no schedule ({self.crashes})"
            assert json.loads(found["Target"]["Input"])["at"] == wake.at, self.crashes
            # Scheduler fires within the minute named: the first whole minute at or after.
            assert found["ScheduleExpression"] == at_expression(wake.at), self.crashes
            assert alarm_minute(wake.at) >= wake.at, self.crashes

    def fire_stale_schedule(self) -> bool:
        """Let a schedule left by a worker that died before disarming fire (time passes to
        it) and the worker run it. True if there was one."""
        found = self.schedule()
        if found is None:
            return False
        at = json.loads(found["Target"]["Input"])["at"]
        self.advance(max(0.0, at - self.clock.now()))
        self.drain()
        return True

    def task(self, task_id: str) -> TaskRecord:
        record = self.raw.get_task(self.session_id, task_id)
        assert record is not None, f"task {task_id} lost"
        return record


PARKED = ("sleeping", "waiting")
# When SQS hands a dead invocation's batch out again: the wake queue's visibility timeout.
REDELIVERY_SECONDS = 6 * WORKER_TIMEOUT_SECONDS
