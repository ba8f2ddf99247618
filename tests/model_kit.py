"""The reference model and the task kind of the model-based test (tests/test_model_based.py).

The model encodes design 001's tables for signals, sleeps, deadlines, aborts, crashes and
leases (see the test module's docstring for the list); the task kind sleeps through a plan of
steps and records what it saw, so the state machine can compare the engine with the model.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from pydantic import BaseModel, ConfigDict

from bide import (
    Aborted,
    Completed,
    InvalidPark,
    SignalExpired,
    SignalValue,
    Sleeping,
    Terminal,
    Wake,
    define_signal,
    define_task,
)

SESSION = "s-model"
RESTART_LIMIT = 2  # small, so the restart-limit path is reachable within a few crashes
LEASE = 60.0  # short, so clock steps cross it both ways


class Num(BaseModel):
    """Signal payload; strict, so "5" is not 5 and extra fields are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    n: int


TOKENS = {
    "A": define_signal("mb.a", 1, Num),
    "B": define_signal("mb.b", 2, Num),
}
INVALID_VALUES = [{"n": "5"}, {"n": 1, "z": 2}, {}, "x", None, {"n": 1.5}, {"n": True}]
UNKNOWN_IDS = ["t-999", "nope"]
KEY_UNIVERSE = [f"s{i}k{j}" for i in range(5) for j in range(3)] + ["extra"]
CLOCK_STEPS = [0.5, 1, 29, 30, 31, 59, 60, 61, 600, 3599, 3600, 86400]
DEADLINES = [None, 1, 30, 60, 3600]


def slot(tok: str, key: str) -> str:
    """The engine's slot name for a token letter and key."""
    return f"{TOKENS[tok].name}/{key}"


def new_keys(plan: list[dict[str, Any]], step: int) -> list[list[str]]:
    """The fresh keys a plan step listens on: ``[token letter, key]`` pairs."""
    return [[tok, f"s{step}k{j}"] for j, tok in enumerate(plan[step]["keys"])]


def listed_keys(plan: list[dict[str, Any]], step: int, carried: list[list[str]]) -> list[list[str]]:
    """Fresh keys of ``step`` plus the still-open keys of the previous sleep, in plan order."""
    fresh = new_keys(plan, step)
    carry = plan[step]["carry"]
    if carry == "first":
        return carried + fresh
    if carry == "last":
        return fresh + carried
    return fresh


# --- the task kind under test ---------------------------------------------------------------


class Runaway(BaseException):
    """Raised from a phase when one run invokes far more phases than any plan needs (e.g. a
    key that wakes its task again and again): fails the run instead of hanging it."""


# Where a run can be stopped inside a ``woke`` phase: at its start, after its memo write
# (durable, first writer wins), or between its ``read_signal`` calls and its first commit.
STOPS = ("start", "memo", "read")


class Trap:
    """Makes one chosen invocation hang at one of its phase's stopping points (``STOPS``), to
    crash or race mid-run; and counts invocations per run to stop a runaway loop."""

    RUNAWAY = 200  # at most 6 tasks x (start + 4 steps + abort) invocations are legitimate

    def __init__(self) -> None:
        self.victim: str | None = None
        self.point = "start"
        self.hit: asyncio.Event | None = None
        self.hang: asyncio.Future[None] | None = None
        self.calls = 0

    def arm(self, task_id: str, point: str = "start") -> None:
        self.victim, self.point = task_id, point
        self.hit = asyncio.Event()
        self.hang = asyncio.get_running_loop().create_future()

    def release(self) -> None:
        """Let the trapped phase go on (a paused worker that was not dead after all)."""
        assert self.hang is not None
        if not self.hang.done():
            self.hang.set_result(None)

    async def check(self, task_id: str, point: str = "start") -> None:
        if point == "start":
            self.calls += 1
        if self.calls > self.RUNAWAY:
            raise Runaway(f"{self.calls} phase invocations in one run (last: {task_id})")
        if self.victim == task_id and self.point == point:
            self.victim = None
            assert self.hit is not None and self.hang is not None
            self.hit.set()
            await self.hang  # until the "process" dies


