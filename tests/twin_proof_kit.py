"""The pieces of the twin proof (``tests/test_proof_twin.py``): a session script app, seeded
session scripts, the fault-free SQLite reference run of a script, and a probe that sees every
phase run (wake latencies, replay-unsafe effects, phases cut at the invocation deadline).

A session runs one ``proof.script`` task through a list of steps:

* ``sleep``: a timed sleep (seconds under the Scheduler's precision, minutes or hours);
* ``wait``: a sleep on one signal key with a deadline; reads the value or ``expired``;
* ``child``: a child task that sleeps and returns a value; the script waits for it;
* ``effect``: a child tool call of ``pay`` (replay-unsafe: default policy), counted per step;
  with ``secs``, ``pay`` then awaits the payment service's answer that long (a cut there
  leaves a payment made and its call cut off: it must end ``interrupted``, never pay twice);
* ``slow``: a phase that awaits a long simulated call before it commits (cut when the
  invocation's time runs out, rerun in the next invocation).

Each step appends what it saw to a log the task ends with; the reference run on SQLite (no
faults, the same app) must end with the same log, and ``pay`` ran exactly once per effect.

Two fixed sessions make the rare paths certain: :func:`pay_cut_script` (a ``pay`` that outlasts
any invocation, so every run of it is cut in flight) and :func:`doomed_script` (a phase that
outlasts any invocation: killed at every timeout, it reaches the restart limit).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from handler_fixtures import REPLY
from pydantic import BaseModel

from bide import (
    Completed,
    Harness,
    Pending,
    SignalExpired,
    SignalValue,
    Sleeping,
    SQLiteStore,
    Terminal,
    Waiting,
    define_task,
    deliver_signal,
)
from bide.app import App
from bide.engine.clock import Clock
from bide.engine.ids import IdSource
from bide.testing.aws import SimClock
from bide.tools import ToolRegistry, ToolResult, define_tool

MINUTE = 60.0
HOUR = 3600.0

# --- the probe ------------------------------------------------------------------------------


@dataclass
class ScriptProbe:
    """What the app's phases report. ``clock`` is the time source of the run."""

    clock: Clock | None = None
    paid: Counter[tuple[str, int]] = field(default_factory=Counter)  # (session, step) -> runs
    pay_started: dict[tuple[str, int], float] = field(default_factory=dict)  # last start
    pay_cut: set[tuple[str, int]] = field(default_factory=set)  # pays cut while in flight
    cut: int = 0  # slow phases cancelled mid-call (the invocation's deadline)
    cuts: Counter[str] = field(default_factory=Counter)  # session -> its slow phases cut
    cut_at: dict[str, float] = field(default_factory=dict)  # session -> when, until rerun
    slow_done: int = 0
    latencies: list[tuple[str, str, float]] = field(default_factory=list)  # session, why, s
    delivered_at: dict[tuple[str, str], float] = field(default_factory=dict)

    def now(self) -> float:
        assert self.clock is not None
        return self.clock.now()


# --- the app --------------------------------------------------------------------------------


def _park(rt: Any, task: Any, i: int, log: list[Any], kinds: tuple[Any, Any]) -> Any:
    """The commit that starts step ``i`` (or ends the task after the last); ``kinds``: the
    child task kind and the tool task kind."""
    steps = task.input["steps"]
    if i == len(steps):
        return Terminal(outcome=Completed(result={"log": log}))
    step = steps[i]
    op = step["op"]
    base = {"phase": "woke", "i": i, "log": log, "since": rt.now()}
    if op == "sleep":
        until = rt.now() + step["after"]
        return Sleeping(checkpoint={**base, "until": until}, until=until)
    if op == "wait":
        until = rt.now() + step["after"]
        return Sleeping(
            checkpoint={**base, "until": until}, signals=(REPLY.key(step["key"]),), until=until
        )
    if op == "slow":
        return Pending(checkpoint={**base, "phase": "slow"})
    if op in ("child", "effect"):

        def build(tx: Any) -> Any:
            if op == "child":
                child = tx.create_task(kinds[0], {"after": step["after"], "value": i}, key=str(i))
            else:
                arguments = {"step": i, "secs": step.get("secs", 0.0)}
                call = {"name": "pay", "arguments": arguments, "call_id": None}
                child = tx.create_task(kinds[1], call, key=str(i))
            return Waiting(checkpoint={**base, "child": child}, on=(child,))

        return build
    raise ValueError(f"step {i}: unknown op {op!r}")


