"""The proofs on the strict AWS twin: many sessions over many simulated hours, driven through
the real services (the worker ``handle_worker`` behind the FIFO event source mapping, signal
delivery ``bide.service.signals.deliver``, Scheduler alarms, DynamoDB on moto), with faults of
every kind the twin injects or the outside world causes, all drawn from one seeded RNG:

* alarms fire anywhere in their minute and sometimes twice (the Scheduler twin);
* duplicate wake messages (the same wake twice with one deduplication id, the same wake
  re-sent with a fresh id) and spurious early alarm wakes (before any deadline);
* signal values in random order and at random times (early, while waiting), second values
  for a key (refused ``duplicate``), re-sent values, values after a session ended;
* DynamoDB throttles and transaction conflicts (the DynamoDB twin's rates);
* phases awaiting a long simulated call that the invocation's deadline cuts (the worker
  stops cleanly before the function's timeout; the session is re-queued).

Each session runs a script (``twin_proof_kit``): timed sleeps from seconds to hours, waits on
signal keys with deadlines, a child task, a replay-unsafe tool call counted by a probe, slow
phases. At the end every session must have reached the state of a fault-free SQLite reference
run of its script (the same log of what it read; ``pay`` ran exactly once per call), and:

* **0 lost**: every timed or signalled wake ran within :data:`WAKE_BOUND` of being due, and
  every session ended;
* **0 stuck**: no task left live, no wake message left queued, no schedule left armed,
  nothing in the dead-letter queue;
* **0 doubled**: a replay-unsafe effect ran exactly once per completed call; a call whose
  ``pay`` was cut in flight (a kill at the timeout, or the worker's clean stop) ends
  ``interrupted`` with its one payment made, never run twice; a task a killed invocation left
  running is taken over only once its lease (``Deps.lease_seconds``) ran out.

Fixed sessions make the rare paths certain (``twin_proof_kit``): a ``pay`` that outlasts any
invocation (every run cuts it; it must end ``interrupted``), and in the run whose invocations
are killed, a phase that outlasts any invocation (it must end faulted at the restart limit).
The figures line counts both.

CI size: 40 sessions; ``BIDE_LONG_PROOF=1`` runs 100 (moto slows as its table grows).
``pytest -s`` prints the figures.

The fleet (``twin_fleet``) runs the scripts on the twin and records what happened; this
module judges each run against the reference, step by step, and prints its figures line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.register_assert_rewrite("twin_fleet")
from twin_fixtures import STACK_CONFIG  # noqa: E402
from twin_fleet import Fleet, run_fleet  # noqa: E402
from twin_proof_kit import (  # noqa: E402
    Script,
    doomed_script,
    expected_log,
    is_interrupted,
    pay_cut_script,
    reference_run,
)

from bide.engine.harness import DEFAULT_RESTART_LIMIT  # noqa: E402

LONG = os.environ.get("BIDE_LONG_PROOF") == "1"
SESSIONS = 100 if LONG else 40
SEED = 20260101
# How late a due session may run: the alarm names the first whole minute at or after the
# deadline (< 60 s) and fires anywhere in it (< 60 s); then a batch may hold it behind other
# sessions' work for one invocation (300 s) and a failed run is retried with backoff.
SCHEDULER_BOUND = 120.0
WAKE_BOUND = SCHEDULER_BOUND + 300.0 + 60.0


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    # The worker logs every wake as JSON; simulated hours of it need not print.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@dataclass
class Verdict:
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    restart_limited: list[str] = field(default_factory=list)  # doomed sessions that got there
    after_lease: list[str] = field(default_factory=list)  # pay calls taken over after the lease


RESTART_LIMIT_REACHED = {"status": "faulted", "error": "restart limit reached"}


def judge(fleet: Fleet, *, bound: float = WAKE_BOUND) -> Verdict:
    """Compare every session with its reference run and collect the invariant breaches
    (``bound``: how late a due wake may run)."""
    verdict = Verdict()
    for script in fleet.scripts:
        sid = script.session_id
        got = fleet.logs[sid]
        if fleet.live[sid]:
            verdict.stuck.append(f"{sid}: live tasks {fleet.live[sid]}")
        if script.doomed:
            if got == RESTART_LIMIT_REACHED:
                verdict.restart_limited.append(sid)
            else:
                verdict.wrong.append(f"{sid}: {got}, not faulted at the restart limit")
            continue
        want, paid = reference_run(script)
        assert want == expected_log(script), f"the reference itself is off for {sid}"
        if not isinstance(got, dict):
            verdict.lost.append(f"{sid}: never ended ({got})")
            continue
        judge_log(fleet, script, got["log"], want, verdict)
        for key, ran in sorted(paid.items()):
            assert ran == 1, f"the reference paid {ran}x for {key}"
    for sid, why, late in fleet.probe.latencies:
        if late > bound:
            verdict.lost.append(f"{sid}: a {why} wake ran {late:.0f} s after it was due")
        if late < -1e-6:
            verdict.wrong.append(f"{sid}: a {why} wake ran {-late:.3f} s before its deadline")
    if fleet.leftover_wakes:
        verdict.stuck.append(f"wakes left queued: {fleet.leftover_wakes}")
    if fleet.schedules_left:
        verdict.stuck.append(f"schedules left armed: {fleet.schedules_left}")
    if fleet.scheduler_dead:
        verdict.lost.append(f"{fleet.scheduler_dead} alarms dead-lettered by the Scheduler")
    return verdict


def judge_log(
    fleet: Fleet, script: Script, log: list[Any], want: list[Any], verdict: Verdict
) -> None:
    """One session's log against its reference, step by step. An ``effect`` may end
    ``interrupted`` only where its ``pay`` was cut in flight (or cut before it began), with at
    most one payment; a completed one paid exactly once. A ``pay`` call taken over from a
    killed invocation was taken over no sooner than its lease ran out."""
    sid = script.session_id
    if len(log) != len(want):
        verdict.wrong.append(f"{sid}: {log} != reference {want}")
        return
    for i, (entry, expected) in enumerate(zip(log, want, strict=True)):
        if expected[0] != "effect":
            if entry != expected:
                verdict.wrong.append(f"{sid} step {i}: {entry} != reference {expected}")
            continue
        ran = fleet.probe.paid[(sid, i)]
        if is_interrupted(entry):
            verdict.interrupted.append(f"{sid} step {i}")
            if ran > 1:
                verdict.doubled.append(f"{sid} step {i}: interrupted, yet pay ran {ran}x")
            elif ran == 1 and (sid, i) not in fleet.probe.pay_cut:
                verdict.wrong.append(f"{sid} step {i}: interrupted, yet pay was never cut")
        elif entry != expected:
            verdict.wrong.append(f"{sid} step {i}: {entry} != reference {expected}")
        elif ran != 1:
            verdict.doubled.append(f"{sid} step {i}: completed, pay ran {ran}x (not once)")
        taken = fleet.takeovers.get((sid, i))
        if taken is not None and ran:
            assert fleet.lease is not None, "a takeover without a lease"
            # The intent commit that renewed the lease came just before pay began.
            lease_end = fleet.probe.pay_started[(sid, i)] + fleet.lease
            if taken < lease_end - 1.0:
                verdict.doubled.append(
                    f"{sid} step {i}: taken over {lease_end - taken:.0f} s before its lease ended"
                )
            else:
                verdict.after_lease.append(f"{sid} step {i}")


def summary(fleet: Fleet, verdict: Verdict, title: str, bound: float = WAKE_BOUND) -> str:
    by_kind = ", ".join(f"{k} {n}" for k, n in sorted(fleet.faults.items()) if n)
    latencies = [late for _, _, late in fleet.probe.latencies]
    outcomes = ", ".join(f"{k} {n}" for k, n in sorted(fleet.outcomes.items()))
    return (
        f"\n{title}: {len(fleet.scripts)} sessions over {fleet.hours:.1f} simulated hours, "
        f"{fleet.invocations} worker invocations ({outcomes}), {fleet.wall:.1f} s wall"
        f"\n  faults injected: {by_kind}"
        f"\n  signal results: {dict(sorted(fleet.results.items()))}"
        f"\n  wakes checked {len(latencies)}, latest {max(latencies, default=0):.0f} s after due"
        f" (bound {bound:.0f} s)"
        f"\n  pays cut in flight {fleet.faults['pays cut in flight']}, interrupted "
        f"{len(verdict.interrupted)}, taken over after the lease {len(verdict.after_lease)}, "
        f"restart limit reached {len(verdict.restart_limited)}"
        f"\n  lost {len(verdict.lost)}, stuck {len(verdict.stuck)}, "
        f"doubled {len(verdict.doubled)}, wrong {len(verdict.wrong)}"
    )


def test_many_sessions_over_many_hours_end_as_the_reference_with_nothing_lost() -> None:
    fleet = run_fleet(SEED, SESSIONS, extras=(pay_cut_script("s-pay-cut"),))
    verdict = judge(fleet)
    print(summary(fleet, verdict, "twin proof"))
    assert "s-pay-cut step 0" in verdict.interrupted, "the cut pay did not end interrupted"
    assert not verdict.lost, verdict.lost
    assert not verdict.stuck, verdict.stuck
    assert not verdict.doubled, verdict.doubled
    assert not verdict.wrong, verdict.wrong
    assert not fleet.dead_letters, fleet.dead_letters
    # The faults really happened (a run that injected nothing proves nothing).
    for kind in (
        "alarm fired twice",
        "duplicate wakes",
        "re-sent wakes",
        "early alarms",
        "signal duplicates",
        "TransactionCanceledException",
        "phases cut mid-call",
        "pays cut in flight",
    ):
        assert fleet.faults[kind] > 0, f"no {kind} in this run"
    assert fleet.results["late:closed"] > 0


def test_a_poison_session_ends_in_the_dead_letter_queue_and_delays_no_other() -> None:
    poison = "s-poison"
    # No store faults here: any failed wake of another session is the poison's doing.
    fleet = run_fleet(SEED + 1, 8, poison=poison, store_faults=False)
    shared = sum(1 for groups in fleet.batches if poison in groups and len(groups) > 1)
    assert shared > 0, "the poison never shared a batch: nothing shown"
    verdict = judge(fleet)
    print(summary(fleet, verdict, "poison session"))
    print(f"  batches holding the poison's wake and another session's: {shared}")
    assert not verdict.lost and not verdict.stuck, (verdict.lost, verdict.stuck)
    # Not delayed: every other session's wakes ran within the Scheduler's own bound (plus
    # the poison's in-process retries when it shared a batch), as without the poison.
    late = [(sid, why, t) for sid, why, t in fleet.probe.latencies if t > SCHEDULER_BOUND + 30]
    assert not late, late
    assert set(fleet.failed_wakes) == {poison}, fleet.failed_wakes  # FIFO order is per group
    assert not verdict.doubled and not verdict.wrong, (verdict.doubled, verdict.wrong)
    # Every wake of the poison session, and only those, ended in the dead-letter queue on
    # its last attempt, with the reason (set aside by the worker, not by SQS's redrive).
    assert len(fleet.dead_letters) == fleet.faults["poison wakes"] + 1  # + the submit
    for wake, reason in fleet.dead_letters:
        assert json.loads(wake)["session_id"] == poison
        assert reason is not None and reason["error_type"] == "RuntimeError"
        assert "poisoned session" in reason["error"]
        assert reason["receives"] == STACK_CONFIG.queue.max_receive_count


def test_a_run_is_reproducible_from_its_seed() -> None:
    first, second = (run_fleet(SEED + 2, 6) for _ in range(2))
    assert first.invocations == second.invocations
    assert first.faults == second.faults and first.results == second.results
    assert first.logs == second.logs and first.probe.latencies == second.probe.latencies


def test_invocations_killed_at_their_timeout_mid_phase_lose_and_double_nothing() -> None:
    """The worker's clean stop comes too late here (a margin past the timeout: as if a call
    blocked through it), so Lambda kills invocations mid-phase: the wake is not deleted and
    comes back after the queue's visibility timeout, and the next worker recovers the task
    the dead one left running. Later, but nothing lost, stuck or doubled.

    The queue's visibility timeout is as short as AWS allows (the function's timeout), so a
    killed wake comes back while the dead invocation's lease is still live: the worker must
    leave the task alone until the lease ends. A ``pay`` killed in flight ends
    ``interrupted`` with one payment; a phase killed at every timeout reaches the restart
    limit and faults, and its wakes never end in the dead-letter queue."""
    variables = {**STACK_CONFIG.function.environment, "BIDE_SAFETY_MARGIN_MS": "-5000"}
    function = dataclasses.replace(STACK_CONFIG.function, environment=variables)
    queue = dataclasses.replace(STACK_CONFIG.queue, visibility_timeout=int(function.timeout))
    config = dataclasses.replace(STACK_CONFIG, function=function, queue=queue)
    extras = (pay_cut_script("s-pay-cut"), doomed_script("s-doomed"))
    fleet = run_fleet(SEED + 3, 12, config=config, slow_every=1, extras=extras)
    bound = WAKE_BOUND + queue.visibility_timeout + (fleet.lease or 0.0)
    verdict = judge(fleet, bound=bound)
    print(summary(fleet, verdict, "killed at the timeout", bound))
    assert fleet.outcomes["timeout"] > 0, "no invocation was killed: nothing shown"
    assert ("s-pay-cut", 0) in fleet.probe.pay_cut, "pay was never killed in flight"
    assert "s-pay-cut step 0" in verdict.interrupted, "the killed pay did not end interrupted"
    assert "s-pay-cut step 0" in verdict.after_lease, "the killed pay was never taken over"
    assert verdict.restart_limited == ["s-doomed"], verdict.restart_limited
    # Its first run and one per restart the limit allows, each killed; then it faulted.
    assert fleet.probe.cuts["s-doomed"] == DEFAULT_RESTART_LIMIT + 1, fleet.probe.cuts
    assert not verdict.lost and not verdict.stuck, (verdict.lost, verdict.stuck)
    assert not verdict.doubled and not verdict.wrong, (verdict.doubled, verdict.wrong)
    assert not fleet.dead_letters, fleet.dead_letters
