"""The worker function: SQS (and Scheduler-shaped) events against moto.

Alarms (none for a signal-only park, exactly one for a timed park, updated, deleted), harmless
empty wakes, partial batch failures, time running short, every no-lost-wakeup interleaving,
two workers racing on one session, and a 1 MB tool result across a park/resume cycle."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

# Before importing them: their asserts get pytest's messages (other modules register the same).
from aws_fixtures import unique
from handler_fixtures import (
    REPLY,
    Bench,
    FakeContext,
    aws_fixture,
    bench_fixture,
    http_event,
    response_json,
    run,
    signal_event,
)

from bide.aws.scheduler import at_expression, schedule_name
from bide.aws.sqs import parse_wake
from bide.engine.harness import Harness
from bide.service import observability as obs
from bide.service import worker_batch
from bide.service.http import handle_api, handle_signal, handle_worker
from bide.service.sessions import create_session, submit

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

SIGNAL = REPLY.name
HOUR = 3600.0


def parked(b: Bench, rounds: list[dict]) -> tuple[str, str]:
    sid = unique("s")
    task_id = b.start_napper(rounds, sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    assert b.queued() == []
    return sid, task_id


def deliver(b: Bench, sid: str, task_id: str, text: str, key: str = "k") -> int:
    event = signal_event(sid, task_id, SIGNAL, key, {"text": text})
    response = run(handle_signal(b.deps, event, None))
    return response["statusCode"]


def read_view(b: Bench, sid: str) -> dict:
    """The session view, through the sessions API."""
    response = run(handle_api(b.deps, http_event("GET", f"/sessions/{sid}"), None))
    assert response["statusCode"] == 200
    return response_json(response)


def result(b: Bench, sid: str, task_id: str) -> dict:
    record = b.task(sid, task_id)
    assert record.state.status == "terminal", record.state
    return record.state.outcome.result


# --- alarms -------------------------------------------------------------------------------------


def test_a_signal_only_park_leaves_no_schedule(bench: Bench) -> None:
    parked(bench, [{"keys": ["k"]}])
    assert bench.schedules() == []
    assert all(r["batchItemFailures"] == [] for r in bench.responses)


def test_a_timed_park_leaves_exactly_one_schedule_at_the_right_time(bench: Bench) -> None:
    start = bench.clock.now()
    sid, _ = parked(bench, [{"keys": ["k"], "after": HOUR}])
    (schedule,) = bench.schedules()
    assert schedule["Name"] == schedule_name(sid)
    assert schedule["GroupName"] == bench.group
    assert (
        schedule["ScheduleExpression"] == "at(2026-01-01T01:00:00)" == at_expression(start + HOUR)
    )
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["ActionAfterCompletion"] == "DELETE"
    target = schedule["Target"]
    assert target["Arn"] == bench.queue_arn
    assert target["SqsParameters"] == {"MessageGroupId": sid}
    payload = json.loads(target["Input"])  # what the Scheduler will send as the SQS body
    assert parse_wake(target["Input"]) == (sid, "alarm")
    assert payload.get("at", start + HOUR) == start + HOUR


def test_re_parking_updates_the_schedule_and_ending_deletes_it(bench: Bench) -> None:
    start = bench.clock.now()
    sid, task_id = parked(bench, [{"after": 60}, {"keys": ["k"], "after": 2 * HOUR}])
    (first,) = bench.schedules()
    assert first["ScheduleExpression"] == at_expression(start + 60)

    bench.clock.advance(60)
    bench.fire_alarm(sid)  # what the Scheduler sends: its target Input as the SQS body
    bench.drain()
    (second,) = bench.schedules()
    assert second["Name"] == first["Name"]
    assert second["ScheduleExpression"] == at_expression(start + 60 + 2 * HOUR)
    assert bench.task(sid, task_id).state.checkpoint == {"phase": "woke", "round": 1}

    assert deliver(bench, sid, task_id, "done") == 202
    bench.drain()
    assert result(bench, sid, task_id)["values"] == {"k": "done"}
    assert bench.schedules() == []


def test_a_scheduler_shaped_wake_runs_the_session_and_counts_as_alarm(bench: Bench, capsys) -> None:
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR}])
    bench.clock.advance(HOUR)
    capsys.readouterr()
    bench.fire_alarm(sid)
    bench.drain()
    assert result(bench, sid, task_id)["wake"] == {"reason": "expired"}
    assert bench.schedules() == []
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert {b["reason"] for b in blobs if "Wakes" in b} == {"alarm"}
    # The schedule that fired deleted itself (ActionAfterCompletion DELETE): no DeleteSchedule.
    assert {b["action"] for b in blobs if "WorkerActions" in b} == {"idle"}


def test_an_early_alarm_just_arms_again(bench: Bench) -> None:
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR}])
    (before,) = bench.schedules()
    seq = bench.seq(sid)
    bench.fire_alarm(sid)  # e.g. a clock skew: nothing is due yet
    bench.drain()
    (after,) = bench.schedules()
    assert after["ScheduleExpression"] == before["ScheduleExpression"]
    assert bench.seq(sid) == seq
    assert bench.task(sid, task_id).state.status == "sleeping"


# --- harmless wakes, failures, time ------------------------------------------------------------


def test_a_wake_that_finds_nothing_runnable_writes_nothing(bench: Bench) -> None:
    sid, task_id = parked(bench, [{"keys": ["k"], "after": HOUR}])
    seq, record = bench.seq(sid), bench.task(sid, task_id)
    (schedule,) = bench.schedules()
    for reason in ("signal", "alarm", "submit", "still-active"):
        bench.deps.queue.wake(sid, reason)
    bench.drain()
    assert bench.seq(sid) == seq and bench.task(sid, task_id) == record
    assert [s["ScheduleExpression"] for s in bench.schedules()] == [schedule["ScheduleExpression"]]
    # A session that does not exist: no writes, no alarm.
    ghost = unique("s")
    bench.deps.queue.wake(ghost, "signal")
    bench.drain()
    assert bench.seq(ghost) == 0 and len(bench.schedules()) == 1


def test_partial_batch_failure_reports_the_failed_session_only(bench: Bench, monkeypatch) -> None:
    good, _ = parked(bench, [{"keys": ["k"]}])
    bad, later = unique("s-bad"), unique("s")
    ran: list[str] = []
    slept: list[float] = []
    real = worker_batch.run_session

    async def flaky(deps, session_id, **kw):
        ran.append(session_id)
        if session_id == bad:
            raise RuntimeError("DynamoDB is having a bad day")
        return await real(deps, session_id, **kw)

    async def sleep(seconds: float) -> None:
        if seconds > 60:  # the invocation's deadline, far away: cancelled once the run ends
            await asyncio.Event().wait()
        slept.append(seconds)
        bench.clock.advance(seconds)

    monkeypatch.setattr(worker_batch, "run_session", flaky)
    monkeypatch.setattr(bench.deps, "sleep", sleep)
    records = [
        {"messageId": "m1", "body": json.dumps({"session_id": good, "reason": "signal"})},
        {"messageId": "m2", "body": "not json"},  # malformed: dropped, never retried
        {"messageId": "m3", "body": json.dumps({"session_id": bad, "reason": "signal"})},
        {"messageId": "m4", "body": json.dumps({"session_id": later, "reason": "signal"})},
        {"messageId": "m5", "body": json.dumps({"session_id": bad, "reason": "alarm"})},
        {"messageId": "m6", "body": json.dumps({"session_id": good, "reason": "alarm"})},
    ]
    response = run(handle_worker(bench.deps, {"Records": records}, FakeContext()))
    # Only the failed session's records fail (FIFO order holds per message group): m5 comes
    # after m3 in bad's group and does not run; the other sessions run.
    assert response == {"batchItemFailures": [{"itemIdentifier": m} for m in ("m3", "m5")]}
    # The failed wake was retried in-process with a short backoff before giving up.
    assert ran == [good, bad, bad, bad, later, good]
    assert slept == list(worker_batch.RETRY_BACKOFF_SECONDS)
    assert run(handle_worker(bench.deps, {"Records": []}, None)) == {"batchItemFailures": []}


def test_when_time_runs_short_the_session_is_requeued_not_started(bench: Bench) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"keys": ["k"]}], sid)
    messages = bench.receive()
    seq = bench.seq(sid)
    # 10 s left, 20 s safety margin: start nothing, hand the session to a fresh invocation.
    response = run(handle_worker(bench.deps, bench.sqs_event(messages), FakeContext(10_000)))
    assert response == {"batchItemFailures": []}
    for m in messages:
        bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=m["ReceiptHandle"])
    assert bench.seq(sid) == seq
    assert bench.queued() == [{"session_id": sid, "reason": "still-active"}]
    bench.drain()
    assert bench.task(sid, task_id).state.status == "sleeping"


# --- no lost wakeup -----------------------------------------------------------------------------


def test_no_lost_wakeup_signal_before_the_worker_loads(bench: Bench, monkeypatch) -> None:
    sid, task_id = parked(bench, [{"keys": ["k"]}])
    real_open = Harness.open
    delivered: list[int] = []

    async def open_after_a_signal(self):
        if not delivered:
            event = signal_event(sid, task_id, SIGNAL, "k", {"text": "early"})
            delivered.append((await handle_signal(bench.deps, event, None))["statusCode"])
        await real_open(self)

    monkeypatch.setattr(Harness, "open", open_after_a_signal)
    bench.deps.queue.wake(sid, "alarm")  # some wake is about to run the session
    bench.drain()
    assert delivered == [202]
    assert result(bench, sid, task_id)["values"] == {"k": "early"}
    assert bench.schedules() == []


def test_no_lost_wakeup_signal_mid_run(bench: Bench) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"keys": ["k"]}], sid)
    messages = bench.receive()

    async def scenario() -> int:
        bench.probe.arm_pause()  # the napper's first run waits here before parking
        worker = asyncio.ensure_future(
            handle_worker(bench.deps, bench.sqs_event(messages), FakeContext())
        )
        await bench.probe.entered.wait()
        event = signal_event(sid, task_id, SIGNAL, "k", {"text": "mid-run"})
        status = (await handle_signal(bench.deps, event, None))["statusCode"]
        bench.probe.release.set()
        assert (await worker) == {"batchItemFailures": []}
        return status

    assert run(scenario()) == 202
    for m in messages:
        bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=m["ReceiptHandle"])
    # The running worker noticed (its park commit conflicted, it reloaded and found the value):
    # the task is done before any other wake ran.
    assert result(bench, sid, task_id)["values"] == {"k": "mid-run"}
    bench.drain()  # the signal's own wakes: harmless
    assert bench.schedules() == []


@pytest.mark.parametrize("after", [None, HOUR])
def test_no_lost_wakeup_signal_between_final_commit_and_arming(
    bench: Bench, monkeypatch, after
) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"keys": ["k"], "after": after}], sid)
    real_close = Harness.close
    delivered: list[int] = []

    async def close_then_signal(self):
        # run_session: run_until_parked (final commit) -> close -> act_on_wake (arming)
        await real_close(self)
        if not delivered:
            event = signal_event(sid, task_id, SIGNAL, "k", {"text": "just too late"})
            delivered.append((await handle_signal(bench.deps, event, None))["statusCode"])

    monkeypatch.setattr(Harness, "close", close_then_signal)
    bench.drain()
    assert delivered == [202]
    assert result(bench, sid, task_id)["values"] == {"k": "just too late"}
    assert bench.schedules() == []  # the stale "armed" of the first run was undone


def test_no_lost_wakeup_signal_after_the_worker_exited(bench: Bench) -> None:
    sid, task_id = parked(bench, [{"keys": ["k"]}])
    assert deliver(bench, sid, task_id, "later") == 202
    bench.drain()
    assert result(bench, sid, task_id)["values"] == {"k": "later"}


def test_no_lost_wakeup_when_a_worker_runs_between_the_store_and_the_wake(
    bench: Bench, monkeypatch
) -> None:
    # The one wake is queued after the value is stored, so any worker that runs in between
    # (woken by something else) finds the value; the signal's own wake then runs a session
    # with nothing to do. Nothing is lost and nothing runs twice.
    sid, task_id = parked(bench, [{"keys": ["k"]}])
    real_wake = bench.deps.queue.wake
    batches: list[int] = []

    def worker_first(session_id: str, reason: str, **focus: str | None) -> None:
        real_wake(session_id, "alarm")  # some other wake, queued just before the signal's
        batches.append(bench.drain_in_thread())
        real_wake(session_id, reason, **focus)

    monkeypatch.setattr(bench.deps.queue, "wake", worker_first)
    assert deliver(bench, sid, task_id, "raced") == 202
    monkeypatch.undo()
    assert batches == [1]
    assert result(bench, sid, task_id)["values"] == {"k": "raced"}  # that worker found it
    seq = bench.seq(sid)
    bench.drain()
    assert bench.seq(sid) == seq  # the signal's own wake: nothing left to do


# --- racing workers -----------------------------------------------------------------------------


def race_threads(b: Bench, messages: list[dict]) -> None:
    """Two workers in two threads (two event loops), released together."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            asyncio.run(handle_worker(b.deps, b.sqs_event(messages), FakeContext()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def race_interleaved(b: Bench, messages: list[dict]) -> None:
    """Two workers on one event loop: each runs until it awaits, then the other goes on."""

    async def both() -> None:
        event = b.sqs_event(messages)
        await asyncio.gather(
            handle_worker(b.deps, event, FakeContext()),
            handle_worker(b.deps, event, FakeContext()),
        )

    run(both())


