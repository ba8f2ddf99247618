"""A signal's wake runs only its task (issue 12 goal 6): the targeted worker pass.

The signal route queues a wake naming the task (and its owner); the worker reads the head, the
task and the owner in one read and runs the task on that view (bide.engine.partial,
bide.service.worker). Each test drives the real route (``signals.deliver``) and the real
worker entry point (``worker_batch.handle_worker``, SQS-shaped records) over a store that
counts what it reads, on SQLite and on the DynamoDB store (moto, and DynamoDB Local when it
runs). Every fallback is checked: an end reaching its waiting owner, a deadline (the alarm must
follow the session-wide earliest), an abort-marked owner, several wakes in a batch, a racing
writer mid-pass.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from aws_fixtures import AwsBench, moto_bench, unique
from kit import ANSWER

from bide import ManualClock, RandomIds, SQLiteStore, TaskRecord
from bide.app import App
from bide.aws.sqs import wake_body
from bide.engine.delivery import deliver_signal
from bide.engine.state import Completed, Sleeping, Terminal, Waiting
from bide.engine.store import Doc, SessionSnapshot, Store, StoreWrapper
from bide.engine.tasks import define_task
from bide.service import signals
from bide.service.deps import Deps
from bide.service.worker_batch import handle_worker

START = 1_000_000.0
RUNS: Counter[str] = Counter()  # phase runs by task id


async def loop(task: Any, rt: Any) -> None:
    """Sleep on key k<n>; each wake sleeps on the next key. With ``later`` in the input the
    sleeps after the first wake also end at now + later; with ``until`` every sleep ends
    then (an absolute time), ``until_first`` the first sleep only."""
    RUNS[task.id] += 1
    n = task.checkpoint["n"]
    spec = task.input or {}
    until = spec.get("until")
    if n == 0 and "until_first" in spec:
        until = spec["until_first"]
    if n >= 1 and spec.get("later") is not None:
        until = rt.now() + spec["later"]
    await rt.commit(
        Sleeping(
            checkpoint={"phase": "loop", "n": n + 1}, signals=(ANSWER.key(f"k{n}"),), until=until
        )
    )


Looper = define_task("tp.looper", 1, lambda _: {"phase": "loop", "n": 0}, {"loop": loop})


async def end_on_go(task: Any, rt: Any) -> None:
    if task.wake is None:
        await rt.commit(Sleeping(checkpoint="sleep", signals=(ANSWER.key("go"),)))
    else:
        await rt.commit(Terminal(outcome=Completed(result="went")))


Ender = define_task("tp.ender", 1, lambda _: "sleep", {"sleep": end_on_go})


async def start(task: Any, rt: Any) -> None:
    kind = Looper if (task.input or {}).get("child") == "looper" else Ender
    await rt.commit(
        lambda tx: Waiting(
            checkpoint="done", on=(tx.create_task(kind, None),), policy="all_settled"
        )
    )


async def done(task: Any, rt: Any) -> None:
    await rt.commit(Terminal(outcome=Completed(result="children done")))


Parent = define_task("tp.parent", 1, lambda _: "start", {"start": start, "done": done})
RELAYED: dict[str, Any] = {}  # what each Relay's command answered


async def relay(task: Any, rt: Any) -> None:
    """On "go", abort or signal the task its input names (in its commit), then park again."""
    if task.wake is None:
        await rt.commit(Sleeping(checkpoint="go", signals=(ANSWER.key("go"),)))
        return
    to = task.input["to"]

    def build(tx: Any) -> Sleeping:
        if task.input.get("abort"):
            RELAYED[task.id] = tx.abort(to, "relayed")
        else:
            RELAYED[task.id] = tx.signal(to, ANSWER, "k0", {"text": "relayed"}).value
        return Sleeping(checkpoint="go", signals=(ANSWER.key("never"),))

    await rt.commit(build)


Relay = define_task("tp.relay", 1, lambda _: "go", {"go": relay})
APP = App(tasks=[Looper, Ender, Parent, Relay], signals=[ANSWER])


class Reads(StoreWrapper):
    """Counts the task records read, by how: ``load`` (every live task) or a targeted read."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.loads = 0
        self.targeted = 0
        self.records = 0
        self.before_commit: list[Any] = []  # callables run once, before the next commit

    def load(self, session_id: str) -> SessionSnapshot:
        self.loads += 1
        snapshot = self.inner.load(session_id)
        self.records += len(snapshot.tasks)
        return snapshot

    def tasks_and_docs_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str]
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        self.targeted += 1
        seq, found, docs = self.inner.tasks_and_docs_at_head(session_id, task_ids, keys)
        self.records += len(found)
        return seq, found, docs

    def commit(self, session_id: str, expected_seq: int, *rest: Any, **kw: Any) -> int:
        while self.before_commit:
            self.before_commit.pop(0)()
        return self.inner.commit(session_id, expected_seq, *rest, **kw)

    def reset(self) -> None:
        self.loads = self.targeted = self.records = 0


