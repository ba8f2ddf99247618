"""What the targeted-pass tests share (``test_targeted_pass``, ``test_targeted_first_run``):
the task kinds and app they run, a store wrapper that counts the task records read and how, the
wake queue and alarms as the worker sees them, a ``Host`` driving the real signal route and
worker entry point over one store, and the fixtures that give a test a host on SQLite and on
the DynamoDB store (moto)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from aws_fixtures import AwsBench, moto_bench, unique
from kit import ANSWER

from bide import ManualClock, RandomIds, SQLiteStore, TaskRecord
from bide.app import App
from bide.aws.sqs import wake_body
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

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        self.targeted += 1
        seq, found, docs = self.inner.tasks_at_head(session_id, task_ids, keys)
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


def host_fixtures() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The fixtures ``moto`` (one moto DynamoDB bench per module) and ``host`` (each test
    that takes it runs twice: a Host on SQLite, then one on the DynamoDB store over ``moto``),
    for a test module to bind under those names: ``moto, host = host_fixtures()``. pytest
    finds fixtures among a module's names; imported instead, each test's parameter would
    shadow an unused import in the linter's eyes."""

    @pytest.fixture(scope="module")
    def moto() -> Iterator[AwsBench]:
        with moto_bench() as bench:
            yield bench

    @pytest.fixture(params=["sqlite", "dynamodb"])
    def host(request: pytest.FixtureRequest) -> Host:
        if request.param == "sqlite":
            return Host(SQLiteStore())
        bench: AwsBench = request.getfixturevalue("moto")
        return Host(bench.store())

    return moto, host
