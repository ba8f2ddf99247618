"""The fleet the twin proof (``tests/test_proof_twin.py``) runs: many session scripts
(``twin_proof_kit``) started on one strict AWS twin, driven through the real worker and signal
delivery, with every fault the twin injects or the outside world causes drawn from one seeded
RNG; and a :class:`Fleet` record of what happened, for the proof to judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aws_fixtures import aws_client, fake_aws_environment, unique
from handler_fixtures import REPLY
from twin_fixtures import STACK_CONFIG
from twin_proof_kit import (
    HOUR,
    MINUTE,
    SCRIPT,
    TOOL_KIND,
    Script,
    ScriptProbe,
    make_script,
    script_app,
)

from bide import Completed, Harness, SignalResult, Terminal
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.aws.sqs import SqsDeadLetters, parse_dead_letter
from bide.engine.store import StoreWrapper
from bide.engine.store.base import Store
from bide.service.signals import deliver
from bide.testing.aws import AwsTwin, TwinConfig
from bide.testing.aws.stack import SCHEDULE_GROUP

#: The DynamoDB twin's fault rates when a run has store faults.
THROTTLE_RATE = 0.03
CONFLICT_RATE = 0.03


class TakeoverWatch(StoreWrapper):
    """The store, noting when a ``pay`` call's tool task was first written with a restart
    counted: the moment a worker took over the task a killed invocation left running."""

    def __init__(self, inner: Store, clock: Any) -> None:
        super().__init__(inner)
        self.clock = clock
        self.takeovers: dict[tuple[str, int], float] = {}  # (session, step) -> when

    def commit(
        self, session_id: str, expected_seq: int, writes: Any, docs: Any = (), *, absent: Any = ()
    ) -> int:
        """Commit; then note the tool tasks written with a restart."""
        seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        for record in writes:
            if record.kind == TOOL_KIND and record.restarts > 0:
                step = record.input["arguments"]["step"]
                self.takeovers.setdefault((session_id, step), self.clock.now())
        return seq


class PoisonStore:
    """The store, except that every load of one session fails (a poison session: its worker
    always fails)."""

    def __init__(self, inner: Store, poisoned: str) -> None:
        self.inner = inner
        self.poisoned = poisoned
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, session_id: str) -> Any:
        """Fail for the poisoned session."""
        if session_id == self.poisoned:
            self.refused += 1
            raise RuntimeError(f"poisoned session {session_id}")
        return self.inner.load(session_id)

    def tasks_at_head(self, session_id: str, task_ids: Any, keys: Any = ()) -> Any:
        """Fail for the poisoned session: a worker's targeted pass reads this, not a load."""
        if session_id == self.poisoned:
            self.refused += 1
            raise RuntimeError(f"poisoned session {session_id}")
        return self.inner.tasks_at_head(session_id, task_ids, keys)


@dataclass
class Fleet:
    """One run: its scripts, what happened and the faults injected by kind."""

    scripts: list[Script]
    task_ids: dict[str, str] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    results: Counter[str] = field(default_factory=Counter)  # signal results by send kind
    started: dict[str, float] = field(default_factory=dict)
    hours: float = 0.0
    invocations: int = 0
    failed_wakes: Counter[str] = field(default_factory=Counter)  # session -> wakes failed
    batches: list[list[str]] = field(default_factory=list)  # the sessions of each batch
    outcomes: Counter[str] = field(default_factory=Counter)
    logs: dict[str, Any] = field(default_factory=dict)
    live: dict[str, list[str]] = field(default_factory=dict)
    leftover_wakes: list[str] = field(default_factory=list)
    dead_letters: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    schedules_left: list[str] = field(default_factory=list)
    scheduler_dead: int = 0
    probe: ScriptProbe = field(default_factory=ScriptProbe)
    takeovers: dict[tuple[str, int], float] = field(default_factory=dict)  # of pay calls
    lease: float | None = None  # the worker's lease (Deps.lease_seconds)
    wall: float = 0.0


