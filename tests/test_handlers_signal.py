"""The signal function: synthetic API Gateway v2 events against moto.

Every signal result by task id, capability webhooks minted by a tool (signature, replay
window, size, type and JSON checks, each refusal storing nothing), and the one wake a signal
queues once its value is stored (also by a retry the first attempt died before waking)."""

from __future__ import annotations

import json
import re
import secrets

import pytest

# Before importing them: their asserts get pytest's messages (other modules register the same).
from aws_fixtures import unique
from handler_fixtures import (
    REPLY,
    WEBHOOK_BASE,
    Bench,
    aws_fixture,
    bench_fixture,
    hook_event,
    http_event,
    run,
    signal_event,
)

from bide.service import signals as signals_service
from bide.service.http import handle_signal
from bide.service.webhooks import binding_key, make_token, parse_token, sign

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

SIGNAL = REPLY.name
JSON_TYPE = {"content-type": "application/json"}
SIGNAL_ROUTE = "/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}"


def parked_napper(b: Bench, rounds=None) -> tuple[str, str]:
    sid = unique("s")
    task_id = b.start_napper(rounds or [{"keys": ["k"]}], sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    return sid, task_id


def outcome(b: Bench, sid: str, task_id: str):
    record = b.task(sid, task_id)
    assert record.state.status == "terminal", record.state
    return record.state.outcome


# --- by task id: every result ----------------------------------------------------------------


def test_delivered_is_202_and_the_worker_consumes_the_value(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"}))
    assert (status, body) == (202, {"result": "delivered", "errors": []})
    assert {w["session_id"] for w in bench.queued()} == {sid}
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k": "hi"}


def test_duplicate_is_200_and_keeps_the_first_value(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "first"}))[0] == 202
    seq = bench.seq(sid)
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "second"}))
    assert (status, body) == (200, {"result": "duplicate", "errors": []})
    assert bench.seq(sid) == seq
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k": "first"}


def test_invalid_is_422_naming_each_field_and_stores_nothing(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)
    event = signal_event(sid, task_id, SIGNAL, "k", {"text": 5, "score": "high"})
    status, body = bench.post_signal(event)
    assert status == 422 and body["result"] == "invalid"
    assert {e["field"] for e in body["errors"]} == {"text", "score"}
    assert all(e["message"] for e in body["errors"])
    assert bench.seq(sid) == seq
    assert bench.task(sid, task_id).signals == {}


def test_closed_is_410_for_an_ended_task_and_after_a_passed_deadline(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "done"}))
    bench.drain()
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "late"}))
    assert (status, body["result"]) == (410, "closed")

    # The deadline passed but no worker has run yet: the key is closed all the same.
    sid, task_id = parked_napper(bench, [{"keys": ["k"], "after": 60}])
    bench.clock.advance(61)
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "late"}))
    assert (status, body["result"]) == (410, "closed")
    # No value is stored; the key is closed for good, so no later answer can contradict this.
    slot = bench.task(sid, task_id).signals[f"{SIGNAL}/k"]
    assert slot.expired and not slot.has_value
    bench.fire_alarm(sid)
    bench.drain()
    assert outcome(bench, sid, task_id).result["wake"] == {"reason": "expired"}


def test_not_found_is_404(bench: Bench) -> None:
    sid, _ = parked_napper(bench)
    status, body = bench.post_signal(signal_event(sid, "t-nope", SIGNAL, "k", {"text": "x"}))
    assert (status, body) == (404, {"result": "not_found", "errors": []})
    status, body = bench.post_signal(signal_event(unique("s"), "t-1", SIGNAL, "k", {"text": "x"}))
    assert (status, body["result"]) == (404, "not_found")


def test_unknown_signal_name_is_404_with_a_clear_message_and_no_wake(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)
    status, body = bench.post_signal(signal_event(sid, task_id, "no.such", "k", {"text": "x"}))
    assert status == 404
    assert "no signal named 'no.such'" in body["error"]
    assert bench.seq(sid) == seq and bench.queued() == []


