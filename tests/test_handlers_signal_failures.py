"""Failures through the signal function (issue 13): synthetic API Gateway v2 events against
moto, the same handler the Lambda runs.

Both forms on both routes (``.../{key}/failure`` and ``/hooks/{token}/failure`` with the
failure as the body; the ``{"$failure": {...}}`` envelope on the plain routes), first wins
against values, bad failure bodies are 400 naming the field with nothing stored, webhook
signatures apply to failures exactly as to values, and a failure costs what a value costs:
one conditional write and one wake."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from aws_fixtures import unique
from handler_fixtures import (
    REPLY,
    Bench,
    aws_fixture,
    bench_fixture,
    hook_event,
    http_event,
    signal_event,
)

from bide.service.webhooks import sign

__all__ = ["aws_fixture", "bench_fixture"]

SIGNAL = REPLY.name
JSON_TYPE = {"content-type": "application/json"}
RED = {"type": "BuildFailed", "message": "3 tests failed", "data": {"failed": 3}}


def failure_event(sid: str, task_id: str, key: str, body: Any, **kw: Any) -> dict[str, Any]:
    path = f"/sessions/{sid}/tasks/{task_id}/signals/{SIGNAL}/{key}/failure"
    route = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/failure"
    return http_event("POST", path, body=body, route_key=route, **kw)


def hook_failure_event(token: str, raw: bytes | str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("principal", None)
    route = "POST /hooks/{token}/failure"
    return http_event("POST", f"/hooks/{token}/failure", raw=raw, route_key=route, **kw)


def parked_napper(b: Bench) -> tuple[str, str]:
    sid = unique("s")
    task_id = b.start_napper([{"keys": ["k"]}], sid)
    b.drain()
    return sid, task_id


def parked_hook(b: Bench, **arguments: Any) -> tuple[str, str, str]:
    sid = unique("s")
    task_id = b.start_tool("await_hook", arguments, sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    return sid, task_id, b.probe.minted[task_id].token


def result_of(b: Bench, sid: str, task_id: str):
    record = b.task(sid, task_id)
    assert record.state.status == "terminal", record.state
    return record.state.outcome


@pytest.mark.parametrize("form", ["route", "envelope"])
def test_a_failure_by_task_id_is_delivered_and_first_wins(bench: Bench, form: str) -> None:
    sid, task_id = parked_napper(bench)
    if form == "route":
        event = failure_event(sid, task_id, "k", RED)
    else:
        event = signal_event(sid, task_id, SIGNAL, "k", {"$failure": RED})
    assert bench.post_signal(event) == (202, {"result": "delivered", "errors": []})
    # A value after it, and another failure: duplicate, the first stands.
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"}))[0] == 200
    assert (
        bench.post_signal(failure_event(sid, task_id, "k", {"type": "X", "message": ""}))[0] == 200
    )
    bench.drain()
    values = result_of(bench, sid, task_id).result["values"]
    assert values == {"k": "failed: BuildFailed: 3 tests failed"}


def test_a_value_first_then_a_failure_is_duplicate(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"}))[0] == 202
    assert bench.post_signal(failure_event(sid, task_id, "k", RED))[0] == 200
    bench.drain()
    assert result_of(bench, sid, task_id).result["values"] == {"k": "hi"}


@pytest.mark.parametrize(
    ("body", "route", "says"),
    [
        ({"message": "m"}, True, "'type' is required"),
        ({"type": "", "message": "m"}, True, "'type' must be a non-empty string"),
        ({"type": "T"}, True, "'message' is required"),
        ({"type": "T", "message": 5}, True, "'message' must be a string"),
        ({"type": "T", "message": "m", "extra": 1}, True, "'extra' is not a field"),
        (["T", "m"], True, "must be an object"),
        ({"$failure": {"type": "T"}}, False, "'message' is required"),
        ({"$failure": RED, "text": "x"}, False, "reserved"),
    ],
)
def test_bad_failure_bodies_are_400_naming_the_field_and_store_nothing(
    bench: Bench, body: Any, route: bool, says: str
) -> None:
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)
    if route:
        event = failure_event(sid, task_id, "k", body)
    else:
        event = signal_event(sid, task_id, SIGNAL, "k", body)
    status, answer = bench.post_signal(event)
    assert status == 400 and says in answer["error"], answer
    assert bench.seq(sid) == seq and bench.queued() == []
    assert bench.task(sid, task_id).signals == {}


@pytest.mark.parametrize("form", ["route", "envelope"])
def test_a_webhook_failure_ends_the_tool_call_failed(bench: Bench, form: str) -> None:
    sid, task_id, token = parked_hook(bench)
    if form == "route":
        event = hook_failure_event(token, json.dumps(RED), headers=JSON_TYPE)
    else:
        event = hook_event(token, json.dumps({"$failure": RED}), headers=JSON_TYPE)
    assert bench.post_signal(event) == (202, {"result": "delivered", "errors": []})
    bench.drain()
    outcome = result_of(bench, sid, task_id)
    assert outcome.status == "failed"
    assert outcome.error["content"][0]["text"] == "BuildFailed: 3 tests failed"
    assert outcome.error["details"] == {"failure": RED}
    assert (
        bench.post_signal(hook_failure_event(token, json.dumps(RED), headers=JSON_TYPE))[0] == 410
    )


def test_webhook_signatures_apply_to_failures_as_to_values(bench: Bench) -> None:
    secret = bench.probe.hmac_secret = secrets.token_hex(16)
    sid, task_id, token = parked_hook(bench, signed=True)
    seq = bench.seq(sid)
    body = json.dumps(RED).encode()
    stamp = str(int(bench.clock.now()))

    def signed(key: str, raw: bytes) -> dict[str, str]:
        return {**JSON_TYPE, "x-bide-timestamp": stamp, "x-bide-signature": sign(key, stamp, raw)}

    for headers in (JSON_TYPE, signed("wrong", body), signed(secret, b"{}")):
        status, _ = bench.post_signal(hook_failure_event(token, body, headers=headers))
        assert status == 401
    envelope = json.dumps({"$failure": RED}).encode()
    assert bench.post_signal(hook_event(token, envelope, headers=JSON_TYPE))[0] == 401
    assert bench.seq(sid) == seq and bench.queued() == []
    assert (
        bench.post_signal(hook_failure_event(token, body, headers=signed(secret, body)))[0] == 202
    )
    bench.drain()
    assert result_of(bench, sid, task_id).status == "failed"


def test_a_failure_costs_one_read_one_write_and_one_wake(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    (status, _), made = bench.aws_requests(
        lambda: bench.post_signal(failure_event(sid, task_id, "k", RED))
    )
    assert status == 202
    # The same requests as a value (tests/test_handlers_signal.py): one read of the owner
    # document, the head and the task together, one conditional write, one wake.
    assert sorted(op for op, _ in made) == ["SendMessage", "TransactGetItems", "UpdateItem"]
    assert [w["session_id"] for w in bench.queued()] == [sid]
    assert bench.drain() == 1
