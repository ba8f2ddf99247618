"""The host routes of the sessions API: a session's events by page and by long poll, resolve
and reject a promise, reply to a bound invocation. Each answers its happy path, 404 for an
unknown session, 403 for another principal (tests/test_owners.py covers every route), and
names the field of bad input. The long poll waits on the injected clock and sleep only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from handler_fixtures import (
    PRINCIPAL,
    Probe,
    aws_fixture,
    bench_fixture,
    http_event,
    make_app,
    response_json,
)
from test_workflow_support import Alarms, Queue

from bide import Harness, ManualClock, RandomIds, SQLiteStore
from bide.promises import Promises
from bide.service.deps import Deps
from bide.service.host import MAX_WAIT_SECONDS, POLL_SECONDS
from bide.service.http import handle_api

__all__ = ["aws_fixture", "bench_fixture"]

BOB = "arn:aws:sts::123456789012:assumed-role/developer/bob"


class Sleeper:
    """The injected sleep: advances the clock instead of waiting, and may act mid-wait."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.slept: list[float] = []
        self.during: Any = None  # called with the number of the sleep, after it

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)
        if self.during is not None:
            await self.during(len(self.slept))


@pytest.fixture(params=["sqlite", "dynamodb"])
def deps(request: pytest.FixtureRequest) -> Deps:
    if request.param == "dynamodb":  # the moto/DynamoDB Local bench of handler_fixtures
        made = request.getfixturevalue("bench").deps
        return made.replace(queue=Queue(), sleep=Sleeper(made.clock))
    clock = ManualClock()
    return Deps(
        store=SQLiteStore(),
        alarms=Alarms(),
        queue=Queue(),
        app=make_app(Probe()),
        clock=clock,
        ids=RandomIds(),
        sleep=Sleeper(clock),
    )