def test_base64_encoded_body_is_decoded(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    event = signal_event(sid, task_id, SIGNAL, "k", {"text": "b64"}, base64_body=True)
    assert bench.post_signal(event) == (202, {"result": "delivered", "errors": []})
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k": "b64"}


def test_percent_encoded_path_segments_are_decoded(bench: Bench) -> None:
    sid, task_id = parked_napper(bench, [{"keys": ["a key"]}])
    event = signal_event(sid, task_id, SIGNAL, "a%20key", {"text": "spaced"})
    assert bench.post_signal(event)[0] == 202


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"raw": "{not json", "headers": {"content-type": "application/json"}}, 400, "JSON"),
        ({"raw": '{"text": "x"}', "headers": {"content-type": "text/plain"}}, 415, "content"),
        ({"raw": '{"text": "x"}'}, 415, "none"),
        ({"raw": "x" * (256 * 1024 + 1), "headers": JSON_TYPE}, 413, "limit"),
        ({"raw": b"\xff\xfe", "base64_body": True, "headers": JSON_TYPE}, 400, "JSON"),
    ],
)
def test_bad_bodies_get_a_clear_4xx_and_store_nothing(
    bench: Bench, change: dict, status: int, message: str
) -> None:
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)
    path = f"/sessions/{sid}/tasks/{task_id}/signals/{SIGNAL}/k"
    got, body = bench.post_signal(http_event("POST", path, **change))
    assert got == status and message in body["error"]
    assert bench.seq(sid) == seq and bench.queued() == []


