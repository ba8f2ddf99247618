"""Model-based test of the durable task engine (design 001 chapters II-IV and X).

A hypothesis state machine drives a real :class:`bide.Harness` on an in-memory SQLite store,
with a manual clock and sequential ids, and checks it step by step against a small reference
model (``tests/model_kit.py``, with the task kind under test). The model encodes design 001's
tables:

* ``signal()`` checks, in order: not_found, closed (ended or abort-marked), invalid,
  duplicate (first value kept), closed (key expired, or a sleep on it is past its deadline),
  delivered;
* a sleep wakes on the first listed key holding an unused value; otherwise at its deadline,
  which expires every listed key without a value (``expired``), or ``time`` without keys;
* a woke phase's memo is first-writer-wins: a rerun after a crash or a takeover reads the
  first run's value;
* the wake consumes its key; sleeping again on a consumed or expired key is refused;
* early values are kept and wake the later sleep at once; other listed keys stay open;
* an abort mark closes the task to signals and ends its park at once;
* a running task holds a lease (``LEASE`` seconds from its reservation): a harness opened
  while it is live leaves the task alone, and once it expired the task goes back to pending
  with its wake (counting a restart) as after a crash; a close puts the tasks it runs back to
  pending without counting; parked tasks stay parked;
* ``wake()``: active iff something can run; ``at`` is the earliest deadline of a sleep that is
  not abort-marked, or of a live lease another harness holds; sleeps on signals alone give
  no ``at``.

The task kind under test sleeps through a plan of steps. Each step lists new keys (of two
signal tokens), optionally a deadline, and optionally carries over the keys of the previous
sleep that are still open. On every wake it records the wake reason, what ``read_signal``
returned for each listed key, its memo, and whether sleeping again on the old key was refused.
Up to six such tasks live in a session; several are often runnable together, and a run
reserves them all in one commit and runs their phases concurrently.

Deliveries also travel through a small network that reorders and duplicates them (a value
sent twice, copies arriving in any order, some through the store alone as another process's
signal handler would deliver them with :func:`bide.engine.delivery.deliver_signal`). And workers
race: while one harness's run is stopped inside one task's phase (at its start, after its memo
write, or between its ``read_signal`` calls and its commit) and the other tasks of the run
went on until parked, another process delivers signals or
aborts a task, or a second harness opens the session (as a duplicate worker would): while
the lease is live it leaves the running task alone; once time passed the lease it takes the
task over and runs it; then the first run goes on. Whichever harness did the
work, the store must end where the model does.

The default run is CI-sized (2,000 examples); ``BIDE_LONG_PROOF=1`` runs 20,000 longer ones.
``CI`` set makes the run deterministic. ``pytest -s`` prints how many examples and steps ran.

Waits, children and a counted replay-unsafe tool have their own machine,
``tests/test_model_based_tools.py``; the helpers that stop a run inside a phase are in
``tests/model_stops.py``.

Long because: the state machine that drives the real harness and the invariants it checks
are one proof; split, a reader could not check each rule's steps against what is asserted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from model_kit import (
    CLOCK_STEPS,
    DEADLINES,
    INVALID_VALUES,
    KEY_UNIVERSE,
    LEASE,
    SESSION,
    TOKENS,
    UNKNOWN_IDS,
    Model,
    MTask,
    Trap,
    checked_report,
    machine_settings,
    make_kind,
    new_keys,
)
from model_processes import HarnessProcesses
from model_stops import StopsMidPhase

from bide import (
    Aborted,
    Completed,
    Faulted,
    Harness,
    ManualClock,
    Pending,
    SequentialIds,
    SignalResult,
    Sleeping,
    SQLiteStore,
    Terminal,
    Wake,
    deliver_signal,
)
from bide.engine.memo_pages import every_memo
from bide.engine.slots import task_prefix, task_slots

# --- the state machine ----------------------------------------------------------------------

steps = st.fixed_dictionaries(
    {
        "keys": st.lists(st.sampled_from(["A", "B"]), max_size=3),
        "dt": st.sampled_from(DEADLINES),
        "carry": st.sampled_from([None, "first", "last"]),
    }
).map(lambda s: s if s["keys"] or s["dt"] is not None else {**s, "dt": 30})  # keys or until
plans = st.lists(steps, min_size=1, max_size=4)


class EngineMachine(StopsMidPhase, HarnessProcesses, RuleBasedStateMachine):
    session = SESSION

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = SQLiteStore()
        self.clock = ManualClock()
        # One id source across "processes": ids must stay unique in the session.
        self.ids = SequentialIds()
        self.trap = Trap()
        self.kind = make_kind(self.trap)
        self.model = Model()
        self.counter = 0
        self.aborts = 0
        self.crashes = 0
        self.races = 0
        # Deliveries sent but not yet arrived: [task id, token letter, key, value, copies].
        self.network: list[list[Any]] = []
        self.harness = self.open_harness()
        TALLY["examples"] += 1

    def harness_kinds(self) -> list[Any]:
        return [self.kind]

    @initialize(plan=plans)
    def first_task(self, plan: list[dict[str, Any]]) -> None:
        self.create(plan)

    # --- rules -------------------------------------------------------------------------------

    @precondition(lambda self: len(self.model.tasks) < 6)
    @rule(plan=plans)
    def create(self, plan: list[dict[str, Any]]) -> None:
        task_id = self.run(self.harness.create_task(self.kind, {"plan": plan}))
        assert task_id not in self.model.tasks, f"id {task_id} reused"
        self.model.tasks[task_id] = MTask(id=task_id, plan=plan)

    @precondition(lambda self: len(self.model.tasks) < 5)
    @rule(plans=st.lists(plans, min_size=2, max_size=3))
    def create_several(self, plans: list[list[dict[str, Any]]]) -> None:
        """Several tasks at once: all runnable together, so the next run (or the run a race
        or a crash stops) interleaves their phases."""
        for plan in plans[: 6 - len(self.model.tasks)]:
            self.create(plan)

    def deliver(
        self, task_id: str, tok: str, key: str, value: Any, via_store: bool = False
    ) -> None:
        """Deliver through the harness, or (``via_store``) as another process's signal
        handler does: :func:`deliver_signal` on the store, without loading the session."""
        valid = isinstance(value, dict) and set(value) == {"n"} and type(value["n"]) is int
        expected = self.model.signal(
            task_id, tok, key, valid, value["n"] if valid else -1, self.clock.now()
        )
        event(f"signal -> {expected}" + (" (via the store)" if via_store else ""))
        if via_store:
            got = deliver_signal(
                self.store, SESSION, task_id, TOKENS[tok], key, value, self.clock
            ).result
        else:
            got = self.run(self.harness.signal(task_id, TOKENS[tok], key, value))
        assert got == SignalResult(expected), (
            f"signal({task_id}, {tok}, {key}, {value!r}) -> {got}, model says {expected}"
        )

    def draw_delivery(self, data: st.DataObject) -> list[Any]:
        """A delivery worth racing: a key some task listens on now or later, one delivered
        before, any key of any task, an unknown task, or an invalid value."""
        choices = ["any"]
        live = self.model.live()
        if live:
            choices += ["planned", "planned"]
        if any(t.first_values for t in self.model.tasks.values()):
            choices.append("again")
        how = data.draw(st.sampled_from(choices))
        if how == "planned":
            t = data.draw(st.sampled_from(live))
            keys = [k for step in range(len(t.plan)) for k in new_keys(t.plan, step)] + t.keys
            if keys:
                tok, key = data.draw(st.sampled_from(keys))
                return [t.id, tok, key, self.fresh_value()]
        if how == "again":
            t = data.draw(st.sampled_from([t for t in self.model.tasks.values() if t.first_values]))
            name = data.draw(st.sampled_from(sorted(t.first_values)))
            signal, key = name.split("/", 1)
            tok = next(k for k, v in TOKENS.items() if v.name == signal)
            return [t.id, tok, key, {"n": t.first_values[name]}]
        task_id = data.draw(st.sampled_from(sorted(self.model.tasks) * 3 + UNKNOWN_IDS))
        tok = data.draw(st.sampled_from(sorted(TOKENS)))
        key = data.draw(st.sampled_from(KEY_UNIVERSE))
        valid = data.draw(st.integers(0, 3))
        value = self.fresh_value() if valid else data.draw(st.sampled_from(INVALID_VALUES))
        return [task_id, tok, key, value]

    def fresh_value(self) -> dict[str, int]:
        self.counter += 1
        return {"n": self.counter}

    @rule(
        data=st.data(),
        tok=st.sampled_from(sorted(TOKENS)),
        key=st.sampled_from(KEY_UNIVERSE),
        valid=st.integers(0, 3),
        invalid=st.sampled_from(INVALID_VALUES),
    )
    def signal_any(self, data: st.DataObject, tok: str, key: str, valid: int, invalid: Any) -> None:
        """Any task (or now and then an unknown id), any key: early, late, unlistened or
        listened; valid three times in four."""
        known = sorted(self.model.tasks)
        task_id = data.draw(st.sampled_from(known * 3 + UNKNOWN_IDS))
        value = self.fresh_value() if valid else invalid
        self.deliver(task_id, tok, key, value)

    @precondition(lambda self: any(t.status == "sleeping" and t.keys for t in self.model.live()))
    @rule(data=st.data(), then_run=st.sampled_from(["no", "full", "targeted"]))
    def signal_listened(self, data: st.DataObject, then_run: str) -> None:
        """A key some sleep lists right now (the race with its deadline included), and often
        the worker run that the delivery triggers: a full pass, or the targeted pass a
        signal's wake makes (the task alone), followed by the session's other wakes."""
        sleepers = [t for t in self.model.live() if t.status == "sleeping" and t.keys]
        t = data.draw(st.sampled_from(sleepers))
        tok, key = data.draw(st.sampled_from(t.keys))
        self.deliver(t.id, tok, key, self.fresh_value())
        if then_run == "full":
            self.run_until_parked()
        elif then_run == "targeted":
            self.targeted_run(t.id, defer=True)

    @precondition(lambda self: bool(self.model.tasks))
    @rule(data=st.data())
    def targeted_wake(self, data: st.DataObject) -> None:
        """A signal's wake for any task (live or ended, or an unknown id), arriving whenever:
        its value may be stored already, come later, or have been refused."""
        task_id = data.draw(st.sampled_from(sorted(self.model.tasks) + UNKNOWN_IDS))
        self.targeted_run(task_id, defer=data.draw(st.booleans(), label="first delivery"))

    def targeted_run(self, task_id: str, *, defer: bool = False) -> None:
        """The worker's targeted pass on ``task_id``, then a full pass: together they must
        leave the store where the model's run leaves it (nothing lost, nothing run twice)."""
        now = self.clock.now()
        self.model.open(now)
        self.model.run_until_parked(now)
        self.trap.calls = 0
        partial = self.targeted_pass(task_id, None, defer=defer)
        event(f"targeted pass ({'stayed partial' if partial else 'loaded the session'})")
        event(f"targeted pass ({'reservation held' if defer else 'reservation first'})")
        # The session's other wakes: this machine's process runs it (and so sees what the
        # targeted pass wrote: its view is never left stale for the next rule).
        got = self.run(self.harness.run_until_parked())
        assert got == self.model.wake(now), f"targeted, then full: {got}"

    @precondition(lambda self: bool(self.model.live()))
    @rule(data=st.data())
    def signal_planned(self, data: st.DataObject) -> None:
        """A key a live task listens on now or will listen on in a later step: early values
        that must wake the later sleep at once, several values racing for one sleep."""
        t = data.draw(st.sampled_from(self.model.live()))
        keys = [k for step in range(len(t.plan)) for k in new_keys(t.plan, step)]
        if not keys:
            return
        tok, key = data.draw(st.sampled_from(keys))
        self.deliver(t.id, tok, key, self.fresh_value())

    @precondition(lambda self: any(self.expired_slots(t) for t in self.model.live()))
    @rule(data=st.data())
    def signal_expired(self, data: st.DataObject) -> None:
        """A key whose sleep's deadline expired it: closed for good, even once the task
        sleeps on other keys."""
        t = data.draw(st.sampled_from([t for t in self.model.live() if self.expired_slots(t)]))
        tok, key = data.draw(st.sampled_from(self.expired_slots(t)))
        self.deliver(t.id, tok, key, self.fresh_value())

    @staticmethod
    def expired_slots(t: MTask) -> list[tuple[str, str]]:
        letters = {v.name: k for k, v in TOKENS.items()}
        found = []
        for name, s in sorted(t.slots.items()):
            if s.expired:
                signal, key = name.split("/", 1)
                found.append((letters[signal], key))
        return found

    @precondition(lambda self: any(t.first_values for t in self.model.tasks.values()))
    @rule(data=st.data(), same=st.booleans())
    def redeliver(self, data: st.DataObject, same: bool) -> None:
        """A second copy (same or other value) of a key that was delivered before."""
        t = data.draw(st.sampled_from([t for t in self.model.tasks.values() if t.first_values]))
        name = data.draw(st.sampled_from(sorted(t.first_values)))
        signal, key = name.split("/", 1)
        tok = next(k for k, v in TOKENS.items() if v.name == signal)
        value = {"n": t.first_values[name]} if same else self.fresh_value()
        self.deliver(t.id, tok, key, value)

    # --- an at-least-once network: reordered and duplicated deliveries -----------------------

    @precondition(lambda self: len(self.network) < 5)
    @rule(data=st.data(), copies=st.sampled_from([1, 1, 2, 3]))
    def send(self, data: st.DataObject, copies: int) -> None:
        """A sender sends a value; ``copies`` of it will arrive (retries, redeliveries)."""
        self.network.append([*self.draw_delivery(data), copies])

    @precondition(lambda self: bool(self.network))
    @rule(data=st.data(), via_store=st.booleans())
    def arrive(self, data: st.DataObject, via_store: bool) -> None:
        """Any copy in flight arrives next, whatever order they were sent in."""
        index = data.draw(st.integers(0, len(self.network) - 1))
        item = self.network[index]
        item[4] -= 1
        if item[4] == 0:
            self.network.pop(index)
        self.deliver(*item[:4], via_store=via_store)

    # --- racing workers ----------------------------------------------------------------------

    @precondition(lambda self: self.races < 3 and self.can_stop_a_run())
    @rule(
        data=st.data(),
        race=st.sampled_from(
            ["signals", "abort", "second worker (lease live)", "second worker (lease expired)"]
        ),
    )
    def race_mid_run(self, data: st.DataObject, race: str) -> None:
        """Every runnable task is reserved in one commit and runs concurrently; one of them
        (the victim, drawn) stops at the start of its phase while the others run on until
        parked; while the victim is stopped there:

        * ``signals``: another process delivers values through the store alone;
        * ``abort``: another process aborts a task (often the running one);
        * ``second worker (lease live)``: a second harness opens the session and runs it; it
          leaves the running task alone (no restart) and asks to run again when the lease
          expires; the first run goes on undisturbed;
        * ``second worker (lease expired)``: time passes the lease first; the second harness
          takes the task over (it counts a restart, as after a crash) and runs it; the first
          run goes on after it, finds its commits refused, and goes on with what is left.

        Both runs return the model's ``wake()``; whichever harness did the work, the store
        ends where the model does."""
        self.races += 1
        victim = self.draw_victim(data)
        stop = self.draw_stop(data, victim)
        event(f"race mid-run: {race} ({victim.status}, stopped at {stop})")
        now = self.clock.now()
        seen = self.reserve_all(victim, now, stop)
        first = self.harness

        async def stopped_in_phase() -> asyncio.Future[Wake]:
            self.trap.arm(victim.id, stop)
            self.trap.calls = 0
            assert self.trap.hit is not None
            runner = asyncio.ensure_future(first.run_until_parked())
            hit = asyncio.ensure_future(self.trap.hit.wait())
            await asyncio.wait({runner, hit}, return_when=asyncio.FIRST_COMPLETED)
            assert hit.done() and not runner.done(), "the victim's phase never started"
            await self.others_parked(first, victim.id)
            return runner

        runner = self.run(stopped_in_phase())
        if race == "signals":
            for _ in range(data.draw(st.integers(1, 3))):
                self.deliver(*self.draw_delivery(data), via_store=True)
            self.trap.release()
            self.model.phase(victim, now, seen)
        elif race == "abort":
            task_id = data.draw(st.sampled_from([victim.id, victim.id, *sorted(self.model.tasks)]))
            t = self.model.tasks[task_id]
            expected = t.status != "terminal"
            if expected and not t.abort_marked:
                t.abort_marked, t.abort_reason = True, "user"
            other = self.observer()
            assert self.run(other.abort(task_id, "user")) is expected
            self.trap.release()
            if victim.abort_marked:
                # Its commit is refused; the same invocation runs the abort handler.
                self.model.end(victim, ("aborted", f"{victim.abort_reason}@{victim.step}"))
            else:
                self.model.phase(victim, now, seen)
        elif race == "second worker (lease live)":
            second = self.open_harness()
            self.model.open(now)
            assert victim.status == "running" and victim.lease == now + LEASE
            self.model.run_until_parked(now)  # nothing else is runnable
            self.trap.calls = 0
            wake = self.run(second.run_until_parked())
            assert wake == self.model.wake(now) and wake.active is False
            assert wake.at is not None and wake.at <= now + LEASE
            self.run(second.close())  # it holds nothing: the victim stays leased
            self.trap.release()
            self.model.phase(victim, now, seen)
        else:
            now = self.clock.advance(LEASE)
            second = self.open_harness()
            self.model.open(now)  # the second worker took the running task over
            self.model.run_until_parked(now)
            self.trap.calls = 0
            assert self.run(second.run_until_parked()) == self.model.wake(now)
            self.trap.release()
            self.trap.calls = 0
            assert self.run(runner) == self.model.wake(now), "the first run's wake"
            self.trap.calls = 0
            assert self.run(second.run_until_parked()) == self.model.wake(now)
            self.run(first.close())
            self.harness = second
            return
        self.model.run_until_parked(now)
        assert self.run(runner) == self.model.wake(now), f"the run's wake after {race}"

    @rule(seconds=st.sampled_from(CLOCK_STEPS))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.model.wake(self.clock.now()).at is not None)
    @rule(before=st.booleans())
    def advance_to_deadline(self, before: bool) -> None:
        """Exactly onto the earliest deadline (``until <= now`` expires), or just short of it."""
        at = self.model.wake(self.clock.now()).at
        assert at is not None
        target = at - 0.25 if before else at
        if target > self.clock.now():
            self.clock.set(target)

    # Aborts end tasks early; a few per run are enough to cover them.
    @precondition(lambda self: self.aborts < 3)
    @rule(data=st.data(), reason=st.sampled_from(["stop", "user"]))
    def abort(self, data: st.DataObject, reason: str) -> None:
        self.aborts += 1
        task_id = data.draw(st.sampled_from(sorted(self.model.tasks) + UNKNOWN_IDS))
        t = self.model.tasks.get(task_id)
        expected = t is not None and t.status != "terminal"
        if expected and not t.abort_marked:
            t.abort_marked, t.abort_reason = True, reason
        got = self.run(self.harness.abort(task_id, reason))
        assert got is expected, f"abort({task_id}) -> {got}, model says {expected}"

    @rule()
    def run_until_parked(self) -> None:
        self.model.run_until_parked(self.clock.now())
        self.trap.calls = 0
        got = self.run(self.harness.run_until_parked())
        assert got == self.model.wake(self.clock.now()), f"run_until_parked returned {got}"

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        """Between runs this harness runs nothing: a crash (drop the harness without closing
        it) or a clean close, then a new harness on the same store. Parked work stays parked;
        tasks a dead harness left running are taken over once their lease expired."""
        if clean:
            self.run(self.harness.close())
        self.harness = self.open_harness()
        self.model.open(self.clock.now())

    @precondition(lambda self: self.crashes < 4 and self.can_stop_a_run())
    @rule(data=st.data(), clean=st.booleans())
    def crash_mid_phase(self, data: st.DataObject, clean: bool) -> None:
        """Every runnable task is reserved; the others run on until parked while the victim
        is stopped at the start of its phase; then the process dies (or closes). The
        reservation (wake, consumed / expired keys) is durable; the phase's work is not. The
        next harness runs the phase again with the same wake."""
        self.crashes += 1
        victim = self.draw_victim(data)
        stop = self.draw_stop(data, victim)
        how = "close" if clean else "kill"
        event(f"crash mid-phase ({how}, {victim.status}, stopped at {stop})")
        self.reserve_all(victim, self.clock.now(), stop)
        self.run(self.crash_while_running(victim.id, clean, stop))
        if clean:
            self.model.release(victim)
        self.harness = self.open_harness()
        self.model.open(self.clock.now())  # a killed worker's task stays leased

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def engine_matches_model(self) -> None:
        TALLY["steps"] += 1
        h, now = self.observer(), self.clock.now()
        model_live = {t.id for t in self.model.live()}
        assert set(h.live_tasks) == model_live
        for t in self.model.tasks.values():
            record = h.task(t.id)
            assert record is not None, f"task {t.id} lost"
            where = f"task {t.id} ({t.status})"
            if t.status == "terminal":
                self.check_ended(h, t, record, where)
                continue
            assert record.abort_marked == t.abort_marked, where
            assert record.restarts == t.restarts, where
            state = record.state
            assert state.status == t.status, f"{where}: engine has {state.status}"
            assert state.checkpoint == t.checkpoint(), where
            memos = every_memo(h.get_doc, record)  # sealed pages too (engine.memo_pages)
            assert memos == t.memos, f"{where}: memos {memos}"
            if isinstance(state, Sleeping):
                assert [[k.signal, k.key] for k in state.signals] == [
                    [TOKENS[tok].name, key] for tok, key in t.keys
                ], where
                assert state.until == t.until, where
            if isinstance(state, Pending):
                wake = None if state.wake is None else state.wake.to_dict()
                assert wake == t.wake, where
            self.check_slots(t, record, h.list_docs(task_prefix(record.id)), where)
        assert h.wake() == self.model.wake(now), f"wake() {h.wake()}"
        assert h.task(UNKNOWN_IDS[0]) is None

    def check_slots(self, t: MTask, record: Any, moved: Any, where: str) -> None:
        """No value lost, changed or delivered after expiry; consumed and expired as modelled
        (wherever the engine keeps a slot: on the record, or moved to its document)."""
        every = task_slots(record, moved)
        assert set(every) == set(t.slots), f"{where}: slots {set(every)}"
        for name, s in t.slots.items():
            got = every[name]
            if s.value is None:
                assert not got.has_value, f"{where}: {name} holds a value it should not"
            else:
                assert got.has_value and got.value == {"n": s.value}, f"{where}: {name} changed"
                assert s.value == t.first_values[name]
                assert got.version == TOKENS["A" if name.startswith("mb.a/") else "B"].version
            assert got.expired == s.expired, f"{where}: {name} expired={got.expired}"
            assert not (got.expired and got.has_value), f"{where}: {name} value after expiry"
            assert got.consumed == s.consumed, f"{where}: {name} consumed={got.consumed}"
        assert len(t.signal_wakes) == len(set(t.signal_wakes)), f"{where}: a key woke twice"
        self.check_log(t, t.log, where)

    def check_log(self, t: MTask, log: list[dict[str, Any]], where: str) -> None:
        """What the task read equals the first delivered value; an expired key never yields
        one; every key woke the task at most once."""
        woken = [f"{e['wake']['signal']}/{e['wake']['key']}" for e in log if "signal" in e["wake"]]
        assert len(woken) == len(set(woken)), f"{where}: a consumed key woke the task again"
        for entry in log:
            for name, read in entry["reads"].items():
                if read is not None and read[0] == "value":
                    assert read[1] == t.first_values.get(name), f"{where}: {name} read {read}"
            assert entry["probe"] != "accepted", f"{where}: slept again on a used key"

    def check_ended(self, h: Harness, t: MTask, record: Any, where: str) -> None:
        state = record.state
        assert isinstance(state, Terminal), f"{where}: engine has {state.status}"
        assert record.signals == {} and record.memos == {}, where
        kind, detail = t.outcome  # type: ignore[misc]
        outcome = state.outcome
        if kind == "completed":
            assert isinstance(outcome, Completed), f"{where}: {outcome}"
            assert outcome.result == detail, where
            self.check_log(t, outcome.result["log"], where)
        elif kind == "aborted":
            assert isinstance(outcome, Aborted) and outcome.reason == detail, f"{where}: {outcome}"
        else:
            assert isinstance(outcome, Faulted) and outcome.error == detail, f"{where}: {outcome}"
        assert h.outcome(t.id) == outcome
        # Ended tasks are closed to signals, whatever the value.
        for value in ({"n": -1}, "x"):
            got = self.run(h.signal(t.id, TOKENS["A"], "s0k0", value))
            assert got == SignalResult.CLOSED, f"{where}: signal after the end -> {got}"


TALLY: Counter[str] = Counter()


report = pytest.fixture(scope="module", autouse=True)(checked_report("model-based", TALLY))


TestEngineModel = EngineMachine.TestCase
TestEngineModel.settings = machine_settings(
    examples=2_000, long_examples=20_000, steps=30, long_steps=40
)