def script_app(probe: ScriptProbe) -> App:
    """The app of the twin proof: ``proof.script``, ``proof.child`` and the ``pay`` tool."""

    async def child_start(task: Any, rt: Any) -> None:
        until = rt.now() + task.input["after"]
        await rt.commit(Sleeping(checkpoint={"phase": "done"}, until=until))

    async def child_done(task: Any, rt: Any) -> None:
        await rt.commit(Terminal(outcome=Completed(result={"child": task.input["value"]})))

    child = define_task(
        "proof.child", 1, lambda _: "start", {"start": child_start, "done": child_done}
    )

    async def pay(args: PayArgs, api: Any) -> Any:
        # Replay-unsafe (the default policy): a run cut off after its intent was stored ends
        # the call ``interrupted`` instead of paying again. The payment is made first, then
        # its answer awaited: a cut in between is the case a rerun would pay twice.
        key = (api.session_id, args.step)
        probe.paid[key] += 1
        probe.pay_started[key] = api.now()
        if args.secs:
            try:
                await asyncio.sleep(args.secs)  # the payment service's answer, simulated time
            except asyncio.CancelledError:
                probe.pay_cut.add(key)
                raise
        return ToolResult.of_text("paid")

    registry = ToolRegistry([define_tool("pay", "Pay an invoice (not replay-safe)", PayArgs, pay)])
    kinds = (child, registry.task)

    async def start(task: Any, rt: Any) -> None:
        await rt.commit(_park(rt, task, 0, [], kinds))

    async def slow(task: Any, rt: Any) -> None:
        cp = task.checkpoint
        step = task.input["steps"][cp["i"]]
        cut_at = probe.cut_at.pop(rt.session_id, None)
        if cut_at is not None:  # rerun after a cut: the re-queued session ran again in time
            probe.latencies.append((rt.session_id, "rerun after a cut", rt.now() - cut_at))
        try:
            await asyncio.sleep(step["secs"])  # a long call, in the run's (simulated) time
        except asyncio.CancelledError:
            probe.cut += 1
            probe.cuts[rt.session_id] += 1
            probe.cut_at[rt.session_id] = rt.now()
            raise
        probe.slow_done += 1
        await rt.commit(_park(rt, task, cp["i"] + 1, [*cp["log"], ["slow", step["secs"]]], kinds))

    async def woke(task: Any, rt: Any) -> None:
        cp = task.checkpoint
        i, log = cp["i"], list(cp["log"])
        step = task.input["steps"][i]
        op = step["op"]
        now = rt.now()
        if op == "sleep":
            probe.latencies.append((rt.session_id, "time", now - cp["until"]))
            log.append(["sleep", step["after"], task.wake.reason if task.wake else None])
        elif op == "wait":
            state = await rt.read_signal(REPLY, step["key"])
            if isinstance(state, SignalValue):
                landed = probe.delivered_at.get((rt.session_id, step["key"]), cp["since"])
                probe.latencies.append((rt.session_id, "signal", now - max(landed, cp["since"])))
                log.append(["wait", step["key"], state.value.text])
            else:
                probe.latencies.append((rt.session_id, "expiry", now - cp["until"]))
                log.append(["wait", step["key"], "expired" if state == SignalExpired() else None])
        else:
            outcome = await rt.outcome(cp["child"])
            shown = outcome.to_dict() if outcome is not None else None
            if shown is not None and op == "effect":
                shown = {"status": shown["status"], "result": _effect_text(shown)}
            log.append([op, shown])
        await rt.commit(_park(rt, task, i + 1, log, kinds))

    script = define_task(
        "proof.script", 1, lambda _: "start", {"start": start, "slow": slow, "woke": woke}
    )

    return App(tasks=[script, child], signals=[REPLY], tools=registry)