def make_kind(trap: Trap) -> Any:
    """The plan-following task kind, wired to ``trap``."""

    def sleep_on(rt: Any, plan: list[dict[str, Any]], step: int, keys: list[list[str]], log: list):
        dt = plan[step]["dt"]
        return Sleeping(
            checkpoint={"phase": "woke", "step": step, "keys": keys, "log": log},
            until=None if dt is None else rt.now() + dt,
            signals=tuple(TOKENS[tok].key(key) for tok, key in keys),
        )

    async def start(task: Any, rt: Any) -> None:
        await trap.check(task.id)
        plan = task.input["plan"]
        await rt.commit(sleep_on(rt, plan, 0, new_keys(plan, 0), []))

    async def woke(task: Any, rt: Any) -> None:
        await trap.check(task.id)
        plan = task.input["plan"]
        cp = task.checkpoint
        step, keys, log = cp["step"], cp["keys"], cp["log"]
        wake = task.wake
        # The first run of this step that got this far wins; a rerun (after a crash or a
        # takeover) reads that run's time back.
        memo = await rt.memo(f"m{step}", rt.now())
        await trap.check(task.id, "memo")
        reads: dict[str, Any] = {}
        for tok, key in keys:
            state = await rt.read_signal(TOKENS[tok], key)
            if isinstance(state, SignalValue):
                reads[slot(tok, key)] = ["value", state.value.n]
            elif isinstance(state, SignalExpired):
                reads[slot(tok, key)] = ["expired"]
            else:
                reads[slot(tok, key)] = None
        await trap.check(task.id, "read")
        woken = None
        if wake.reason == "signal":
            woken = next(k for k in keys if slot(*k) == f"{wake.signal}/{wake.key}")
        # One key serves one wait: sleeping again on the key that woke us (or that expired)
        # must be refused.
        old = woken if woken is not None else (keys[0] if wake.reason == "expired" else None)
        probe = None
        if old is not None:
            try:
                await rt.commit(
                    Sleeping(
                        checkpoint={**cp, "probe": "accepted"},
                        signals=(TOKENS[old[0]].key(old[1]),),
                    )
                )
                probe = "accepted"
            except InvalidPark:
                probe = "rejected"
        entry = {
            "step": step,
            "wake": wake.to_dict(),
            "reads": reads,
            "probe": probe,
            "memo": memo,
        }
        log = [*log, entry]
        if step + 1 < len(plan):
            carried = [k for k in keys if k != woken and reads[slot(*k)] != ["expired"]]
            await rt.commit(sleep_on(rt, plan, step + 1, listed_keys(plan, step + 1, carried), log))
        else:
            await rt.commit(Terminal(outcome=Completed(result={"log": log})))

    async def abort(task: Any, rt: Any) -> None:
        await trap.check(task.id)
        reason = f"{task.abort_reason}@{task.checkpoint.get('step')}"
        await rt.commit(Terminal(outcome=Aborted(reason=reason)))

    return define_task(
        "mb.plan", 1, lambda _input: "start", {"start": start, "woke": woke}, abort=abort
    )


# --- the reference model --------------------------------------------------------------------


@dataclass
class MSlot:
    value: int | None = None
    expired: bool = False
    consumed: bool = False


@dataclass
class MTask:
    id: str
    plan: list[dict[str, Any]]
    status: str = "pending"  # pending | running | sleeping | terminal
    phase: str = "start"
    step: int | None = None
    keys: list[list[str]] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    wake: dict[str, Any] | None = None
    until: float | None = None
    abort_marked: bool = False
    abort_reason: str | None = None
    restarts: int = 0
    lease: float | None = None  # while running: when the lease of its holder expires
    slots: dict[str, MSlot] = field(default_factory=dict)
    outcome: tuple[str, Any] | None = None
    # Every value ever accepted, per slot (for the "never lost or changed" invariant).
    first_values: dict[str, int] = field(default_factory=dict)
    # Memos the woke phases wrote: ``m<step>`` -> the clock of the first run that wrote it.
    memos: dict[str, float] = field(default_factory=dict)
    signal_wakes: list[str] = field(default_factory=list)

    @property
    def listed(self) -> list[str]:
        return [slot(*k) for k in self.keys]

    def checkpoint(self) -> dict[str, Any]:
        if self.phase == "start":
            return {"phase": "start"}
        return {"phase": "woke", "step": self.step, "keys": self.keys, "log": self.log}