@pytest.mark.parametrize("race", [race_threads, race_interleaved])
def test_two_workers_racing_on_one_session_leave_one_consistent_history(
    bench: Bench, monkeypatch, race
) -> None:
    counted: list[str] = []
    real_count = obs.count
    monkeypatch.setattr(
        obs, "count", lambda name, *a, **kw: counted.append(name) or real_count(name, *a, **kw)
    )
    for _ in range(3):
        sid = run(create_session(bench.deps))
        run(submit(bench.deps, sid, "call charge", request_id="r1"))
        messages = bench.receive()
        for m in messages:
            bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=m["ReceiptHandle"])
        race(bench, messages)
        # A worker that lost every retry reports its record failed and SQS delivers it again:
        # one more wake stands in for that redelivery (harmless when nothing failed).
        bench.deps.queue.wake(sid, "alarm")
        bench.drain()

        assert bench.probe.executions["charge"] <= 1  # replay-unsafe: never twice
        bench.probe.executions["charge"] = 0
        view = read_view(bench, sid)
        entries = view["entries"]
        assert [e["type"] for e in entries] == ["user", "assistant", "tool_result", "assistant"]
        (call,) = entries[1]["tool_calls"]
        results = [e for e in entries if e["type"] == "tool_result"]
        assert [r["call_id"] for r in results] == [call["id"]]  # resolved exactly once
        assert view["tasks"] == [] and view["running"] is False
        (submission,) = view["submissions"]
        assert submission["status"] == "done"
    if race is race_interleaved:
        assert obs.COMMIT_CONFLICTS in counted  # they did collide, every time the same way


