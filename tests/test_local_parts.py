"""The local stack's parts on their own: the alarm clock, the wake queue (one worker per
session, retries, dead letters, restarts, a full queue) and the API Gateway and SQS event
shapes the local server hands to the handlers. ``test_local_stack.py`` runs them together."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bide import ManualClock
from bide.local import LocalAlarms, LocalDb, LocalWakeQueue
from bide.local.events import ROUTES, find_route, http_api_event, sqs_event
from bide.local.queue import WakeMessage

ROOT = Path(__file__).resolve().parent.parent
PASSED = {"status": "passed", "log_url": "https://ci.example/build-7"}


def test_local_alarms_arm_replace_disarm_and_fire(tmp_path: Path) -> None:
    clock = ManualClock()
    woken: list[tuple[str, str]] = []

    class Queue:
        def send(self, session_id: str, body: str, dedup_id: str | None = None) -> bool:
            woken.append((session_id, json.loads(body)["reason"]))
            return True

    alarms = LocalAlarms(LocalDb(str(tmp_path / "a.sqlite")), Queue(), clock, exact=True)
    alarms.arm("s1", clock.now() + 60)
    alarms.arm("s1", clock.now() + 30)  # one alarm per session: replaced
    alarms.arm("s2", clock.now() + 90)
    alarms.arm("s3", clock.now() + 10)
    alarms.disarm("s3")
    alarms.disarm("nobody")  # a missing alarm is fine
    assert [(a.session_id, a.at - clock.now()) for a in alarms.alarms()] == [
        ("s1", 30),
        ("s2", 90),
    ]
    assert alarms.fire_due() == []
    clock.advance(30)
    assert alarms.fire_due() == ["s1"]
    assert woken == [("s1", "alarm")]
    assert alarms.armed_at("s1") is None  # fired alarms delete themselves
    # They live in the file: a new process sees them.
    again = LocalAlarms(LocalDb(str(tmp_path / "a.sqlite")), Queue(), clock, exact=True)
    assert again.armed_at("s2") == clock.now() + 60


def test_local_alarms_fire_like_the_scheduler_within_the_minute_named(tmp_path: Path) -> None:
    """Scheduler fires an at() schedule between hh:mm:00 and hh:mm:59 of the minute it names
    (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html): the local
    clock does too, seeded, never before the deadline, and now and then twice."""
    start = ManualClock().now()  # on a whole minute
    moments: list[float] = []
    copies: list[int] = []
    for seed in range(40):
        clock = ManualClock(start)
        db = LocalDb(str(tmp_path / f"a{seed}.sqlite"))
        queue = LocalWakeQueue(db, clock)
        alarms = LocalAlarms(db, queue, clock, seed=seed, duplicate_probability=0.25)
        alarms.arm("s", start + 30)  # the worker's at() names the minute start + 60
        (alarm,) = alarms.alarms()
        fires = alarms.fires_at(alarm)
        assert start + 60 <= fires < start + 120
        assert fires == LocalAlarms(db, queue, clock, seed=seed).fires_at(alarm)  # seeded
        clock.set(fires - 0.01)
        assert alarms.fire_due() == []
        clock.set(fires)
        assert alarms.fire_due() == ["s"]
        moments.append(fires - start - 60)
        copies.append(queue.duplicates_dropped + len(queue.queued()))
        # A duplicate fire carries the same body: the queue keeps one.
        assert len(queue.queued()) == 1
        (body,) = {
            json.loads(r[0])["arming"] for r in db._db.execute("SELECT body FROM local_wakes")
        }
        assert body.startswith("arm-")
    assert max(moments) - min(moments) > 30  # spread over the minute, not always its start
    assert 2 in copies and 1 in copies  # sometimes fired twice


def test_the_queue_deduplicates_alarm_wakes_by_content_for_five_minutes(tmp_path: Path) -> None:
    clock = ManualClock()
    queue = LocalWakeQueue(LocalDb(str(tmp_path / "q.sqlite")), clock)
    body = json.dumps({"session_id": "s", "reason": "alarm", "at": 1.0, "arming": "arm-1"})
    assert queue.send("s", body) is True
    assert queue.send("s", body) is False  # a second fire of one schedule: dropped
    assert queue.send("other", body) is True  # deduplication is per message group
    assert queue.send("s", body, dedup_id="explicit") is True  # an explicit id overrides
    queue.wake("s", "signal")
    queue.wake("s", "signal")  # wake() sends a fresh id every time: never dropped
    clock.advance(299)
    assert queue.send("s", body) is False
    clock.advance(301)
    assert queue.send("s", body) is True  # the window passed
    assert [q.reason for q in queue.queued()] == [
        "alarm",
        "alarm",
        "alarm",
        "signal",
        "signal",
        "alarm",
    ]
    exact = LocalWakeQueue(LocalDb(str(tmp_path / "e.sqlite")), clock, exact=True)
    assert exact.send("s", body) is True and exact.send("s", body) is True


# --- the wake queue ----------------------------------------------------------------------------


def test_the_queue_runs_one_worker_per_session_and_sessions_side_by_side(tmp_path: Path) -> None:
    async def go() -> None:
        queue = LocalWakeQueue(LocalDb(str(tmp_path / "q.sqlite")), ManualClock())
        running: dict[str, int] = {}
        most: dict[str, int] = {}
        both = asyncio.Event()
        batches: list[list[str]] = []

        async def handler(event: dict[str, Any]) -> dict[str, Any]:
            [sid] = {r["attributes"]["MessageGroupId"] for r in event["Records"]}
            batches.append([json.loads(r["body"])["reason"] for r in event["Records"]])
            running[sid] = running.get(sid, 0) + 1
            most[sid] = max(most.get(sid, 0), running[sid])
            if len([s for s, n in running.items() if n]) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 5)
            await asyncio.sleep(0.02)
            running[sid] -= 1
            return {"batchItemFailures": []}

        runner = asyncio.ensure_future(queue.run(handler))
        queue.wake("a", "submit")
        queue.wake("b", "submit")
        await asyncio.wait_for(both.wait(), 5)  # both first batches are running
        queue.wake("a", "signal")  # arrives while a's worker runs: waits for it
        queue.wake("a", "alarm")
        assert await queue.drained(5)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        assert most == {"a": 1, "b": 1}  # never two workers on one session
        assert both.is_set()  # but two sessions at once
        assert ["signal", "alarm"] in batches  # the later wakes of "a": one batch, in order
        assert queue.queued() == []

    asyncio.run(go())


def test_failed_wakes_are_retried_then_dead_lettered(tmp_path: Path) -> None:
    async def go() -> None:
        queue = LocalWakeQueue(
            LocalDb(str(tmp_path / "q.sqlite")),
            ManualClock(),
            max_receives=2,
            retry_base_seconds=0.0,
        )
        seen: list[str] = []

        async def handler(event: dict[str, Any]) -> dict[str, Any]:
            seen.extend(r["attributes"]["ApproximateReceiveCount"] for r in event["Records"])
            return {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}

        runner = asyncio.ensure_future(queue.run(handler))
        queue.wake("a", "submit")
        assert await queue.drained(5)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        assert seen == ["1", "2"]
        assert queue.queued() == [] and queue.dead_letters() == 1

    asyncio.run(go())


def test_wakes_taken_by_a_dead_process_run_after_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "q.sqlite")
    clock = ManualClock()
    first = LocalWakeQueue(LocalDb(path), clock)
    first.wake("a", "submit")
    assert [m.session_id for m in first._take("a", clock.now())] == ["a"]  # taken, then died

    async def go() -> list[str]:
        second = LocalWakeQueue(LocalDb(path), clock)
        assert second.release_abandoned() == 1
        handled: list[str] = []

        async def handler(event: dict[str, Any]) -> None:
            handled.extend(r["attributes"]["MessageGroupId"] for r in event["Records"])

        runner = asyncio.ensure_future(second.run(handler))
        assert await second.drained(5)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        return handled

    assert asyncio.run(go()) == ["a"]


# --- events ---------------------------------------------------------------------------------


def test_routes_match_the_deployed_http_api() -> None:
    signal_route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}"
    cases = {
        ("POST", "/hooks/tok.en"): ("POST /hooks/{token}", {"token": "tok.en"}),
        ("POST", "/sessions/s%2F1/tasks/t-1/signals/app.ci-result/done"): (
            signal_route,
            {"session_id": "s/1", "task_id": "t-1", "signal": "app.ci-result", "key": "done"},
        ),
        ("GET", "/sessions/s1/tasks/t-1/signals/app.ci-result/done"): (
            "ANY /sessions/{proxy+}",
            {"proxy": "s1/tasks/t-1/signals/app.ci-result/done"},
        ),
        ("POST", "/sessions"): ("ANY /sessions", {}),
        ("GET", "/sessions/s1"): ("ANY /sessions/{proxy+}", {"proxy": "s1"}),
        # The failure forms (issue 13) go to the signal function, not the sessions API.
        ("POST", "/hooks/tok.en/failure"): ("POST /hooks/{token}/failure", {"token": "tok.en"}),
        ("POST", "/sessions/s1/tasks/t-1/signals/app.ci-result/done/failure"): (
            signal_route + "/failure",
            {"session_id": "s1", "task_id": "t-1", "signal": "app.ci-result", "key": "done"},
        ),
    }
    for (method, path), (key, params) in cases.items():
        found = find_route(method, path)
        assert found is not None, (method, path)
        assert (found[0].key, found[1]) == (key, params)
    for method, path in [
        ("GET", "/hooks/x"),
        ("POST", "/hooks"),
        ("POST", "/hooks/a/b"),
        ("GET", "/"),
    ]:
        assert find_route(method, path) is None
    assert {r.target for r in ROUTES} == {"api", "signal"}


def test_http_api_event_has_the_payload_2_shape() -> None:
    route, params = find_route("POST", "/hooks/abc") or (None, None)
    event = http_api_event(
        method="POST",
        raw_path="/hooks/abc",
        raw_query="a=1&a=2&b=",
        headers=[
            ("Content-Type", "application/json"),
            ("X-Two", "1"),
            ("x-two", "2"),
            ("Cookie", "k=v; k2=v2"),
        ],
        body=b"\xff\xfe",
        route=route,
        path_parameters=params,
        source_ip="127.0.0.1",
        domain="127.0.0.1:8787",
        request_id="r-1",
        now=1_767_225_600.0,
    )
    assert event["version"] == "2.0"
    assert event["routeKey"] == event["requestContext"]["routeKey"] == "POST /hooks/{token}"
    assert event["rawPath"] == "/hooks/abc" and event["pathParameters"] == {"token": "abc"}
    assert event["headers"] == {"content-type": "application/json", "x-two": "1,2"}
    assert event["cookies"] == ["k=v", "k2=v2"]
    assert event["queryStringParameters"] == {"a": "1,2", "b": ""}
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["requestContext"]["timeEpoch"] == 1_767_225_600_000
    assert event["isBase64Encoded"] is True and event["body"] == "//4="
    assert "body" not in http_api_event(
        method="GET",
        raw_path="/sessions",
        raw_query="",
        headers=[],
        body=b"",
        route=None,
        path_parameters=None,
        source_ip="127.0.0.1",
        domain="d",
        request_id="r",
        now=0.0,
    )


def test_sqs_event_names_the_session_as_message_group() -> None:
    message = WakeMessage("7", "s1", '{"session_id": "s1", "reason": "alarm"}', 10.0, 2)
    [record] = sqs_event([message], 11.0)["Records"]
    assert record["messageId"] == "7" and record["body"] == message.body
    assert record["eventSource"] == "aws:sqs"
    assert record["attributes"]["MessageGroupId"] == "s1"
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["eventSourceARN"].endswith(".fifo")


def test_a_full_queue_waits_without_spinning(tmp_path: Path) -> None:
    async def go() -> int:
        queue = LocalWakeQueue(LocalDb(str(tmp_path / "q.sqlite")), ManualClock(), concurrency=1)
        release = asyncio.Event()
        calls = 0

        async def handler(event: dict[str, Any]) -> None:
            await release.wait()

        original = queue._next_delay

        def counting() -> float:
            nonlocal calls
            calls += 1
            return original()

        queue._next_delay = counting  # type: ignore[method-assign]
        runner = asyncio.ensure_future(queue.run(handler))
        queue.wake("a", "submit")
        queue.wake("b", "submit")  # ready, but the one worker slot is taken
        await asyncio.sleep(0.1)
        release.set()
        assert await queue.drained(5)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        return calls

    assert asyncio.run(go()) < 20  # a spinning loop would count thousands