class Model:
    def __init__(self) -> None:
        self.tasks: dict[str, MTask] = {}

    def live(self) -> list[MTask]:
        return [t for t in self.tasks.values() if t.status != "terminal"]

    # design 001 ch. II check order, ch. IV deadline race
    def signal(self, task_id: str, tok: str, key: str, valid: bool, n: int, now: float) -> str:
        t = self.tasks.get(task_id)
        if t is None:
            return "not_found"
        if t.status == "terminal" or t.abort_marked:
            return "closed"
        if not valid:
            return "invalid"
        name = slot(tok, key)
        s = t.slots.get(name)
        if s is not None and s.value is not None:
            return "duplicate"
        if s is not None and s.expired:
            return "closed"
        if t.status == "sleeping" and t.until is not None and t.until <= now and name in t.listed:
            # Closed for good: the key is expired now, whatever wakes the task.
            t.slots[name] = MSlot(expired=True)
            return "closed"
        t.slots[name] = MSlot(value=n)
        t.first_values[name] = n
        return "delivered"

    def wakeup(self, t: MTask, now: float) -> dict[str, Any] | None:
        for name in t.listed:
            s = t.slots.get(name)
            if s is not None and s.value is not None and not s.consumed:
                signal, key = name.split("/", 1)
                return {"reason": "signal", "signal": signal, "key": key}
        if t.until is None or t.until > now:
            return None
        return {"reason": "expired"} if t.keys else {"reason": "time"}

    def eligible(self, t: MTask, now: float) -> bool:
        if t.status == "pending":
            return True
        if t.status == "running":
            return self.expired(t, now)
        if t.status != "sleeping":
            return False
        return t.abort_marked or self.wakeup(t, now) is not None

    @staticmethod
    def expired(t: MTask, now: float) -> bool:
        assert t.lease is not None
        return t.lease <= now

    def wake(self, now: float) -> Wake:
        active = any(self.eligible(t, now) for t in self.live())
        untils = [
            t.until
            for t in self.live()
            if t.status == "sleeping" and t.until is not None and not t.abort_marked
        ] + [t.lease for t in self.live() if t.status == "running" and not self.expired(t, now)]
        return Wake(active=active, at=min(untils) if untils else None)

    def reserve(self, t: MTask, now: float) -> None:
        """The reservation commit: running, with the wake it consumes or expires."""
        if t.abort_marked:
            t.wake = t.wake if t.status == "pending" else None
        elif t.status == "sleeping":
            wake = self.wakeup(t, now)
            assert wake is not None
            if wake["reason"] == "signal":
                name = f"{wake['signal']}/{wake['key']}"
                t.slots[name].consumed = True
                t.signal_wakes.append(name)
            elif wake["reason"] == "expired":
                for name in t.listed:
                    s = t.slots.setdefault(name, MSlot())
                    if s.value is None:
                        s.expired = True
            t.wake = wake
        t.status, t.lease = "running", now + LEASE

    def end(self, t: MTask, outcome: tuple[str, Any]) -> None:
        event(f"ended: {outcome[0]}")
        t.status, t.outcome, t.slots, t.memos = "terminal", outcome, {}, {}

    def sleep(self, t: MTask, step: int, keys: list[list[str]], log: list, now: float) -> None:
        dt = t.plan[step]["dt"]
        t.status, t.phase, t.step, t.keys, t.log = "sleeping", "woke", step, keys, log
        t.until = None if dt is None else now + dt
        t.wake, t.restarts = None, 0

    def phase(self, t: MTask, now: float, seen: dict[str, MSlot] | None = None) -> None:
        """What the task kind's phase (or abort handler) does from ``running``. ``seen`` is
        the slots as the phase read them, when values landed while it ran (it reads the
        record it was started with; they wait for its next run)."""
        if t.abort_marked:
            self.end(t, ("aborted", f"{t.abort_reason}@{t.step}"))
            return
        if t.phase == "start":
            self.sleep(t, 0, new_keys(t.plan, 0), [], now)
            return
        assert t.wake is not None and t.step is not None
        reads: dict[str, Any] = {}
        for name in t.listed:
            s = (t.slots if seen is None else seen).get(name)
            if s is not None and s.value is not None:
                reads[name] = ["value", s.value]
            elif s is not None and s.expired:
                reads[name] = ["expired"]
            else:
                reads[name] = None
        woken = None
        if t.wake["reason"] == "signal":
            woken = next(k for k in t.keys if slot(*k) == f"{t.wake['signal']}/{t.wake['key']}")
        probe = "rejected" if t.wake["reason"] in ("signal", "expired") else None
        memo = self.write_memo(t, now)
        entry = {"step": t.step, "wake": t.wake, "reads": reads, "probe": probe, "memo": memo}
        event(f"wake: {t.wake['reason']}")
        log = [*t.log, entry]
        if t.step + 1 < len(t.plan):
            carried = [k for k in t.keys if k != woken and reads[slot(*k)] != ["expired"]]
            self.sleep(t, t.step + 1, listed_keys(t.plan, t.step + 1, carried), log, now)
        else:
            t.log = log
            self.end(t, ("completed", {"log": log}))

    @staticmethod
    def write_memo(t: MTask, now: float) -> float:
        """The woke phase's memo of this step: first writer wins."""
        assert t.step is not None
        return t.memos.setdefault(f"m{t.step}", now)

    def run_until_parked(self, now: float) -> None:
        # Tasks of this kind never touch each other, so each can be driven on its own.
        for t in self.live():
            while t.status != "terminal" and self.eligible(t, now):
                if t.status == "running":  # its lease expired: taken over
                    self.recover(t)
                    continue
                self.reserve(t, now)
                self.phase(t, now)

    def recover(self, t: MTask) -> None:
        """A running task whose holder is presumed dead: pending with its wake, counting a
        restart (faulted past the limit)."""
        t.restarts += 1
        t.lease = None
        if t.restarts > RESTART_LIMIT:
            self.end(t, ("faulted", "restart limit reached"))
        else:
            t.status = "pending"

    def release(self, t: MTask) -> None:
        """A clean close of the harness running ``t``: pending, no restart counted."""
        t.status, t.lease = "pending", None

    def open(self, now: float) -> None:
        """A new harness opens the session: it takes over what expired leases left."""
        for t in self.live():
            if t.status == "running" and self.expired(t, now):
                self.recover(t)


# --- running a machine ---------------------------------------------------------------------------

LONG = os.environ.get("BIDE_LONG_PROOF") == "1"


def machine_settings(*, examples: int, long_examples: int, steps: int, long_steps: int) -> settings:
    """Hypothesis settings of a model-based machine: the CI size, or the long run under
    ``BIDE_LONG_PROOF=1``; derandomized when ``CI`` is set (a CI run is repeatable)."""
    return settings(
        max_examples=long_examples if LONG else examples,
        stateful_step_count=long_steps if LONG else steps,
        deadline=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )


def checked_report(label: str, tally: Counter[str]) -> Callable[[], Iterator[None]]:
    """The body of a module fixture that prints how much a machine checked (``pytest -s``)."""

    def report() -> Iterator[None]:
        started = time.perf_counter()
        yield
        print(
            f"\n{label}: {tally['examples']} examples, {tally['steps']} checked steps, "
            f"{time.perf_counter() - started:.1f}s"
        )

    return report