SCRIPT = "proof.script"
TOOL_KIND = "bide.tool"


class PayArgs(BaseModel):
    """``pay``'s arguments: the script step it pays for, and how long its answer takes."""

    step: int
    secs: float = 0.0


def _effect_text(shown: dict[str, Any]) -> Any:
    result = shown.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        return [[c.get("text") for c in result["content"]], result.get("code")]
    return result


# --- scripts --------------------------------------------------------------------------------


@dataclass
class Send:
    """One delivery an external sender makes: ``offset`` seconds after the session started."""

    key: str
    text: str
    offset: float
    kind: str  # "first" | "duplicate" | "resend" | "late"


@dataclass
class Script:
    """One session: its steps and the signal deliveries around them."""

    session_id: str
    steps: list[dict[str, Any]]
    sends: list[Send]
    values: dict[str, str]  # key -> the value the reference reads (first delivered)
    doomed: bool = False  # ends faulted at the restart limit by design (no reference run)

    @property
    def effects(self) -> int:
        return sum(1 for s in self.steps if s["op"] == "effect")


def make_script(rng: random.Random, session_id: str, *, slow: bool) -> Script:
    """A seeded mix of steps; deliveries whose outcome does not depend on timing jitter:
    a first value always lands before its wait's earliest possible deadline (the sum of the
    steps before, a lower bound), so every run reads it; duplicates come after it; a
    ``late`` value is sent only after the session ended (refused ``closed``, never read)."""
    steps: list[dict[str, Any]] = []
    sends: list[Send] = []
    values: dict[str, str] = {}
    elapsed = 0.0  # lower bound of the time before the step starts
    count = rng.randint(4, 7)
    ops = ["sleep", "wait", "child", "effect", "short"] + (["slow"] if slow else [])
    for i in range(count):
        op = rng.choice(ops)
        if op == "short":  # under the Scheduler's precision: waited for in-process
            after = float(rng.randint(1, 50))
            steps.append({"op": rng.choice(["sleep", "wait"]), "after": after, "key": f"k{i}"})
        elif op == "sleep":
            after = rng.choice([rng.uniform(60, 20 * MINUTE), rng.uniform(HOUR, 4 * HOUR)])
            steps.append({"op": "sleep", "after": round(after, 3)})
        elif op == "wait":
            after = rng.choice([rng.uniform(5 * MINUTE, HOUR), rng.uniform(HOUR, 3 * HOUR)])
            steps.append({"op": "wait", "key": f"k{i}", "after": round(after, 3)})
        elif op == "child":
            steps.append({"op": "child", "after": rng.choice([5.0, 90.0, 20 * MINUTE])})
        elif op == "effect":
            # In a slow session, pay's answer may take long enough to be cut.
            secs = float(rng.randint(100, 270)) if slow and rng.random() < 0.5 else 0.0
            steps.append({"op": "effect", "secs": secs})
        else:
            steps.append({"op": "slow", "secs": float(rng.randint(150, 270))})
        step = steps[-1]
        if step["op"] == "wait":
            key = step["key"]
            deadline_floor = elapsed + step["after"]
            fate = rng.random()
            if fate < 0.7 and deadline_floor > 2:
                first = rng.uniform(0, deadline_floor - 1)
                values[key] = f"v-{session_id}-{key}"
                sends.append(Send(key, values[key], first, "first"))
                if rng.random() < 0.3:  # a second value: refused duplicate, first kept
                    sends.append(
                        Send(key, f"other-{key}", first + rng.uniform(0.5, 600), "duplicate")
                    )
                if rng.random() < 0.3:  # the same value again (a sender that lost the answer)
                    sends.append(Send(key, values[key], first + rng.uniform(0.1, 30), "resend"))
            elif rng.random() < 0.5:
                sends.append(Send(key, f"late-{key}", -1.0, "late"))
        # A sleep, or a wait that gets no value, lasts at least its ``after``; a wait woken by
        # its value may end at once (so it adds nothing to the lower bound).
        if step["op"] == "sleep" or (step["op"] == "wait" and step["key"] not in values):
            elapsed += float(step["after"])
    return Script(session_id, steps, sends, values)


