"""Crash everywhere on the AWS path: the process dies at every AWS call the services make
(DynamoDB through the store, SQS wake sends, Scheduler create / update / delete, S3), before
the request is sent and after the service applied it, in scenarios driven through the real
services (``run_session``, ``deliver``, ``deliver_webhook``, the sessions service) on moto.

Recovery is what AWS does: a worker invocation that died leaves its SQS batch undeleted and
the batch is delivered again; a caller whose API call died (a webhook sender, a client)
sends the same request again. After recovery, every time the queue is empty:

* every live task is parked with a path to wake (a timed park has its schedule for
  ``wake().at``, its ``at()`` expression naming the first whole minute at or after it, since
  Scheduler fires anywhere within that minute; a park on signals alone has none; nothing
  runnable is left without a wake);

and at the end of each scenario:

* every task ended exactly once and was never written after it ended (the ledger sees
  every commit that landed, also one whose answer the crash swallowed);
* a replay-unsafe ``execute()`` (the ``charge`` tool) ran at most once;
* every signal answered ``delivered`` (or ``duplicate``, after a lost answer) reached the
  task, first value kept; a signal after the deadline is ``closed`` and never read;
* no wake is left queued and no schedule is left armed.

``pytest -s`` prints the crash points of each scenario by operation.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from handler_fixtures import REPLY
from proof_fixtures import Account, CrashPlan, Deployment, moto_account

from bide import SignalResult
from bide.service.sessions import create_session, submit
from bide.service.signals import deliver, deliver_webhook

JSON = {"content-type": "application/json"}
HOUR = 3600.0


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    with moto_account() as found:
        yield found


# --- scenarios ---------------------------------------------------------------------------------
# Each drives one deployment from the outside and returns what the checks need. Every step
# is one a real caller would retry after a lost answer, so it converges after any crash.


def signal(d: Deployment, task_id: str, key: str, text: str) -> SignalResult:
    decision = d.external(
        lambda: deliver(d.deps, d.session_id, task_id, REPLY.name, key, {"text": text})
    )
    return decision.result


def webhook(d: Deployment, task_id: str, text: str) -> SignalResult:
    token = d.probe.minted[task_id].token
    body = f'{{"text": "{text}"}}'.encode()
    decision, _ = d.external(lambda: deliver_webhook(d.deps, token, JSON, body))
    return decision.result


def result_of(d: Deployment, task_id: str) -> Any:
    record = d.task(task_id)
    assert record.state.status == "terminal", record.state
    return record.state.outcome.result  # type: ignore[union-attr]


def scenario_webhook(d: Deployment) -> None:
    """A tool mints a webhook and parks on it; the webhook's call resumes it."""
    call = d.start_tool("await_hook_safe", {})
    d.drain()
    assert d.task(call).state.status == "sleeping"
    first = webhook(d, call, "green")
    assert first in (SignalResult.DELIVERED, SignalResult.DUPLICATE)  # duplicate: answer lost
    d.drain()
    assert result_of(d, call)["content"][0]["text"] == "hook said green"
    assert webhook(d, call, "late") is SignalResult.CLOSED  # the call ended


def scenario_timer_then_signal(d: Deployment) -> None:
    """Sleep on time (schedule created); an early value and a duplicate arrive (the worker
    re-arms: schedule updated); the alarm fires, the next sleep finds the early value at
    once and the task ends (schedule deleted)."""
    napper = next(k for k in d.deps.app.tasks if k.name == "test.napper")
    rounds = [{"after": 60}, {"keys": ["k"], "after": 2 * HOUR}]
    task = d.start_task(napper, {"rounds": rounds}, key="napper")
    d.drain()
    assert d.schedule() is not None
    assert signal(d, task, "k", "early") in (SignalResult.DELIVERED, SignalResult.DUPLICATE)
    assert signal(d, task, "k", "second") is SignalResult.DUPLICATE
    d.drain()
    d.advance(60)
    d.drain()
    got = result_of(d, task)
    assert got["values"] == {"k": "early"}, got
    assert got["round"] == 1 and got["wake"]["reason"] == "signal"


def scenario_expiry(d: Deployment) -> None:
    """A value arriving after the deadline is refused even before the alarm fires; the task
    wakes expired and never sees it."""
    napper = next(k for k in d.deps.app.tasks if k.name == "test.napper")
    task = d.start_task(napper, {"rounds": [{"keys": ["k"], "after": 60}]}, key="napper")
    d.drain()
    d.clock.advance(61)  # the Scheduler is late
    assert signal(d, task, "k", "too late") is SignalResult.CLOSED
    d.drain()  # the refused signal's own wake: harmless
    d.advance(0)  # now it fires
    d.drain()
    got = result_of(d, task)
    assert got["values"] == {} and got["wake"] == {"reason": "expired"}, got
    assert signal(d, task, "k", "later still") is SignalResult.CLOSED


def scenario_charge(d: Deployment) -> None:
    """A replay-unsafe tool: it runs at most once; when a crash cut its run off after the
    intent was stored, the call ends ``interrupted`` instead of charging again."""
    call = d.start_tool("charge", {})
    d.drain()
    got = result_of(d, call)
    runs = d.probe.executions["charge"]
    if got.get("code") == "interrupted":
        assert runs <= 1 and d.crashes, got
    else:
        assert (runs, got["content"][0]["text"], got["is_error"]) == (1, "charged", False), got