def test_a_body_marked_base64_that_is_not_is_400(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    event = signal_event(sid, task_id, SIGNAL, "k", {"text": "x"}, base64_body=True)
    event["body"] = "%%%not base64"
    status, body = bench.post_signal(event)
    assert status == 400 and "base64" in body["error"]
    assert bench.queued() == []


def test_wrong_method_and_unknown_routes_are_4xx(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    path = f"/sessions/{sid}/tasks/{task_id}/signals/{SIGNAL}/k"
    assert bench.post_signal(http_event("GET", path))[0] == 405
    assert bench.post_signal(http_event("POST", "/sessions/x/elsewhere", body={}))[0] == 404
    assert bench.post_signal(http_event("POST", "/hooks", body={}))[0] == 404
    bad_session = signal_event("a session", task_id, SIGNAL, "k", {"text": "x"})
    assert bench.post_signal(bad_session)[0] == 404
    long_key = signal_event(sid, task_id, SIGNAL, "k" * 300, {"text": "x"})
    assert bench.post_signal(long_key)[0] == 400
    assert bench.queued() == []


def test_paths_as_api_gateway_hands_them_over(bench: Bench) -> None:
    """API Gateway decodes the path before the function sees it: a key arrives as itself,
    whatever its characters, and a trailing slash names the same route."""
    sid, task_id = parked_napper(bench, [{"keys": ["k€y", 'say "hi"']}])
    path = f"/sessions/{sid}/tasks/{task_id}/signals/{SIGNAL}"
    assert bench.post_signal(http_event("POST", f"{path}/k€y", body={"text": "x"}))[0] == 202
    encoded = http_event("POST", f"{path}/say%20%22hi%22/", body={"text": "x"})
    assert bench.post_signal(encoded)[0] == 202
    for method in ("PUT", "DELETE", "OPTIONS"):
        status, body = bench.post_signal(http_event(method, f"{path}/k€y"))
        assert (status, body["error"]) == (405, f"use POST for {SIGNAL_ROUTE}")
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k€y": "x", 'say "hi"': "x"}


# --- capability webhooks ----------------------------------------------------------------------


def parked_hook(b: Bench, **arguments) -> tuple[str, str, str]:
    """A tool call parked on a webhook it minted: (session, task, token)."""
    sid = unique("s")
    task_id = b.start_tool("await_hook", arguments, sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    hook = b.probe.minted[task_id]
    return sid, task_id, hook.token


def tool_text(b: Bench, sid: str, task_id: str) -> str:
    return outcome(b, sid, task_id).result["content"][0]["text"]


def test_a_tool_mints_an_unguessable_webhook_whose_token_is_not_stored(bench: Bench) -> None:
    sid, task_id, token = parked_hook(bench)
    hook = bench.probe.minted[task_id]
    assert hook.url == f"{WEBHOOK_BASE}/hooks/{token}"
    session, nonce, mac = parse_token(token)
    assert session == sid
    assert re.fullmatch(r"[0-9a-f]{32,}", nonce) and re.fullmatch(r"[0-9a-f]{48}", mac)
    # The binding is stored under the nonce; the mac is derived from the binding under the
    # deployment's key and stored nowhere (tests/test_webhook_secrets.py dumps everything).
    assert bench.store.get_doc(sid, binding_key(nonce)) is not None
    # Another call gets another nonce and mac.
    _, _, other = parked_hook(bench)
    assert parse_token(other)[1] != nonce and parse_token(other)[2] != mac
    assert bench.post_signal(hook_event(token, '{"text": "x"}', headers=JSON_TYPE))[0] == 202
    bench.drain()
    items = bench.ddb.scan(TableName=bench.table)["Items"]
    assert mac not in json.dumps(items)


def test_webhook_delivers_its_json_body(bench: Bench) -> None:
    sid, task_id, token = parked_hook(bench)
    status, body = bench.post_signal(hook_event(token, '{"text": "green"}', headers=JSON_TYPE))
    assert (status, body) == (202, {"result": "delivered", "errors": []})
    bench.drain()
    assert tool_text(bench, sid, task_id) == "hook said green"
    # The call ended: its webhook is closed.
    status, body = bench.post_signal(hook_event(token, '{"text": "again"}', headers=JSON_TYPE))
    assert (status, body["result"]) == (410, "closed")


def test_webhook_body_failing_the_schema_is_422_with_fields(bench: Bench) -> None:
    sid, _, token = parked_hook(bench)
    seq = bench.seq(sid)
    event = hook_event(token, '{"score": 1}', headers={"content-type": "application/json"})
    status, body = bench.post_signal(event)
    assert status == 422 and [e["field"] for e in body["errors"]] == ["text"]
    assert bench.seq(sid) == seq


def signed(b: Bench, body: bytes, secret: str, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(b.clock.now() if at is None else at))
    return {
        "content-type": "application/json",
        "x-bide-timestamp": timestamp,
        "x-bide-signature": sign(secret, timestamp, body),
    }


def test_signed_webhook_with_a_good_signature_is_delivered(bench: Bench) -> None:
    bench.probe.hmac_secret = secrets.token_hex(16)
    sid, task_id, token = parked_hook(bench, signed=True)
    body = b'{"text": "signed"}'
    headers = signed(bench, body, bench.probe.hmac_secret)
    status, _ = bench.post_signal(hook_event(token, body, headers=headers))
    assert status == 202
    bench.drain()
    assert tool_text(bench, sid, task_id) == "hook said signed"


def test_webhook_refusals_store_nothing_and_queue_no_wake(bench: Bench) -> None:
    secret = bench.probe.hmac_secret = secrets.token_hex(16)
    sid, task_id, token = parked_hook(bench, signed=True)
    seq = bench.seq(sid)
    body = b'{"text": "x"}'
    now = bench.clock.now()
    other_token = token[: -len(parse_token(token)[2])] + secrets.token_hex(24)
    cases = [
        ("missing signature", token, body, JSON_TYPE, 401, "X-Bide"),
        ("bad signature", token, body, signed(bench, body, "wrong"), 401, "does not match"),
        ("signed another body", token, body, signed(bench, b"{}", secret), 401, "does not match"),
        ("replayed: old timestamp", token, body, signed(bench, body, secret, now - 301), 401,
         "window"),
        ("future timestamp", token, body, signed(bench, body, secret, now + 301), 401, "window"),
        ("oversized", token, b"x" * (256 * 1024 + 1), JSON_TYPE, 413, "limit"),
        ("unknown token", other_token, body, signed(bench, body, secret), 404, "unknown"),
        ("garbage token", "garbage", body, JSON_TYPE, 404, "unknown"),
        ("no session has that id", make_token("x" * 3000, "0" * 32, "0" * 48), body, JSON_TYPE, 404,
         "unknown"),
    ]  # fmt: skip
    for name, used_token, raw, headers, status, message in cases:
        got, answer = bench.post_signal(hook_event(used_token, raw, headers=headers))
        assert (got, message in answer["error"]) == (status, True), (name, answer)
        assert bench.seq(sid) == seq, name
    assert bench.queued() == []
    assert bench.task(sid, task_id).signals == {}


def test_unsigned_webhook_type_and_json_checks(bench: Bench) -> None:
    sid, _, token = parked_hook(bench)
    seq = bench.seq(sid)
    cases = [
        (hook_event(token, '{"text": "x"}', headers={"content-type": "text/plain"}), 415),
        (hook_event(token, '{"text": "x"}'), 415),
        (hook_event(token, "{oops", headers={"content-type": "application/json"}), 400),
        (hook_event(token, "", headers={"content-type": "application/json"}), 400),
    ]
    for event, status in cases:
        assert bench.post_signal(event)[0] == status
    assert bench.seq(sid) == seq and bench.queued() == []
    # A charset parameter is fine.
    charset = {"content-type": "application/json; charset=utf-8"}
    event = hook_event(token, '{"text": "ok"}', headers=charset)
    assert bench.post_signal(event)[0] == 202


# --- one wake, after the value is stored ------------------------------------------------------


def test_a_signal_queues_one_wake_after_its_value_is_stored(bench: Bench, monkeypatch) -> None:
    sid, task_id = parked_napper(bench)
    seen: list[tuple[str, int, str | None]] = []
    real_wake = bench.deps.queue.wake

    def wake(session_id: str, reason: str, *, task=None, owner=None, pages=None) -> None:
        seen.append((reason, bench.seq(session_id), task))
        real_wake(session_id, reason, task=task, owner=owner, pages=pages)

    seq = bench.seq(sid)
    monkeypatch.setattr(bench.deps.queue, "wake", wake)
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "once"}))[0] == 202
    # One wake, queued once the value is stored, naming the task (the worker runs it alone).
    assert seen == [("signal", seq + 1, task_id)]
    assert bench.drain() == 1  # one worker run
    assert outcome(bench, sid, task_id).result["values"] == {"k": "once"}