class Queue:
    """The wake queue: message bodies as SQS would carry them."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def wake(
        self,
        session_id: str,
        reason: str,
        *,
        task: str | None = None,
        owner: str | None = None,
        pages: tuple[int, float] | None = None,
    ) -> None:
        self.bodies.append(wake_body(session_id, reason, task=task, owner=owner, pages=pages))


class Alarms:
    """One alarm per session, and every call made."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.calls: list[tuple[str, float | None]] = []

    def arm(self, session_id: str, at: float) -> bool | None:
        self.calls.append(("arm", at))
        had = session_id in self.at
        self.at[session_id] = at
        return had

    def disarm(self, session_id: str) -> None:
        self.calls.append(("disarm", None))
        self.at.pop(session_id, None)


class Host:
    """The signal route and the worker over one store."""

    def __init__(self, store: Store) -> None:
        self.store = Reads(store)
        self.queue = Queue()
        self.alarms = Alarms()
        self.clock = ManualClock(START)
        self.sid = unique("s")
        self.deps = Deps(
            store=self.store,
            alarms=self.alarms,
            queue=self.queue,
            app=APP,
            clock=self.clock,
            ids=RandomIds(),
        )

    def create(self, kind: Any, input: Any = None) -> str:
        """A top-level task, run until parked by a full worker pass (as a submit would)."""
        from bide import Harness

        async def go() -> str:
            h = Harness(self.store, self.sid, APP.task_kinds(), clock=self.clock)
            await h.open()
            task_id = await h.create_task(kind, input)
            await h.close()
            return task_id

        task_id = asyncio.run(go())
        self.queue.wake(self.sid, "submit")
        self.drain()
        return task_id

    def signal(self, task_id: str, key: str, text: str = "hi") -> str:
        decision = signals.deliver(self.deps, self.sid, task_id, ANSWER.name, key, {"text": text})
        return decision.result.value

    def drain(self, *, batch: bool = False) -> int:
        """Run every queued wake through the worker's entry point; how many ran."""
        ran = 0
        while self.queue.bodies:
            bodies = list(self.queue.bodies) if batch else self.queue.bodies[:1]
            del self.queue.bodies[: len(bodies)]
            records = [
                {
                    "messageId": f"m{ran + i}",
                    "body": body,
                    "attributes": {"MessageGroupId": self.sid, "ApproximateReceiveCount": "1"},
                }
                for i, body in enumerate(bodies)
            ]
            out = asyncio.run(handle_worker(self.deps, {"Records": records}, None))
            assert out == {"batchItemFailures": []}
            ran += len(bodies)
        return ran

    def task(self, task_id: str) -> TaskRecord:
        record = self.store.inner.get_task(self.sid, task_id)
        assert record is not None
        return record

    def n(self, task_id: str) -> int:
        return int(self.task(task_id).state.checkpoint["n"])  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def moto() -> Iterator[AwsBench]:
    with moto_bench() as bench:
        yield bench


@pytest.fixture(params=["sqlite", "dynamodb"])
def host(request: pytest.FixtureRequest) -> Host:
    return make_host(request)


def make_host(request: pytest.FixtureRequest) -> Host:
    """A host on SQLite or on the DynamoDB store (moto), as the fixture's param says."""
    if request.param == "sqlite":
        return Host(SQLiteStore())
    bench: AwsBench = request.getfixturevalue("moto")
    return Host(bench.store())


def parked_loopers(host: Host, n: int, input: Any = None) -> list[str]:
    ids = [host.create(Looper, input) for _ in range(n)]
    assert all(host.task(t).state.status == "sleeping" for t in ids)
    return ids


# --- a signal reads and runs its task alone ---------------------------------------------------


def test_a_signal_runs_only_its_task(host: Host) -> None:
    ids = parked_loopers(host, 12)
    target = ids[5]
    before = {t: host.n(t) for t in ids}
    host.alarms.calls.clear()
    host.store.reset()
    assert host.signal(target, "k0") == "delivered"
    assert json.loads(host.queue.bodies[0])["task"] == target  # the wake names the task
    assert host.drain() == 1
    # One targeted read of the task (the route's own read is the delivery's, not counted
    # here: deliver_signal reads with task_at_head), no load of the twelve.
    assert (host.store.loads, host.store.targeted, host.store.records) == (0, 1, 1)
    assert host.n(target) == before[target] + 1
    assert host.task(target).state.status == "sleeping"
    assert {t: host.n(t) for t in ids if t != target} == {
        t: v for t, v in before.items() if t != target
    }
    assert host.alarms.calls == []  # the alarm is the other tasks': left alone
    # Again: the task's next key.
    host.signal(target, "k1")
    host.drain()
    assert (host.store.loads, host.store.targeted) == (0, 2)
    assert host.n(target) == before[target] + 2