def scenario_agent(d: Deployment) -> None:
    """A whole session: create, submit (the model calls the webhook tool), the webhook
    resumes the call, the model answers. One tool result, one answer, submission done."""
    sid = d.session_id
    d.external(lambda: asyncio.run(create_session(d.deps, sid)))
    d.external(lambda: asyncio.run(submit(d.deps, sid, "call await_hook_safe {}", request_id="r1")))
    d.drain()
    (call,) = list(d.probe.minted)
    assert webhook(d, call, "green") in (SignalResult.DELIVERED, SignalResult.DUPLICATE)
    d.drain()
    entries = [doc.body for doc in d.raw.list_docs(sid, "conv/main/e/")]
    assert [e["type"] for e in entries] == ["user", "assistant", "tool_result", "assistant"]
    (tool_call,) = entries[1]["tool_calls"]
    results = [e for e in entries if e["type"] == "tool_result"]
    assert [r["call_id"] for r in results] == [tool_call["id"]]
    assert results[0]["text"] == "hook said green"
    (submission,) = [doc.body for doc in d.raw.list_docs(sid, "conv/main/s/")]
    assert submission["status"] == "done"


def scenario_large_value(d: Deployment) -> None:
    """Values too large for an item go to S3 (the store's offload threshold is lowered so a
    few KB do): a large signal value makes the parked call's record large (put by the
    signal path, read back by the worker's load), and so does its large result."""
    d.probe.big = "".join(chr(0x41 + i % 26) for i in range(OFFLOAD_THRESHOLD + 500))
    call = d.start_tool("fetch_big_safe", {})
    d.drain()
    value = "v" * (OFFLOAD_THRESHOLD + 100)
    assert signal(d, call, "go", value) in (SignalResult.DELIVERED, SignalResult.DUPLICATE)
    d.drain()
    assert result_of(d, call)["content"][0]["text"] == d.probe.big
    listed = d.account.s3.list_objects_v2(Bucket=d.account.bucket, Prefix=f"{d.session_id}/")
    assert listed["KeyCount"] >= 1, "the result was not offloaded"


OFFLOAD_THRESHOLD = 2_000
SCENARIOS: dict[str, Callable[[Deployment], None]] = {
    "webhook": scenario_webhook,
    "timer_then_signal": scenario_timer_then_signal,
    "expiry": scenario_expiry,
    "charge": scenario_charge,
    "agent": scenario_agent,
    "large_value": scenario_large_value,
}


# --- the sweep ---------------------------------------------------------------------------------


@dataclass
class Sweep:
    calls: list[str]  # the AWS calls of a run without faults, in order
    points: int
    worker_runs: int  # worker invocations over all runs, redeliveries included
    stale_schedules: int  # runs that left a schedule nothing needed (fired harmlessly)
    seconds: float


def run_once(account: Account, name: str, plan: CrashPlan) -> Deployment:
    threshold = OFFLOAD_THRESHOLD if name == "large_value" else None
    d = Deployment.create(account, plan, offload_threshold=threshold)
    try:
        SCENARIOS[name](d)
        check_end(d)
    finally:
        d.close()
    return d


def check_end(d: Deployment) -> None:
    """What must hold after the scenario, whatever crashed."""
    d.drain()  # e.g. the wake a refused late signal armed: harmless
    live = d.raw.load(d.session_id).tasks
    assert not live, f"tasks left: {sorted(live)} (crashes: {d.crashes})"
    if d.fire_stale_schedule():
        d.stale_schedules += 1
        assert d.schedule() is None
    leftovers = d.account.sqs.receive_message(QueueUrl=d.queue_url, MaxNumberOfMessages=10)
    assert not leftovers.get("Messages"), "a wake is still queued"
    # Every task ended exactly once: one terminal write each, never written after.
    assert d.ledger.endings and set(d.ledger.endings.values()) == {1}, d.ledger.endings
    assert d.probe.executions["charge"] <= 1, "a replay-unsafe execute ran twice"


def sweep(account: Account, name: str) -> Sweep:
    started = time.perf_counter()
    baseline = run_once(account, name, CrashPlan())
    assert baseline.crashes == []
    calls = list(baseline.plan.calls)
    points = runs = stale = 0
    for fail_at in range(1, len(calls) + 1):
        for when in ("before", "after"):
            plan = CrashPlan(fail_at, when)  # type: ignore[arg-type]
            d = run_once(account, name, plan)
            assert plan.fired == f"{when} #{fail_at} {calls[fail_at - 1]}", plan.fired
            assert len(d.crashes) == 1, d.crashes
            points += 1
            runs += d.worker_runs
            stale += d.stale_schedules
    return Sweep(calls, points, runs, stale, time.perf_counter() - started)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_crash_sweep_at_every_aws_call(account: Account, name: str) -> None:
    found = sweep(account, name)
    by_op = ", ".join(f"{op} x{n}" for op, n in sorted(Counter(found.calls).items()))
    order = " ".join(f"{i}:{op}" for i, op in enumerate(found.calls, 1))
    print(
        f"\n{name}: {len(found.calls)} AWS calls ({by_op}) -> {found.points} crash points "
        f"(each call, before and after), all recovered; {found.worker_runs} worker runs, "
        f"{found.stale_schedules} harmless stale schedules, {found.seconds:.1f}s"
        f"\n  calls in order: {order}"
    )