# --- large values -------------------------------------------------------------------------------


def test_a_1mb_tool_result_survives_a_park_resume_cycle(bench: Bench) -> None:
    bench.probe.big = "".join(chr(0x41 + i % 26) for i in range(1_000_000))
    sid = run(create_session(bench.deps))
    run(submit(bench.deps, sid, "call fetch_big", request_id="r1"))
    bench.drain()
    view = read_view(bench, sid)
    (tool,) = [t for t in view["tasks"] if t["tool"]]
    assert tool["tool"]["name"] == "fetch_big" and tool["status"] == "sleeping"
    assert bench.schedules() == []

    assert deliver(bench, sid, tool["id"], "go", key="go") == 202
    bench.drain()

    record = bench.store.get_task(sid, tool["id"])
    assert record.state.outcome.result["content"][0]["text"] == bench.probe.big
    item = bench.ddb.get_item(
        TableName=bench.table, Key={"pk": {"S": sid}, "sk": {"S": f"T#{tool['id']}"}}
    )["Item"]
    assert "s3_key" in item and "body" not in item  # offloaded, referenced
    view = read_view(bench, sid)
    (entry,) = [e for e in view["entries"] if e["type"] == "tool_result"]
    assert entry["text"] == bench.probe.big
    assert view["entries"][-1]["text"] == f"tool said {bench.probe.big[:40]} (1000000 chars)"
    listed = bench.s3.list_objects_v2(Bucket=bench.bucket, Prefix=f"{sid}/")
    assert listed["KeyCount"] >= 2  # the tool task's record and the transcript entry