def test_a_wake_without_a_task_is_a_full_pass(host: Host) -> None:
    ids = parked_loopers(host, 3)
    deliver_signal(host.store, host.sid, ids[0], ANSWER, "k0", {"text": "x"}, host.clock)
    host.store.reset()
    host.queue.bodies.append(json.dumps({"session_id": host.sid, "reason": "signal"}))  # old
    host.drain()
    assert (host.store.loads, host.store.targeted, host.store.records) == (1, 0, 3)
    assert host.n(ids[0]) == 2


def test_on_dynamodb_a_signal_run_makes_no_query(moto: AwsBench) -> None:
    host = Host(moto.store())
    ids = parked_loopers(host, 4)
    calls: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    events = moto.ddb.meta.events
    events.register("before-call.dynamodb", count)
    try:
        host.signal(ids[1], "k0")
        calls.clear()  # the worker's requests only
        host.drain()
    finally:
        events.unregister("before-call.dynamodb", count)
    # One TransactGetItems (head, task), the reservation and the park: no Query, no GetItem.
    assert calls == Counter({"TransactGetItems": 1, "TransactWriteItems": 2}), calls
    assert host.n(ids[1]) == 2


# --- what the partial view cannot decide: the whole session, as a full pass ------------------


def test_a_task_that_ends_still_wakes_its_waiting_owner(host: Host) -> None:
    parent = host.create(Parent)
    assert host.task(parent).state.status == "waiting"
    (child,) = host.task(parent).state.on  # type: ignore[union-attr]
    host.store.reset()
    host.signal(child, "go")
    assert json.loads(host.queue.bodies[0])["owner"] == parent  # the owner rides along
    assert host.drain() == 1  # no wake of its own for the owner: this run must reach it
    assert host.task(child).state.status == "terminal"
    assert host.task(parent).state.status == "terminal"
    assert (host.store.targeted, host.store.loads) == (1, 1)  # the end loaded the session


def test_a_new_deadline_arms_the_session_wide_earliest(host: Host) -> None:
    early = host.create(Looper, {"until": START + 100})
    late = host.create(Looper, {"later": 500})
    assert host.alarms.at[host.sid] == START + 100
    host.signal(late, "k0")
    host.drain()
    assert host.task(late).state.deadline == START + 500  # type: ignore[union-attr]
    assert host.alarms.at[host.sid] == START + 100  # the earliest, not the new one
    host.signal(early, "k0")  # early sleeps again until START + 100
    host.drain()
    assert host.alarms.at[host.sid] == START + 100
    # The new deadline is the earliest: armed for it.
    third = host.create(Looper, {"later": 10})
    host.signal(third, "k0")
    host.drain()
    assert host.alarms.at[host.sid] == START + 10


def test_a_deadline_gone_from_the_task_leaves_the_other_tasks_alarm(host: Host) -> None:
    # The task had the earliest deadline when loaded and has none after: the alarm, armed for
    # it, must now be armed for the other task's deadline, not deleted.
    first = host.create(Looper, {"until_first": START + 50})
    other = host.create(Looper, {"until": START + 300})
    assert host.alarms.at[host.sid] == START + 50
    host.signal(first, "k0")
    host.drain()
    assert host.task(first).state.deadline is None  # type: ignore[union-attr]
    assert host.alarms.at[host.sid] == START + 300
    assert host.task(other).state.status == "sleeping"


def test_an_abort_marked_owner_marks_the_task_instead_of_running_it(host: Host) -> None:
    parent = host.create(Parent, {"child": "looper"})
    (child,) = host.task(parent).state.on  # type: ignore[union-attr]
    # The owner's abort mark has not reached the child yet (a cascade larger than one commit
    # leaves it so until the next pass): written as that commit left it.
    seq = host.store.inner.head(host.sid)
    marked = host.task(parent)
    marked = marked.replace(abort_marked=True, abort_reason="stop", rev=marked.rev + 1)
    host.store.inner.commit(host.sid, seq, [marked])
    runs = RUNS[child]
    host.signal(child, "k0")
    host.drain()
    # The child never ran its phase: it was marked and aborted, then its owner.
    assert RUNS[child] == runs
    assert host.task(child).state.outcome.status == "aborted"  # type: ignore[union-attr]
    assert host.task(parent).state.outcome.status == "aborted"  # type: ignore[union-attr]