# Longer than any invocation (the worker's function timeout is 300 s): never finishes in one.
OUTLASTS_AN_INVOCATION = 400.0


def pay_cut_script(session_id: str) -> Script:
    """A ``pay`` whose answer outlasts any invocation, then a sleep: every run of ``pay`` is
    cut in flight (a kill at the timeout, or the worker's clean stop before it), so the call
    must end ``interrupted`` with one payment made, and the session go on."""
    steps = [{"op": "effect", "secs": OUTLASTS_AN_INVOCATION}, {"op": "sleep", "after": 120.0}]
    return Script(session_id, steps, [], {})


def doomed_script(session_id: str) -> Script:
    """A phase that outlasts any invocation: where invocations are killed at their timeout,
    every run of it dies and is recovered (a restart), until the restart limit faults the
    task. Only for runs that kill (a clean stop counts no restart: it would run forever)."""
    return Script(session_id, [{"op": "slow", "secs": OUTLASTS_AN_INVOCATION}], [], {}, True)


def is_interrupted(entry: list[Any]) -> bool:
    """Whether a log entry is an ``effect`` whose ``pay`` call ended ``interrupted``."""
    if entry[0] != "effect" or not isinstance(entry[1], dict):
        return False
    result = entry[1].get("result")
    return isinstance(result, list) and result[1] == "interrupted"


def expected_log(script: Script) -> list[Any]:
    """What the log must be, derived from the script alone (no engine)."""
    log: list[Any] = []
    for i, step in enumerate(script.steps):
        op = step["op"]
        if op == "sleep":
            log.append(["sleep", step["after"], "time"])
        elif op == "wait":
            log.append(["wait", step["key"], script.values.get(step["key"], "expired")])
        elif op == "child":
            log.append(["child", {"status": "completed", "result": {"child": i}}])
        elif op == "effect":
            log.append(["effect", {"status": "completed", "result": [["paid"], None]}])
        else:
            log.append(["slow", step["secs"]])
    return log


# --- the reference run ----------------------------------------------------------------------


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n:08d}"


def reference_run(script: Script) -> tuple[list[Any], Counter[tuple[str, int]]]:
    """Run ``script`` fault-free on SQLite in simulated time: every first value delivered at
    the start (early values are kept), duplicates after; then alarm after alarm on time.
    The final log and the probe's ``pay`` counts."""
    clock = SimClock()
    probe = ScriptProbe(clock=clock)
    app = script_app(probe)
    store = SQLiteStore()
    ids: IdSource = _Ids()

    async def go() -> list[Any]:
        harness = Harness(store, script.session_id, app.task_kinds(), clock=clock, ids=ids)
        await harness.open()
        kind = next(k for k in app.tasks if k.name == SCRIPT)
        task_id = await harness.create_task(kind, {"steps": script.steps})
        await harness.close()
        for send in sorted(script.sends, key=lambda s: s.offset):
            if send.kind != "late":
                deliver_signal(
                    store, script.session_id, task_id, REPLY, send.key, {"text": send.text}, clock
                )
        for _ in range(200):
            harness = Harness(store, script.session_id, app.task_kinds(), clock=clock, ids=ids)
            await harness.open()
            wake = await harness.run_until_parked()
            await harness.close()
            if wake.active:
                continue
            if wake.at is None:
                break
            await clock.sleep(max(0.0, wake.at - clock.now()))
        record = store.get_task(script.session_id, task_id)
        assert record is not None and isinstance(record.state, Terminal), record
        result = record.state.outcome.result  # type: ignore[union-attr]
        return list(result["log"])  # type: ignore[index]

    log = clock.run(go())
    store.close()
    return log, probe.paid
