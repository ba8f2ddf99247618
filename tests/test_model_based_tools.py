"""Model-based test of waits, children and a counted replay-unsafe tool (design 001 ch. V, VI
and X).

A hypothesis state machine drives a real :class:`bide.Harness` on an in-memory SQLite store
with *family* tasks (``tests/model_family_kit.py``): each step of a family's plan creates
children in one commit and waits for all of them; a child is a *kid* (sleeps, or not, and
returns its value) or a call of ``pay``, a replay-unsafe tool whose effect increments an
external counter. Several families (and so many runnable children) live in one session.

The faults are the ones of ``tests/test_model_based.py``, aimed at these tasks: a run is
stopped inside one task's phase (a family's at its start or after reading its children's
outcomes, a kid's at its start, a ``pay`` run before or after its payment) while the other
runnable tasks run on until parked; then the process dies (the next harness takes over once
the lease ran out) or closes cleanly, or a second worker opens the session while the lease is
live (it must leave the task alone) or after it ran out (it takes the task over; then the
first run goes on, a zombie whose commits are refused). Crashes also come between runs.

What must hold, after every step:

* **exactly once means one**: no ``pay`` call ever counted two payments; a call that
  completed ``paid`` counted exactly one; a call ends ``interrupted`` only when a run of it
  was cut in flight (its intent stored) and then taken over or closed, with at most one
  payment, never run again;
* every child has its family as owner and one task per creation key (a zombie's refused
  commit created nothing);
* every ended family ended as the fault-free reference (:func:`model_family_kit.
  reference_log`), except where this machine's own faults explain it: ``interrupted`` for a
  call it cut in flight, ``faulted`` (restart limit reached) for a task it killed more than
  ``RESTART_LIMIT`` times in a row without progress;
* and ``settle`` (time passes, a worker runs everything) ends every task.

The default run is CI-sized (300 examples); ``BIDE_LONG_PROOF=1`` runs 3,000 longer ones.
``CI`` set makes the run deterministic. ``pytest -s`` prints how many examples and steps ran.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from model_family_kit import (
    FAMILY,
    KID,
    PAY_STOPS,
    TOOL,
    kid_ref,
    make_family,
    reference_log,
    summary,
)
from model_kit import LEASE, RESTART_LIMIT, Trap, checked_report, machine_settings
from model_processes import HarnessProcesses

from bide import Harness, ManualClock, SequentialIds, SQLiteStore, Wake
from bide.engine.store import StoreWrapper

SESSION = "s-family"

children = st.lists(
    st.one_of(
        st.fixed_dictionaries({"op": st.just("pay")}),
        st.fixed_dictionaries({"op": st.just("kid"), "dt": st.sampled_from([0, 0, 30, 600])}),
    ),
    min_size=1,
    max_size=3,
)
plans = st.lists(children, min_size=1, max_size=3)


class Ledger(StoreWrapper):
    """The store, noting the id of every task any commit wrote (children and calls that are
    created and end within one run are never seen live between steps)."""

    def __init__(self, inner: SQLiteStore) -> None:
        super().__init__(inner)
        self.written: set[str] = set()

    def commit(
        self, session_id: str, expected_seq: int, writes: Any, docs: Any = (), *, absent: Any = ()
    ) -> int:
        """Commit, then note the ids written."""
        seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        self.written.update(r.id for r in writes)
        return seq


class FamilyMachine(HarnessProcesses, RuleBasedStateMachine):
    session = SESSION

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = Ledger(SQLiteStore())
        self.clock = ManualClock()
        self.ids = SequentialIds()
        self.trap = Trap()
        self.paid: Counter[str] = Counter()  # the external counter: pay call ref -> payments
        self.family, self.kid, self.registry = make_family(self.trap, self.paid)
        self.plans: dict[str, list[list[dict[str, Any]]]] = {}  # family id -> plan
        self.cut: set[str] = set()  # refs of pay calls cut in flight: they end interrupted
        self.faulted: set[str] = set()  # refs (or family ids) past the restart limit
        self.restarts: Counter[str] = Counter()  # task id -> recoveries since its progress
        self.crashes = 0
        self.last_victim: str | None = None
        self.fresh = False  # the last victim made progress in its run before it stopped
        self.races = 0
        self.harness = self.open_harness()
        TALLY["examples"] += 1

    def harness_kinds(self) -> list[Any]:
        return [self.family, self.kid, self.registry.task]

    @initialize(plan=plans)
    def first_family(self, plan: list[list[dict[str, Any]]]) -> None:
        self.create(plan)

    # --- rules -------------------------------------------------------------------------------

    @precondition(lambda self: len(self.plans) < 3)
    @rule(plan=plans)
    def create(self, plan: list[list[dict[str, Any]]]) -> None:
        task_id = self.run(self.harness.create_task(self.family, {"plan": plan}))
        assert task_id not in self.plans, f"id {task_id} reused"
        self.plans[task_id] = plan

    @rule(seconds=st.sampled_from([1, 30, 600, LEASE]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def run_until_parked(self) -> None:
        self.trap.calls = 0
        self.run(self.harness.run_until_parked())
        self.restarts.clear()  # everything that could run made progress (or ended)

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        """Between runs: a crash (the harness dropped) or a clean close, then a new one."""
        if clean:
            self.run(self.harness.close())
        self.harness = self.open_harness()

    @precondition(lambda self: bool(self.store.written))
    @rule(data=st.data(), hint=st.sampled_from(["owner", "owner", "none", "wrong"]))
    def targeted_wake(self, data: st.DataObject, hint: str) -> None:
        """A signal's wake for one task (a kid, a call, a family), run as the worker runs it:
        a pass on that task alone when it may (its owner read with it), widened to the whole
        session by an end, a wait or a child created; then the session's other wakes. The wake
        may name the owner (as the signal route does), none (a duplicate's) or a wrong one."""
        task_id = data.draw(st.sampled_from(sorted(self.store.written)))
        record = self.observer().task(task_id)
        owner = {"owner": record.owner, "none": None, "wrong": task_id}[hint] if record else None
        self.trap.calls = 0
        defer = data.draw(st.booleans(), label="first delivery")
        partial = self.targeted_pass(task_id, owner, defer=defer)
        event(f"family: targeted pass ({'stayed partial' if partial else 'loaded the session'})")
        event(f"family: targeted pass ({'reservation held' if defer else 'reservation first'})")

    @rule()
    def settle(self) -> None:
        """Time passes and a worker runs the session until nothing is left to do: every task
        ended (the invariants then compare every family with its reference)."""
        self.trap.calls = 0
        for _ in range(20):
            wake = self.run(self.harness.run_until_parked())
            if not wake.active and wake.at is None:
                break
            if wake.at is not None and wake.at > self.clock.now():
                self.clock.set(wake.at)
        self.restarts.clear()
        live = self.observer().live_tasks
        assert not live, f"settled, yet live: {sorted(live)}"

    # --- stops inside a phase: crashes and racing workers -------------------------------------

    def runnable(self) -> list[Any]:
        """The live tasks whose next run starts a phase the trap can stop in (a pay call
        holding its intent is recovered, not run again: no phase of ours starts)."""
        h, now = self.observer(), self.clock.now()
        found = []
        for record in h.live_tasks.values():
            state = record.state
            if record.abort_marked or state.status == "running":
                continue
            if state.status == "pending":
                ok = record.kind != TOOL or state.checkpoint.get("phase") != "execute"
            elif state.status == "sleeping":
                ok = state.until is not None and state.until <= now
            elif state.status == "waiting":
                ok = all((t := h.task(k)) is not None and not t.live for k in state.on)
            else:
                ok = False
            if ok:
                found.append(record)
        return sorted(found, key=lambda r: r.id)

    def can_stop(self) -> bool:
        running = any(r.status == "running" for r in self.observer().live_tasks.values())
        return not running and bool(self.runnable())

    def candidates(self) -> list[tuple[str, str, str, bool]]:
        """Where the next run can be stopped: ``(ident, kind, phase, fresh)`` of each runnable
        task, of the children a runnable family creates in that run (they run in it too), and
        of a family whose children all end in that run (its ``woke`` phase runs in it). A
        child is named by its ref (known before it exists), a family by its id. ``fresh``:
        the task made progress in this run before it reaches that phase (or is new), so its
        count of restarts starts again from 0."""
        h, runnable = self.observer(), self.runnable()
        found = []
        for record in runnable:
            phase = record.state.checkpoint.get("phase", "start")
            if record.kind != FAMILY:
                found.append((record.key, record.kind, phase, False))
                continue
            found.append((record.id, FAMILY, phase, False))
            step = record.state.checkpoint["step"] + 1 if phase == "woke" else 0
            plan = self.plans[record.id]
            kids = plan[step] if step < len(plan) else []
            for j, child in enumerate(kids):
                kind = TOOL if child["op"] == "pay" else KID
                found.append((kid_ref(record.id, step, j), kind, "start", True))
            if phase == "start" and all(c["op"] == "pay" or not c["dt"] for c in kids):
                found.append((record.id, FAMILY, "woke", True))
        for record in h.live_tasks.values():
            if record.kind == FAMILY and record.status == "waiting":
                kids = [h.task(k) for k in record.state.on]  # type: ignore[union-attr]
                if all(k is None or self.ends_in_a_run(k) for k in kids):
                    found.append((record.id, FAMILY, "woke", True))
        return found

    def ends_in_a_run(self, record: Any) -> bool:
        """Whether a child ends in the next run: ended, a pending call (run, or recovered
        ``interrupted``), a kid that does not sleep or whose sleep is over."""
        state = record.state
        if not record.live or (record.kind == TOOL and state.status == "pending"):
            return True
        if record.kind != KID or state.status not in ("pending", "sleeping"):
            return False
        if state.checkpoint.get("phase") == "done":
            return state.status == "pending" or state.until <= self.clock.now()
        return state.status == "pending" and not record.input["dt"]

    def draw_victim(self, data: st.DataObject) -> tuple[str, str, str]:
        """The victim ``(ident, kind, stop)``: a pay run stops before or after its payment, a
        woken family at the start of its phase or after reading its children, others at
        their start."""
        found = self.candidates()
        again = [c for c in found if c[0] == self.last_victim]
        if again and data.draw(st.booleans()):  # the same task again: toward its restart limit
            found = again
        ident, kind, phase, fresh = data.draw(st.sampled_from(found))
        self.last_victim = ident
        self.fresh = fresh
        if kind == TOOL:
            stop = data.draw(st.sampled_from(PAY_STOPS))
        elif kind == FAMILY and phase == "woke":
            stop = data.draw(st.sampled_from(["woke", "read"]))
        else:
            stop = "start"
        event(f"family stop: {kind} at {stop}")
        return ident, kind, stop

    def find(self, h: Harness, ident: str) -> Any:
        """The victim's record: a family by id, a child by its ref (its creation key)."""
        if ident in self.plans:
            return h.task(ident)
        return next(r for r in h.live_tasks.values() if r.key == ident)

    async def stopped(self, h: Harness, victim: str, stop: str) -> asyncio.Future[Wake]:
        """Start ``h``'s run with ``victim`` trapped at ``stop``; return once it hangs there
        and every other task stopped moving (parked, ended, or waiting on the victim)."""
        self.trap.arm(victim, stop)
        self.trap.calls = 0
        assert self.trap.hit is not None
        runner = asyncio.ensure_future(h.run_until_parked())
        hit = asyncio.ensure_future(self.trap.hit.wait())
        await asyncio.wait({runner, hit}, return_when=asyncio.FIRST_COMPLETED)
        assert hit.done() and not runner.done(), "the victim's phase never started"
        for _ in range(60):
            for _ in range(5):
                await asyncio.sleep(0)
            view = self.new_harness()
            await view.attach()
            record = self.find(view, victim)
            others = [r for r in view.live_tasks.values() if r.id != record.id]
            if not view.wake().active and all(r.status != "running" for r in others):
                assert record.status == "running", f"the victim is {record.status}"
                return runner
        raise AssertionError(f"while {victim} is stopped the others never parked")

    def recovered(self, victim: Any) -> None:
        """The model of a takeover of ``victim``: one restart more; past the limit it ends
        faulted (a pay call holding its intent ends interrupted instead: see ``cut``)."""
        ref = victim.key or victim.id
        if self.fresh:
            self.restarts[victim.id] = 0
        self.restarts[victim.id] += 1
        if self.restarts[victim.id] > RESTART_LIMIT:
            event("family: a task reached the restart limit")
            self.faulted.add(ref)

    @precondition(lambda self: self.crashes < 4 and self.can_stop())
    @rule(data=st.data(), clean=st.booleans())
    def crash_mid_phase(self, data: st.DataObject, clean: bool) -> None:
        """The victim stops in its phase, the others run on until parked, and the process
        dies (its tasks are taken over once the lease ran out) or closes cleanly."""
        self.crashes += 1
        ident, kind, stop = self.draw_victim(data)
        event(f"family crash ({'close' if clean else 'kill'})")

        async def go() -> Any:
            runner = await self.stopped(self.harness, ident, stop)
            victim = self.find(self.harness, ident)
            if clean:
                await self.harness.close()
            else:
                runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            assert self.trap.hang is not None
            if not self.trap.hang.done():
                self.trap.hang.cancel()
                await asyncio.sleep(0)
            return victim

        victim = self.run(go())
        # The others ran on to a park: progress.
        self.restarts = Counter({victim.id: 0 if self.fresh else self.restarts[victim.id]})
        if kind == TOOL:
            self.cut.add(ident)
        if not clean:
            self.clock.advance(LEASE)
            self.recovered(victim)
        self.harness = self.open_harness()

    @precondition(lambda self: self.races < 3 and self.can_stop())
    @rule(data=st.data(), expired=st.booleans())
    def race_mid_run(self, data: st.DataObject, expired: bool) -> None:
        """While the victim is stopped a second worker opens the session: while the lease is
        live it must leave the task alone (the first run then finishes it as if nothing
        happened); once it ran out, it takes the task over (a pay call ends interrupted)
        and the first run goes on as a zombie whose commits are refused."""
        self.races += 1
        ident, kind, stop = self.draw_victim(data)
        event(f"family race (lease {'expired' if expired else 'live'})")
        first = self.harness
        runner = self.run(self.stopped(first, ident, stop))
        victim = self.find(first, ident)
        if expired:
            self.clock.advance(LEASE)
        second = self.open_harness()
        self.trap.calls = 0
        self.run(second.run_until_parked())
        if expired:
            self.recovered(victim)
            if kind == TOOL:
                self.cut.add(ident)
        else:
            record = second.task(victim.id)
            assert record is not None and record.status == "running", "taken over too soon"
            assert record.restarts == victim.restarts, "a restart counted under a live lease"
        self.trap.release()
        self.trap.calls = 0
        self.run(runner)
        self.trap.calls = 0
        self.run(second.run_until_parked())
        self.run(first.close())
        self.harness = second
        self.restarts.clear()  # the victim ran again (or ended); the others had run on

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def families_match_the_reference(self) -> None:
        TALLY["steps"] += 1
        h = self.observer()
        for ref, n in self.paid.items():
            assert n <= 1, f"pay {ref} ran {n} times"
        keys: Counter[tuple[str | None, str | None]] = Counter()
        for task_id in sorted(self.store.written):
            record = h.task(task_id)
            assert record is not None, f"task {task_id} lost"
            if record.kind == FAMILY:
                assert task_id in self.plans, f"unknown family {task_id}"
                self.check_family(h, record)
                continue
            assert record.owner in self.plans, f"{task_id} owned by {record.owner}"
            assert record.key is not None and record.key.startswith(f"{record.owner}/")
            keys[(record.owner, record.key)] += 1
            if record.kind == TOOL and not record.live:
                self.check_call(h, record)
            else:
                assert record.kind in (KID, TOOL), record.kind
        doubled = [k for k, n in keys.items() if n > 1]
        assert not doubled, f"children created twice: {doubled}"

    def check_call(self, h: Harness, record: Any) -> None:
        """A pay call that ended: paid exactly once, or interrupted after a cut."""
        ref = record.key
        got = summary(h.outcome(record.id))
        event(f"family: a call ended {got}")
        if got == "paid":
            assert self.paid[ref] == 1, f"{ref} completed with {self.paid[ref]} payments"
            assert ref not in self.cut, f"{ref} was cut in flight, yet completed"
        elif got == "interrupted":
            assert ref in self.cut, f"{ref} interrupted, yet never cut"
        else:
            owner = h.task(record.owner)
            assert owner is not None and record.owner in self.faulted, f"{ref}: {got}"

    def check_family(self, h: Harness, record: Any) -> None:
        """An ended family ended as its reference, but for the faults this machine made."""
        if record.live:
            return
        outcome = h.outcome(record.id)
        if record.id in self.faulted:
            assert summary(outcome) == ["faulted", "restart limit reached"], outcome
            return
        assert outcome is not None and outcome.status == "completed", outcome
        want = reference_log(record.id, self.plans[record.id])
        for step, entries in enumerate(want):
            for j in range(len(entries)):
                ref = f"{record.id}/{step}.{j}"
                if ref in self.faulted:
                    want[step][j] = ["faulted", "restart limit reached"]
                elif ref in self.cut:
                    want[step][j] = "interrupted"
        assert outcome.result == {"log": want}, f"{record.id}: {outcome.result} != {want}"


TALLY: Counter[str] = Counter()


report = pytest.fixture(scope="module", autouse=True)(
    checked_report("model-based (waits, children, tools)", TALLY)
)


TestFamilyModel = FamilyMachine.TestCase
TestFamilyModel.settings = machine_settings(
    examples=300, long_examples=3_000, steps=25, long_steps=40
)