def call(deps: Deps, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    event = http_event(method, path, body=body, **kw)
    response = asyncio.run(handle_api(deps, event, None))
    return response["statusCode"], response_json(response)


def session(deps: Deps, *promises: str) -> str:
    status, body = call(deps, "POST", "/sessions", {})
    assert status == 201, body
    sid = body["session_id"]

    async def create() -> None:
        harness = Harness(deps.store, sid, deps.app.task_kinds(), clock=deps.clock, ids=deps.ids)
        await harness.attach()
        for promise in promises:
            await Promises(harness).create(promise)

    asyncio.run(create())
    return sid


def events(deps: Deps, sid: str, **query: str) -> tuple[int, Any]:
    return call(deps, "GET", f"/sessions/{sid}/events", query=query or None)


def test_resolve_and_reject_end_promises_and_their_events_page_on(deps: Deps) -> None:
    sid = session(deps, "p-1", "p-2")
    status, body = call(deps, "POST", f"/sessions/{sid}/promises/p-1/resolve", {"value": [1]})
    assert (status, body) == (200, {"result": "settled"})
    # Woken before the write (arm before signal) and after it (its waiters get to run).
    assert [w for w in deps.queue.wakes if w[0] == sid] == [
        (sid, "promise"),
        (sid, "promise-stored"),
    ]
    status, body = call(deps, "POST", f"/sessions/{sid}/promises/p-1/reject", {"error": "late"})
    assert (status, body) == (200, {"result": "ignored"})  # the first outcome stands
    status, body = call(deps, "POST", f"/sessions/{sid}/promises/nope/resolve", {})
    assert (status, body) == (200, {"result": "not_found"})
    call(deps, "POST", f"/sessions/{sid}/promises/p-2/reject", {"error": "no"})
    status, page = events(deps, sid, limit="1")
    assert status == 200 and page["more"] is True
    assert [(e["seq"], e["promise"], e["value"]) for e in page["items"]] == [(1, "p-1", [1])]
    status, rest = events(deps, sid, cursor=page["next"])
    assert [(e["seq"], e["status"], e["error"]) for e in rest["items"]] == [(2, "rejected", "no")]
    status, empty = events(deps, sid, cursor=rest["next"])
    assert (empty["items"], empty["more"], empty["next"]) == ([], False, rest["next"])


def test_reject_takes_a_failure_type_and_data_and_names_a_bad_type(deps: Deps) -> None:
    sid = session(deps, "p-1", "p-2", "p-3")
    body = {"error": "render died", "type": "OutOfMemory", "data": {"frame": 812}}
    status, answer = call(deps, "POST", f"/sessions/{sid}/promises/p-1/reject", body)
    assert (status, answer) == (200, {"result": "settled"})
    call(deps, "POST", f"/sessions/{sid}/promises/p-2/reject", {"error": "old caller"})
    status, answer = call(
        deps, "POST", f"/sessions/{sid}/promises/p-3/reject", {"error": "x", "type": ""}
    )
    assert status == 422 and "type" in str(answer)
    docs = {d.body["id"]: d.body for d in deps.store.list_docs(sid, "promise/")}
    assert (docs["p-1"]["error_type"], docs["p-1"]["error_data"]) == ("OutOfMemory", {"frame": 812})
    assert docs["p-2"]["error_type"] == "Rejected"  # a bare message keeps working
    assert docs["p-3"]["status"] == "open"  # refused: nothing written
    _, page = events(deps, sid)
    assert [(e["promise"], e.get("error_type")) for e in page["items"]] == [
        ("p-1", "OutOfMemory"),
        ("p-2", "Rejected"),
    ]


def test_unknown_sessions_are_404_and_other_principals_403(deps: Deps) -> None:
    sid = session(deps, "p-1")
    routes = [
        ("GET", "/sessions/{}/events", None),
        ("POST", "/sessions/{}/promises/p-1/resolve", {"value": 1}),
        ("POST", "/sessions/{}/promises/p-1/reject", {"error": "x"}),
        (
            "POST",
            "/sessions/{}/invocations/i-1/reply",
            {"key": "k", "producer": "p", "correlation": "c"},
        ),
    ]
    for method, path, body in routes:
        status, answer = call(deps, method, path.format("no-such"), body)
        assert status == 404 and "no-such" in answer["error"], (path, answer)
        status, answer = call(deps, method, path.format(sid), body, principal=BOB)
        assert status == 403, (path, answer)
    assert deps.store.get_doc(sid, "promise/p-1").body["status"] == "open"


def test_bad_input_names_the_field(deps: Deps) -> None:
    sid = session(deps, "p-1")

    def fields(status: int, body: Any) -> set[str]:
        assert status == 422, body
        return {str(e["loc"][-1]) for e in body["detail"]}

    assert "wait" in fields(*events(deps, sid, wait=str(MAX_WAIT_SECONDS + 1)))
    assert "limit" in fields(*events(deps, sid, limit="0"))
    status, body = events(deps, sid, cursor="garbage")
    assert status == 400 and body["error"].startswith("cursor:")
    assert "error" in fields(*call(deps, "POST", f"/sessions/{sid}/promises/p-1/reject", {}))
    extra = {"value": 1, "surprise": True}
    assert "surprise" in fields(*call(deps, "POST", f"/sessions/{sid}/promises/p-1/resolve", extra))
    reply = {"key": "k", "producer": "p", "correlation": "c", "status": "rejected"}
    status, body = call(deps, "POST", f"/sessions/{sid}/invocations/i-1/reply", reply)
    assert status == 422 and "error" in body["detail"][0]["msg"], body
    big = {"value": "x" * (300 * 1024)}  # over the store's value limit (bide.engine.limits)
    status, body = call(deps, "POST", f"/sessions/{sid}/promises/p-1/resolve", big)
    assert status == 413 and "value of promise 'p-1'" in body["error"], body
    assert deps.store.get_doc(sid, "promise/p-1").body["status"] == "open"  # nothing written


def test_a_reply_that_does_not_match_its_invocation_is_409(deps: Deps) -> None:
    sid = session(deps)
    reply = {"key": "k", "producer": "p", "correlation": "c"}
    status, body = call(deps, "POST", f"/sessions/{sid}/invocations/i-1/reply", reply)
    assert status == 409 and "unknown-invocation" in body["error"], body


def test_the_long_poll_answers_at_once_when_events_exist(deps: Deps) -> None:
    sid = session(deps, "p-1")
    call(deps, "POST", f"/sessions/{sid}/promises/p-1/resolve", {"value": 1})
    status, page = events(deps, sid, wait=str(MAX_WAIT_SECONDS))
    assert status == 200 and len(page["items"]) == 1
    assert deps.sleep.slept == []


def test_the_long_poll_waits_its_time_when_nothing_happens(deps: Deps) -> None:
    sid = session(deps)
    started = deps.clock.now()
    status, page = events(deps, sid, wait="5")
    assert status == 200 and page["items"] == []
    assert deps.clock.now() - started == 5
    assert deps.sleep.slept == [POLL_SECONDS] * int(5 / POLL_SECONDS)
    deps.sleep.slept.clear()
    events(deps, sid)  # no wait: one read, no sleep
    assert deps.sleep.slept == []


def test_the_long_poll_answers_when_an_event_arrives_mid_wait(deps: Deps) -> None:
    sid = session(deps, "p-1")

    async def resolve_on_third(n: int) -> None:
        if n == 3:
            harness = Harness(deps.store, sid, deps.app.task_kinds(), clock=deps.clock)
            await harness.attach()
            await Promises(harness).resolve("p-1", "now")

    deps.sleep.during = resolve_on_third
    status, page = events(deps, sid, wait=str(MAX_WAIT_SECONDS))
    assert status == 200 and [e["value"] for e in page["items"]] == ["now"]
    assert len(deps.sleep.slept) == 3


def test_the_long_poll_rechecks_the_caller_each_time(deps: Deps) -> None:
    assert PRINCIPAL != BOB
    sid = session(deps)
    status, _ = events(deps, sid, wait="3")  # the owner: waits, then an empty page
    assert status == 200
    deps.sleep.slept.clear()
    event = http_event("GET", f"/sessions/{sid}/events", query={"wait": "3"}, principal=BOB)
    response = asyncio.run(handle_api(deps, event, None))
    assert response["statusCode"] == 403 and deps.sleep.slept == []  # refused at once