def test_several_signal_wakes_in_one_batch_each_run_their_task(host: Host) -> None:
    ids = parked_loopers(host, 5)
    host.store.reset()
    host.signal(ids[0], "k0")
    host.signal(ids[3], "k0")
    host.queue.wake(host.sid, "submit")  # another wake in the batch: a full pass
    assert host.drain(batch=True) == 3
    assert host.n(ids[0]) == host.n(ids[3]) == 2
    assert [host.n(t) for t in (ids[1], ids[2], ids[4])] == [1, 1, 1]
    assert (host.store.targeted, host.store.loads) == (2, 1)


def test_a_racing_writer_mid_pass_turns_it_into_a_full_pass(host: Host) -> None:
    a, b = parked_loopers(host, 2)
    host.store.reset()
    host.signal(a, "k0")
    # Just before the worker's first commit, another writer stores a value for b (its own
    # wake is not queued: only a full pass can find it now).
    host.store.before_commit.append(
        lambda: deliver_signal(
            host.store.inner, host.sid, b, ANSWER, "k0", {"text": "race"}, host.clock
        )
    )
    host.drain()
    # The commit conflicted; the reload was of the whole session, so b ran too.
    assert host.n(a) == host.n(b) == 2
    assert (host.store.targeted, host.store.loads) == (1, 1)


def test_a_task_that_aborts_another_by_id_reaches_it(host: Host) -> None:
    victim = host.create(Looper)
    killer = host.create(Relay, {"to": victim, "abort": True})
    host.store.reset()
    host.signal(killer, "go")
    host.drain()
    assert RELAYED[killer] is True  # the victim was found live, though not loaded at first
    assert host.task(victim).state.outcome.status == "aborted"  # type: ignore[union-attr]
    assert host.store.loads == 1


def test_a_task_that_signals_another_runs_it_in_the_same_run(host: Host) -> None:
    other = host.create(Looper)
    sender = host.create(Relay, {"to": other})
    host.signal(sender, "go")
    assert host.drain() == 1  # the relayed value queued no wake: this run ran the other task
    assert RELAYED[sender] == "delivered"
    assert host.n(other) == 2


# --- the message ---------------------------------------------------------------------------


def test_the_wake_message_names_the_task_for_a_signal_only() -> None:
    from bide.aws.sqs import parse_wake, wake_focus, whole_session

    signal = wake_body("s", "signal", task="t-1", owner="t-0")
    assert parse_wake(signal) == ("s", "signal")
    assert wake_focus(signal) == ("t-1", "t-0")
    assert wake_focus(wake_body("s", "signal-retried", task="t-1")) == ("t-1", None)
    # Any other wake, an old message, a malformed task: the whole session.
    for body in (
        wake_body("s", "alarm"),
        json.dumps({"session_id": "s", "reason": "signal"}),
        json.dumps({"session_id": "s", "reason": "signal", "task": 7}),
        json.dumps({"session_id": "s", "reason": "signal", "task": "t-1", "owner": ""}),
        "not json",
    ):
        assert wake_focus(body) is None, body
    assert json.loads(whole_session(signal)) == {"session_id": "s", "reason": "signal"}
    assert whole_session("not json") == "not json"


def test_a_recovery_at_open_that_loads_the_session_recovers_every_abandoned_task() -> None:
    # Two tasks left running, without leases, by a process that died. The targeted open
    # recovers its task first; past the restart limit that ends it, which loads the whole
    # session: the other abandoned task must be recovered at this open too, as a full open
    # recovers every one (a run never recovers a lease-less task after its open).
    from bide import Harness
    from bide.engine.state import Running

    store, sid = SQLiteStore(), "s-recover"

    async def go() -> tuple[TaskRecord | None, TaskRecord | None]:
        h = Harness(store, sid, APP.task_kinds())
        await h.open()
        a, b = await h.create_task(Looper), await h.create_task(Looper)
        dead = [
            r.replace(state=Running(checkpoint=r.state.checkpoint, invocation="i-dead"))  # type: ignore[union-attr]
            for r in (store.get_task(sid, a), store.get_task(sid, b))
            if r is not None
        ]
        store.commit(sid, store.head(sid), dead)
        targeted = Harness(store, sid, APP.task_kinds(), restart_limit=0, focus=(a, None))
        await targeted.open()
        assert not targeted.partial  # the end of a loaded the session
        return store.get_task(sid, a), store.get_task(sid, b)

    a, b = asyncio.run(go())
    assert a is not None and a.state.status == "terminal"
    assert b is not None and b.state.status != "running", b.state
