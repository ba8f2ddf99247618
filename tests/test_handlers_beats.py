"""Heartbeats through the signal function (synthetic API Gateway v2 events against moto).

A beat is one conditional write and no wake: the requests behind it are counted. The
session's one Scheduler alarm stays at the earlier deadline; when it fires the worker runs
nothing and arms again at the moved ``beat_by``; a missed beat is noticed by that alarm long
before the sleep's ``until``. Webhook beats are checked like values (signature included)."""

from __future__ import annotations

import secrets
from typing import Any

from aws_fixtures import unique
from handler_fixtures import (
    REPLY,
    Bench,
    aws_fixture,
    bench_fixture,
    http_event,
    signal_event,
)

from bide.aws.scheduler import at_expression
from bide.service.webhooks import sign

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

SIGNAL = REPLY.name
HOUR = 3600.0
BEAT = 300.0  # the heartbeat interval of these tests: well over the Scheduler's minute


def beat_event(sid: str, task_id: str, key: str = "k", **kw: Any) -> dict:
    path = f"/sessions/{sid}/tasks/{task_id}/signals/{SIGNAL}/{key}/heartbeat"
    route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/heartbeat"
    return http_event("POST", path, route_key=route, **kw)


def hook_beat(token: str, raw: bytes | None = None, **kw: Any) -> dict:
    kw.setdefault("principal", None)
    route = "POST /hooks/{token}/heartbeat"
    return http_event("POST", f"/hooks/{token}/heartbeat", raw=raw, route_key=route, **kw)


def counted(b: Bench, action: Any) -> tuple[Any, list[str]]:
    """``action()``'s result and the AWS requests it made (DynamoDB, SQS, Scheduler), sorted."""
    result, made = b.aws_requests(action)
    return result, sorted(op for op, _ in made)


def parked(b: Bench, **round_: Any) -> tuple[str, str]:
    sid = unique("s")
    task_id = b.start_napper([{"keys": ["k"], "after": 2 * HOUR, "heartbeat": BEAT, **round_}], sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    return sid, task_id


def test_a_beat_is_202_and_moves_beat_by(bench: Bench) -> None:
    sid, task_id = parked(bench)
    bench.clock.advance(100)
    assert bench.post_signal(beat_event(sid, task_id)) == (
        202,
        {"result": "delivered", "errors": []},
    )
    assert bench.task(sid, task_id).state.beat_by == bench.clock.now() + BEAT


def test_a_beat_reads_writes_once_and_queues_no_wake(bench: Bench) -> None:
    # docs/performance.md: one read of the owner document, the head and the task together
    # (the owner check rides on it), the conditional commit. No SendMessage: no worker runs
    # for a beat.
    sid, task_id = parked(bench)
    (status, _), made = counted(bench, lambda: bench.post_signal(beat_event(sid, task_id)))
    assert status == 202
    assert made == ["TransactGetItems", "UpdateItem"]
    assert bench.queued() == []


def test_the_stale_alarm_runs_nothing_and_arms_at_the_new_beat_by(bench: Bench) -> None:
    start = bench.clock.now()
    sid, task_id = parked(bench)
    (schedule,) = bench.schedules()
    assert schedule["ScheduleExpression"] == at_expression(start + BEAT)  # min(until, beat_by)
    runs = bench.probe.executions["napper"]
    bench.clock.advance(BEAT - 60)
    assert bench.post_signal(beat_event(sid, task_id))[0] == 202
    moved = bench.clock.now() + BEAT
    # The beat left the alarm alone: it fires at the old deadline.
    assert [s["ScheduleExpression"] for s in bench.schedules()] == [schedule["ScheduleExpression"]]
    bench.clock.advance(120)
    seq = bench.seq(sid)
    bench.fire_alarm(sid)
    bench.drain()
    assert bench.probe.executions["napper"] == runs  # no phase ran: a spare wake
    assert bench.seq(sid) == seq  # and nothing was written
    (rearmed,) = bench.schedules()
    assert rearmed["ScheduleExpression"] == at_expression(moved)
    # No more beats: the missed one is noticed at that alarm, long before until (2 h).
    bench.clock.advance(moved - bench.clock.now())
    # Before the worker runs, a late value is refused (the deadline race holds for beat_by).
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "late"}))
    assert (status, body["result"]) == (410, "closed")
    bench.fire_alarm(sid)
    bench.drain()
    record = bench.task(sid, task_id)
    assert record.state.status == "terminal"
    assert record.state.outcome.result["wake"] == {"reason": "heartbeat", "missed_at": moved}
    assert bench.clock.now() - start < 2 * HOUR / 5
    assert bench.post_signal(beat_event(sid, task_id))[1]["result"] == "closed"