def run_fleet(
    seed: int,
    sessions: int,
    *,
    poison: str | None = None,
    store_faults: bool = True,
    config: TwinConfig = STACK_CONFIG,
    slow_every: int = 3,
    extras: tuple[Script, ...] = (),
) -> Fleet:
    """Run ``sessions`` scripts plus the fixed ``extras`` (and the ``poison`` session, if
    named) on one twin of ``config``; with ``store_faults``, DynamoDB throttles and conflicts
    at the module's rates."""
    from moto import mock_aws

    wall = time.perf_counter()
    with fake_aws_environment(), mock_aws():
        twin = AwsTwin(config, seed=seed, duplicate_rate=0.3)
        rng = twin.rng
        scripts = [
            make_script(rng, f"s-{n:03d}", slow=n % slow_every == 0) for n in range(sessions)
        ] + list(extras)
        fleet = Fleet(scripts)
        raw_client = aws_client("dynamodb")
        table = unique("proof-twin")
        create_table(raw_client, table)
        rates = (THROTTLE_RATE, CONFLICT_RATE) if store_faults else (0.0, 0.0)
        ddb = twin.dynamodb(raw_client, throttle_rate=rates[0], conflict_rate=rates[1])
        # The store jitters its retry backoff; a seeded RNG makes a run reproducible (the
        # backoff moves simulated time).
        store: Any = DynamoDBStore(
            table, client=ddb, sleep=twin.clock.advance, retry_rng=random.Random(seed)
        )
        raw = DynamoDBStore(table, client=raw_client)  # fault-free, for the checks
        watch = store = TakeoverWatch(store, twin.clock)
        if poison is not None:
            store = PoisonStore(store, poison)
        fleet.probe.clock = twin.clock
        app = script_app(fleet.probe)
        max_receives = STACK_CONFIG.queue.max_receive_count
        deps = twin.deps(
            store,
            app,
            dead_letters=SqsDeadLetters(twin.sqs, twin.dead_letter_url),
            max_receive_count=max_receives,
        )
        fleet.lease = deps.lease_seconds
        worker = twin.worker(deps)
        handler = worker.handler

        async def observed(event: dict[str, Any], context: Any) -> Any:
            """The real handler; records the session of every wake it reported failed."""
            answer = await handler(event, context)
            groups = {r["messageId"]: r["attributes"]["MessageGroupId"] for r in event["Records"]}
            fleet.batches.append(sorted(set(groups.values())))
            for item in answer.get("batchItemFailures", []):
                fleet.failed_wakes[groups[item["itemIdentifier"]]] += 1
            return answer

        worker.handler = observed
        clock = twin.clock

        async def external(action: Any) -> Any:
            """A caller that retries after an error answer (a throttle or conflict the
            store's own retries did not absorb), as an API client would."""
            for _ in range(20):
                try:
                    return action()
                except Exception:
                    fleet.faults["caller retries"] += 1
                    await clock.sleep(1.0)
            raise AssertionError("an outside call failed 20 times")

        async def start(script: Script, at: float) -> None:
            await clock.sleep(at)
            kind = next(k for k in app.tasks if k.name == SCRIPT)

            async def create() -> str:
                harness = Harness(
                    raw, script.session_id, app.task_kinds(), clock=clock, ids=deps.ids
                )
                await harness.attach()
                task_id = await harness.create_task(kind, {"steps": script.steps}, key="script")
                await harness.close()
                return task_id

            fleet.started[script.session_id] = clock.now()
            fleet.task_ids[script.session_id] = await create()
            await external(lambda: deps.queue.wake(script.session_id, "submit"))
            await send_all(script)

        async def send_all(script: Script) -> None:
            sid, task_id = script.session_id, fleet.task_ids[script.session_id]
            begun = fleet.started[sid]
            for send in sorted(script.sends, key=lambda s: s.offset):
                if send.kind == "late":
                    continue  # after the session ended (below)
                await clock.sleep(max(0.0, begun + send.offset - clock.now()))
                decision = await external(
                    lambda s=send: deliver(deps, sid, task_id, REPLY.name, s.key, {"text": s.text})
                )
                fleet.results[f"{send.kind}:{decision.result.value}"] += 1
                if send.kind == "first":
                    assert decision.result is SignalResult.DELIVERED, (sid, send, decision)
                    fleet.probe.delivered_at[(sid, send.key)] = clock.now()
                    fleet.faults["signals (random order and time)"] += 1
                else:
                    assert decision.result in (SignalResult.DUPLICATE, SignalResult.CLOSED)
                    fleet.faults[f"signal {send.kind}s"] += 1

        async def wake_faults(until: float) -> None:
            """Duplicate wakes, re-sent wakes and spurious early alarms, at random."""
            while clock.now() < until:
                await clock.sleep(rng.uniform(30, 10 * MINUTE))
                sid = rng.choice(scripts).session_id
                if sid not in fleet.task_ids:
                    continue
                kind = rng.choice(["duplicate wake", "re-sent wake", "early alarm"])
                body = json.dumps({"session_id": sid, "reason": "still-active"})
                if kind == "early alarm":
                    fake = {"session_id": sid, "reason": "alarm", "at": clock.now() + HOUR}
                    body = json.dumps({**fake, "arming": f"spurious-{rng.getrandbits(32)}"})
                dedup = f"d-{rng.getrandbits(64):016x}"
                twin.sqs.send_message(
                    QueueUrl=twin.queue_url,
                    MessageBody=body,
                    MessageGroupId=sid,
                    MessageDeduplicationId=dedup,
                )
                again = dedup if kind == "duplicate wake" else f"d-{rng.getrandbits(64):016x}"
                if kind != "early alarm":
                    twin.sqs.send_message(
                        QueueUrl=twin.queue_url,
                        MessageBody=body,
                        MessageGroupId=sid,
                        MessageDeduplicationId=again,
                    )
                fleet.faults[kind + "s"] += 1

        async def poke(sid: str, until: float) -> None:
            """A client that keeps waking the poison session (every wake fails) and, in the
            same instant, another session: both wakes reach the worker in one batch, the
            other one after the poison's."""
            while clock.now() < until:
                await clock.sleep(rng.uniform(60, 10 * MINUTE))
                deps.queue.wake(sid, "submit")
                fleet.faults["poison wakes"] += 1
                other = rng.choice(scripts).session_id
                if other in fleet.task_ids:
                    deps.queue.wake(other, "submit")

        def ended(sid: str) -> bool:
            record = raw.get_task(sid, fleet.task_ids[sid]) if sid in fleet.task_ids else None
            return record is not None and isinstance(record.state, Terminal)

        async def scenario() -> None:
            worker.start()
            begin = clock.now()
            loop = asyncio.get_running_loop()
            # The outside world: one starter-and-sender per session, one wake fault injector.
            world = [loop.create_task(start(s, rng.uniform(0, 30 * MINUTE))) for s in scripts]
            if poison is not None:
                world.append(loop.create_task(start(Script(poison, [{"op": "effect"}], [], {}), 0)))
                world.append(loop.create_task(poke(poison, begin + 3 * HOUR)))
            injector = loop.create_task(wake_faults(begin + 12 * HOUR))
            cap = begin + 40 * HOUR
            await clock.sleep(31 * MINUTE)
            while clock.now() < cap and not all(ended(s.session_id) for s in scripts):
                await clock.sleep(10 * MINUTE)
            injector.cancel()
            for done in world:  # a sender's failed check must fail the test, not vanish
                assert done.done(), "a sender never finished"
                done.result()
            for script in scripts:  # late values: the session ended, refused and never read
                for send in (s for s in script.sends if s.kind == "late"):
                    decision = await external(
                        lambda s=send, sid=script.session_id: deliver(
                            deps, sid, fleet.task_ids[sid], REPLY.name, s.key, {"text": s.text}
                        )
                    )
                    fleet.results[f"late:{decision.result.value}"] += 1
                    fleet.faults["signals after the end"] += 1
            await clock.sleep(30 * MINUTE)  # the wakes of those, stale alarms: let them run
            fleet.hours = (clock.now() - begin) / HOUR

        # The worker writes its EMF metrics to stdout (one blob per wake); hours of them
        # would bury the summary under ``pytest -s``.
        with contextlib.redirect_stdout(io.StringIO()):
            clock.run(scenario())
        fleet.invocations = len(worker.invocations)
        fleet.outcomes = Counter(r.outcome for r in worker.invocations)
        for script in scripts:
            sid = script.session_id
            record = raw.get_task(sid, fleet.task_ids[sid])
            assert record is not None
            state = record.state
            fleet.logs[sid] = state
            if isinstance(state, Terminal):  # a completed script's result holds its log
                done = state.outcome
                fleet.logs[sid] = done.result if isinstance(done, Completed) else done.to_dict()
            fleet.live[sid] = sorted(raw.load(sid).tasks)
        fleet.leftover_wakes = twin.sqs.bodies(twin.queue_url)
        fleet.dead_letters = [parse_dead_letter(b) for b in twin.sqs.bodies(twin.dead_letter_url)]
        fleet.schedules_left = twin.scheduler.schedule_names(SCHEDULE_GROUP)
        fleet.scheduler_dead = len(twin.scheduler.dead_letters)
        fires = twin.scheduler.invocations
        fleet.faults["alarm fires (anywhere in the minute)"] = sum(not f.duplicate for f in fires)
        fleet.faults["alarm fired twice"] = sum(f.duplicate for f in fires)
        for code, n in ddb.injected.items():
            fleet.faults[code] += n
        fleet.faults["phases cut mid-call"] = fleet.probe.cut
        fleet.faults["pays cut in flight"] = len(fleet.probe.pay_cut)
        fleet.takeovers = watch.takeovers
    fleet.wall = time.perf_counter() - wall
    return fleet