def test_the_signal_function_reads_once_writes_once_and_wakes_once(bench: Bench) -> None:
    # The requests behind one delivered signal (docs/performance.md, requests per signal):
    # one read of the owner document, the head and the task together (the IAM route's owner
    # check rides on it: tests/test_signal_owner_read.py), the commit, the wake.
    sid, task_id = parked_napper(bench)
    event = signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"})
    (status, _), made = bench.aws_requests(lambda: bench.post_signal(event))
    assert status == 202
    assert sorted(op for op, _ in made) == ["SendMessage", "TransactGetItems", "UpdateItem"]


def test_the_handler_dying_before_the_store_leaves_nothing_and_the_retry_delivers(
    bench: Bench, monkeypatch
) -> None:
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)

    def crash(*args, **kwargs):
        raise RuntimeError("the signal function died here")

    monkeypatch.setattr(signals_service, "deliver_signal", crash)
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "lost?"}))
    assert status == 500 and "internal" in body["error"]
    assert bench.seq(sid) == seq and bench.queued() == []  # nothing stored, nothing queued
    monkeypatch.undo()
    # The sender retries (it got a 5xx): the value lands and the task completes.
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "retried"}))[0] == 202
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k": "retried"}


def test_the_handler_dying_after_the_store_before_the_wake_is_woken_by_the_retry(
    bench: Bench, monkeypatch
) -> None:
    # The value is stored, the wake never queued; the sender got a 5xx and sends again. The
    # retry is a duplicate (the first value stands) and must still wake the session.
    sid, task_id = parked_napper(bench)
    seq = bench.seq(sid)

    def crash(session_id: str, reason: str, **_focus: str | None) -> None:
        raise RuntimeError("the signal function died before its wake")

    monkeypatch.setattr(bench.deps.queue, "wake", crash)
    status, _ = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "first"}))
    assert status == 500
    assert bench.seq(sid) == seq + 1 and bench.queued() == []  # stored, no wake
    assert bench.drain() == 0
    assert bench.task(sid, task_id).state.status == "sleeping"  # stranded until the retry
    monkeypatch.undo()
    status, body = bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "again"}))
    assert (status, body["result"]) == (200, "duplicate")
    # The retry's wake names the task too (a duplicate wrote nothing: its owner is not known).
    assert bench.queued() == [{"session_id": sid, "reason": "signal-retried", "task": task_id}]
    bench.drain()
    assert outcome(bench, sid, task_id).result["values"] == {"k": "first"}


def test_refused_deliveries_queue_no_wake(bench: Bench) -> None:
    sid, task_id = parked_napper(bench)
    assert bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"nope": 1}))[0] == 422
    assert bench.post_signal(signal_event(sid, "t-none", SIGNAL, "k", {"text": "x"}))[0] == 404
    assert bench.queued() == []


def test_a_busy_store_is_503_with_retry_after(bench: Bench, monkeypatch) -> None:
    from bide.engine.errors import StoreUnavailable

    sid, task_id = parked_napper(bench)

    def busy(*args, **kwargs):
        raise StoreUnavailable("throttled 8 times")

    monkeypatch.setattr(signals_service, "deliver_signal", busy)
    event = signal_event(sid, task_id, SIGNAL, "k", {"text": "x"})
    response = run(handle_signal(bench.deps, event, None))
    assert response["statusCode"] == 503 and response["headers"]["Retry-After"] == "1"
    assert json.loads(response["body"]) == {"error": "the session store is busy; try again"}


def test_signal_results_are_counted_as_emf(bench: Bench, capsys) -> None:
    sid, task_id = parked_napper(bench)
    capsys.readouterr()
    bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"}))
    bench.post_signal(signal_event(sid, task_id, SIGNAL, "k", {"text": "hi"}))
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    counted = {(b["result"], b["route"]): b["SignalResults"] for b in blobs if "SignalResults" in b}
    assert counted == {("delivered", "signal"): [1.0], ("duplicate", "signal"): [1.0]}
    assert all(b["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Bide" for b in blobs)