def test_a_value_still_ends_a_beating_wait(bench: Bench) -> None:
    sid, task_id = parked(bench)
    bench.clock.advance(200)
    assert bench.post_signal(beat_event(sid, task_id))[0] == 202
    assert (
        bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "rendered"}))[0] == 202
    )
    assert bench.post_signal(beat_event(sid, task_id))[1]["result"] == "duplicate"
    bench.drain()
    assert bench.task(sid, task_id).state.outcome.result["values"] == {"k": "rendered"}


def test_a_heartbeat_only_deadline_is_disarmed_when_the_wait_ends(bench: Bench) -> None:
    # No until: the alarm stands for beat_by alone, and the worker must know it may exist.
    sid, task_id = parked(bench, after=None)
    assert len(bench.schedules()) == 1
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "done"}))[0] == 202
    bench.drain()
    assert bench.task(sid, task_id).state.status == "terminal"
    assert bench.schedules() == []


def test_beat_refusals_by_task_id(bench: Bench) -> None:
    sid, task_id = parked(bench)
    seq = bench.seq(sid)
    assert bench.post_signal(beat_event(sid, "t-none"))[1]["result"] == "not_found"
    assert bench.post_signal(beat_event(sid, task_id))[0] == 202
    path = f"/sessions/{sid}/tasks/{task_id}/signals/no.such/k/heartbeat"
    route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/heartbeat"
    status, body = bench.post_signal(http_event("POST", path, route_key=route))
    assert status == 404 and "no.such" in body["error"]
    status, body = bench.post_signal(http_event("GET", path))
    assert status == 405 and body["error"].startswith("use POST for")
    # (Who may call the route: tests/test_owners.py, as for every IAM route.)
    assert bench.seq(sid) == seq + 1  # only the one delivered beat wrote
    assert bench.queued() == []


# --- webhooks ------------------------------------------------------------------------------


def parked_hook(b: Bench, **arguments: Any) -> tuple[str, str, str]:
    sid = unique("s")
    task_id = b.start_tool("await_hook", {"heartbeat": BEAT, "after": HOUR, **arguments}, sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    return sid, task_id, b.probe.minted[task_id].token


def test_a_webhook_beat_with_an_empty_body_moves_the_deadline(bench: Bench) -> None:
    sid, task_id, token = parked_hook(bench)
    bench.clock.advance(60)
    answer, made = counted(bench, lambda: bench.post_signal(hook_beat(token)))
    assert answer == (202, {"result": "delivered", "errors": []})
    # The binding, the head and the task read together, the commit: no SendMessage.
    assert made == ["TransactGetItems", "TransactWriteItems"]
    assert bench.task(sid, task_id).state.beat_by == bench.clock.now() + BEAT
    assert bench.queued() == []
    # Missed: the tool call wakes with its keys expired.
    bench.clock.advance(BEAT)
    bench.fire_alarm(sid)
    bench.drain()
    text = bench.task(sid, task_id).state.outcome.result["content"][0]["text"]
    assert text == "nobody called the hook"


def test_a_signed_webhook_refuses_an_unsigned_beat(bench: Bench) -> None:
    secret = bench.probe.hmac_secret = secrets.token_hex(16)
    sid, _, token = parked_hook(bench, signed=True)
    seq = bench.seq(sid)
    status, body = bench.post_signal(hook_beat(token))
    assert status == 401 and "X-Bide" in body["error"]
    timestamp = str(int(bench.clock.now()))
    forged = {"x-bide-timestamp": timestamp, "x-bide-signature": sign("wrong", timestamp, b"")}
    assert bench.post_signal(hook_beat(token, headers=forged))[0] == 401
    assert bench.seq(sid) == seq
    good = {"x-bide-timestamp": timestamp, "x-bide-signature": sign(secret, timestamp, b"")}
    assert bench.post_signal(hook_beat(token, headers=good))[0] == 202
    assert bench.seq(sid) == seq + 1
    other = token[:-8] + "0" * 8
    assert bench.post_signal(hook_beat(other))[0] == 404


def test_the_spare_wake_a_beat_leaves_costs_one_load_and_one_arming(bench: Bench) -> None:
    # What the per-interval spare wake costs the worker (docs/architecture.md, "Wake path on
    # AWS"): the session's load and the re-arming; no write to the table.
    sid, task_id = parked(bench)
    bench.clock.advance(BEAT - 60)
    assert bench.post_signal(beat_event(sid, task_id))[0] == 202
    bench.clock.advance(120)
    bench.fire_alarm(sid)
    # The SQS requests are the bench's poller (ReceiveMessage, DeleteMessage), not bide's.
    _, made = counted(bench, bench.drain)
    made = [name for name in made if name not in ("ReceiveMessage", "DeleteMessage")]
    # The fired schedule deleted itself (ActionAfterCompletion DELETE): a create, not an update.
    assert sorted(made) == ["CreateSchedule", "Query"]
    assert bench.task(sid, task_id).state.status == "sleeping"
