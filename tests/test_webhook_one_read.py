"""The capability webhook routes read once (issue 12, goal 3): a four-part token
(``<session>.<task>.<nonce>.<mac>``) names its task, so ``POST /hooks/{token}`` (and its
``/failure`` and ``/heartbeat`` forms, and the ``$failure`` envelope) reads the binding, the
session's head and the task in ONE ``TransactGetItems`` (``Store.task_and_doc_at_head``) and
delivers on that read; a whole signal -> next wait through the webhook is then 6 requests made
by Bide, as on the IAM route. Tokens minted before (``<session>.<nonce>.<mac>``) still deliver,
with their extra read of the binding. A token whose task part was altered is refused as any
unknown token is (404 ``unknown webhook``, nothing read past the binding, nothing written).

Over DynamoDB (moto) through the real signal and worker handlers; counted with botocore's
``before-parameter-build`` events, as tests/test_signal_owner_read.py and
tests/test_request_counts.py count."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aws_fixtures import unique
from handler_fixtures import (
    Bench,
    aws_fixture,
    bench_fixture,
    hook_event,
    response_json,
    run,
)

from bide.engine.store.base import Doc
from bide.service.http import handle_signal
from bide.service.webhooks import (
    StaticWebhookKeys,
    WebhookBinding,
    WebhookRejected,
    binding_key,
    derive_mac,
    make_token,
    parse_token,
    resolve,
    sign,
    token_of,
    token_parts,
)
from bide.tools.webhooks import MAX_TOKEN_TASK_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_requests_history as history
from bench_aws_requests import REPLY, Looper, Stack, build_stack, fake_aws

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

JSON_TYPE = {"content-type": "application/json"}
UNKNOWN = (404, {"error": "unknown webhook"})

#: Each webhook route: (path suffix, body, what it asks of AWS when it delivers on a four-part
#: token). A beat queues no wake.
ROUTES: dict[str, tuple[str, Any, list[str]]] = {
    "value": ("", {"text": "hi"}, ["SendMessage", "TransactGetItems", "TransactWriteItems"]),
    "failure": (
        "/failure",
        {"type": "Denied", "message": "no"},
        ["SendMessage", "TransactGetItems", "TransactWriteItems"],
    ),
    "$failure envelope": (
        "",
        {"$failure": {"type": "Denied", "message": "no"}},
        ["SendMessage", "TransactGetItems", "TransactWriteItems"],
    ),
    "heartbeat": ("/heartbeat", None, ["TransactGetItems", "TransactWriteItems"]),
}


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def parked_hook(b: Bench, sid: str | None = None, **arguments: Any) -> tuple[str, str, str]:
    """A tool call parked on a webhook it minted: (session, task, token)."""
    sid = sid or unique("s")
    task_id = b.start_tool("await_hook", {"heartbeat": 3600.0, **arguments}, sid)
    b.drain()
    assert b.task(sid, task_id).state.status == "sleeping"
    return sid, task_id, b.probe.minted[task_id].token


def three_part(b: Bench, token: str) -> str:
    """The token a version before tokens carried the task handed out for the same binding."""
    parts = token_parts(token)
    found = b.store.get_doc(parts.session_id, binding_key(parts.nonce))
    assert found is not None
    binding = WebhookBinding.from_doc(found.body)
    legacy = make_token(
        binding.session_id, binding.nonce, derive_mac(b.deps.webhook_keys.current(), binding)
    )
    assert legacy.count(".") == 2 and parse_token(legacy) == parse_token(token)
    return legacy


def send(b: Bench, token: str, route: str, headers: dict[str, str] | None = None) -> Any:
    suffix, body, _ = ROUTES[route]
    raw = b"" if body is None else json.dumps(body).encode()
    event = hook_event(token, raw, headers=headers or JSON_TYPE)
    event["rawPath"] += suffix
    event["routeKey"] = event["requestContext"]["routeKey"] = "POST /hooks/{token}" + suffix
    response = run(handle_signal(b.deps, event, None))
    return response["statusCode"], response_json(response)


def reads(made: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(op, p) for op, p in made if op in ("GetItem", "TransactGetItems", "Query")]


def unchanged(b: Bench, sid: str, seq: int, tasks: dict[str, Any]) -> None:
    """Nothing was written or woken since ``seq`` and ``tasks`` were taken."""
    assert b.seq(sid) == seq
    assert b.queued() == []
    for task_id, record in tasks.items():
        assert b.task(sid, task_id) == record


# --- the token ------------------------------------------------------------------------------


def test_minted_tokens_name_the_task_and_the_mac_binds_the_same_identity() -> None:
    binding = WebhookBinding(session_id="s-1", task_id="t-1", signal="sig", key="k", nonce="a" * 32)
    keys = StaticWebhookKeys(b"k" * 32)
    token = token_of(binding, keys)
    mac = derive_mac(keys.current(), binding)
    assert token == f"{b64('s-1')}.{b64('t-1')}.{'a' * 32}.{mac}"
    parts = token_parts(token)
    assert (parts.session_id, parts.task_id, parts.nonce, parts.mac) == (
        "s-1",
        "t-1",
        "a" * 32,
        mac,
    )
    assert parse_token(token) == ("s-1", "a" * 32, mac)  # the same three, either form
    legacy = make_token("s-1", "a" * 32, mac)
    assert token_parts(legacy).task_id is None and parse_token(legacy) == parse_token(token)
    docs = {("s-1", binding_key(binding.nonce)): binding.to_doc()}

    def find(session_id: str, key: str) -> Any:
        return docs.get((session_id, key))

    assert resolve(token, find, keys) == resolve(legacy, find, keys) == binding
    # Another task's id in the token: refused like any unknown token, on hosts that read the
    # binding by itself too (bide.testing, workflow hosts).
    with pytest.raises(WebhookRejected) as refused:
        resolve(make_token("s-1", "a" * 32, mac, "t-2"), find, keys)
    assert (refused.value.status, refused.value.message) == (404, "unknown webhook")


def test_a_task_id_too_long_for_a_token_gets_the_three_part_form() -> None:
    long_id = "t-" + "é" * MAX_TOKEN_TASK_BYTES  # 2 bytes each in UTF-8
    binding = WebhookBinding(session_id="s-1", task_id=long_id, signal="s", key="k", nonce="b" * 32)
    keys = StaticWebhookKeys(b"k" * 32)
    token = token_of(binding, keys)
    assert token.count(".") == 2 and token_parts(token).task_id is None

    def find(session_id: str, key: str) -> Any:
        return binding.to_doc() if key == binding_key(binding.nonce) else None

    assert resolve(token, find, keys) == binding
    # A four-part token naming such a task was never minted: refused before any read.
    forged = f"{b64('s-1')}.{b64(long_id)}.{'b' * 32}.{'0' * 48}"
    with pytest.raises(WebhookRejected):
        token_parts(forged)


@pytest.mark.parametrize(
    "token",
    [
        "a.b.c.d.e",
        f"{b64('s-1')}..{'a' * 32}.{'0' * 48}",  # empty task part
        f".{b64('t-1')}.{'a' * 32}.{'0' * 48}",  # empty session part
        f"{b64('s-1')}.{b64('t-1')}!.{'a' * 32}.{'0' * 48}",  # not base64url
        f"{b64('s-1')}.{b64('t-1')}=.{'a' * 32}.{'0' * 48}",  # padding
        f"{b64('s-1')}.dC0x+.{'a' * 32}.{'0' * 48}",  # the other alphabet
        f"{b64('s-1')}.{b64('t-1')}Z.{'a' * 32}.{'0' * 48}",  # one character past a quantum
        f"{b64('s-1')}.{b64('t-1')}.{'a' * 31}.{'0' * 48}",  # nonce too short
        f"{b64('s-1')}.{b64('t-1')}.{'a' * 32}.{'0' * 47}",  # mac too short
        f"{b64('s-1')}.{base64.urlsafe_b64encode(bytes([0xFF])).decode()}.{'a' * 32}.{'0' * 48}",
    ],
)
def test_malformed_four_part_tokens_are_unknown(token: str) -> None:
    with pytest.raises(WebhookRejected) as refused:
        token_parts(token)
    assert (refused.value.status, refused.value.message) == (404, "unknown webhook")


def test_only_the_canonical_encoding_of_the_task_is_read() -> None:
    # "t-1" encodes as "dC0x"; "t-" as "dC0", whose last character carries two spare bits:
    # "dC1" decodes to the same bytes, and a token altered that way must not be taken.
    assert base64.urlsafe_b64decode("dC1=") == base64.urlsafe_b64decode("dC0=") == b"t-"
    assert token_parts(f"{b64('s-1')}.dC0.{'a' * 32}.{'0' * 48}").task_id == "t-"
    with pytest.raises(WebhookRejected):
        token_parts(f"{b64('s-1')}.dC1.{'a' * 32}.{'0' * 48}")


# --- the routes read once ------------------------------------------------------------------


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_webhook_route_delivers_on_one_read(bench: Bench, route: str) -> None:
    sid, task_id, token = parked_hook(bench)
    assert token_parts(token).task_id == task_id
    seq = bench.seq(sid)
    (status, body), made = bench.aws_requests(lambda: send(bench, token, route))
    assert (status, body["result"]) == (202, "delivered"), body
    ((op, params),) = reads(made)  # exactly one read, before the commit
    assert op == "TransactGetItems"
    keys = [get["Get"]["Key"] for get in params["TransactItems"]]
    assert {k["pk"]["S"] for k in keys} == {sid} and len(keys) == 3
    sort_keys = {k["sk"]["S"] for k in keys}
    nonce = token_parts(token).nonce
    assert any(s.endswith(binding_key(nonce)) for s in sort_keys)
    assert any(s.endswith(task_id) for s in sort_keys)
    assert [op for op, _ in made].index("TransactGetItems") < [op for op, _ in made].index(
        "TransactWriteItems"
    )
    assert sorted(op for op, _ in made) == ROUTES[route][2]
    assert bench.seq(sid) == seq + 1


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_three_part_token_still_delivers_with_its_extra_read(bench: Bench, route: str) -> None:
    sid, _, token = parked_hook(bench)
    legacy = three_part(bench, token)
    seq = bench.seq(sid)
    (status, body), made = bench.aws_requests(lambda: send(bench, legacy, route))
    assert (status, body["result"]) == (202, "delivered"), body
    # The binding first (it names the task), then the head and the task.
    assert [op for op, _ in reads(made)] == ["GetItem", "TransactGetItems"]
    assert sorted(op for op, _ in made) == sorted(["GetItem", *ROUTES[route][2]])
    assert bench.seq(sid) == seq + 1


def test_another_tasks_id_in_the_token_is_refused_and_writes_nothing(bench: Bench) -> None:
    sid, task_a, token_a = parked_hook(bench)
    _, task_b, token_b = parked_hook(bench, sid)  # sleeping on the same signal and key
    seq = bench.seq(sid)
    before = {task_a: bench.task(sid, task_a), task_b: bench.task(sid, task_b)}
    a, b = token_parts(token_a), token_parts(token_b)
    forged = {
        "A's binding and mac, B's task": make_token(sid, a.nonce, a.mac, task_b),
        "B's binding and mac, A's task": make_token(sid, b.nonce, b.mac, task_a),
        "a task the session has not": make_token(sid, a.nonce, a.mac, "t-" + "0" * 32),
        "a one-character change": make_token(sid, a.nonce, a.mac, task_a[:-1] + "x"),
    }
    for what, token in forged.items():
        for route in ROUTES:
            assert send(bench, token, route) == UNKNOWN, (what, route)
    unchanged(bench, sid, seq, before)
    # The genuine tokens still deliver, each to its own task.
    assert send(bench, token_b, "value")[0] == 202
    assert send(bench, token_a, "value")[0] == 202
    bench.drain()
    for task_id in (task_a, task_b):
        text = bench.task(sid, task_id).state.outcome.result["content"][0]["text"]
        assert text == "hook said hi"


def test_refusals_keep_their_order_on_the_one_read(bench: Bench) -> None:
    secret = bench.probe.hmac_secret = secrets.token_hex(16)
    sid, task_id, token = parked_hook(bench, signed=True)
    seq, before = bench.seq(sid), {task_id: bench.task(sid, task_id)}
    parts = token_parts(token)
    body = json.dumps(ROUTES["value"][1]).encode()
    stamp = str(int(bench.clock.now()))
    good = {**JSON_TYPE, "x-bide-timestamp": stamp, "x-bide-signature": sign(secret, stamp, body)}
    forged_task = make_token(sid, parts.nonce, parts.mac, "t-other")
    # The token is checked first: a forged task is unknown even with a good signature.
    assert send(bench, forged_task, "value", good) == UNKNOWN
    # A genuine token without a signature: 401 (the signature is checked next).
    status, answer = send(bench, token, "value")
    assert status == 401 and "X-Bide" in answer["error"]
    status, answer = send(bench, token, "heartbeat")
    assert status == 401 and "X-Bide" in answer["error"]
    # Oversized: 413 before the signature.
    big = hook_event(token, b"x" * (256 * 1024 + 1), headers=JSON_TYPE)
    assert run(handle_signal(bench.deps, big, None))["statusCode"] == 413
    # Malformed tokens make no request at all.
    for bad in ("garbage", token + ".x", f"{b64(sid)}..{parts.nonce}.{parts.mac}"):
        (status, answer), made = bench.aws_requests(lambda bad=bad: send(bench, bad, "value"))
        assert (status, answer) == UNKNOWN and made == []
    unchanged(bench, sid, seq, before)
    assert send(bench, token, "value", good)[0] == 202


# --- a whole round: signal -> next wait through the webhook --------------------------------

#: What Bide asks of AWS for one value through a four-part webhook token and the worker run it
#: wakes, up to the task's next wait (tests/test_request_counts.py has the same by task id).
WEBHOOK_THEN_WAIT = Counter(
    {
        # The signal function: binding, head and task together; then the worker's targeted
        # read of the head, the task and its owner (its wake names the task: no live Query).
        "dynamodb:TransactGetItems": 2,
        # Its commit, one record onto the head (bide.aws.pending); the worker's next sleep,
        # which carries the reservation of the wake (a first delivery holds it until the
        # task's first commit: bide.engine.deferred).
        "dynamodb:UpdateItem": 1,
        "dynamodb:TransactWriteItems": 1,
        "sqs:SendMessage": 1,  # the signal function's wake
    }
)


def bind(stack: Stack, sid: str, task_id: str, key: str, *, legacy: bool = False) -> str:
    """Bind a webhook to ``task_id``'s ``key`` (uncounted, as a tool's mint is); its token."""
    store = stack.deps.store
    binding = WebhookBinding(
        session_id=sid, task_id=task_id, signal=REPLY.name, key=key, nonce=secrets.token_hex(16)
    )
    doc = Doc(binding_key(binding.nonce), binding.to_doc())
    store.commit(sid, store.head(sid), [], [doc])
    mac = derive_mac(stack.deps.webhook_keys.current(), binding)
    return make_token(sid, binding.nonce, mac, None if legacy else task_id)


def by_bide(stack: Stack, tally: Any) -> Counter[str]:
    return Counter({op: n for (origin, op), n in tally.requests.items() if origin == "bide" and n})


async def webhook_rounds(stack: Stack, legacy: bool) -> list[Counter[str]]:
    sid = unique("hook-loop")
    looper = await history.built_history(stack, sid, Looper, 3)  # asleep on k3
    await history.warm_worker(stack, sid)
    out = []
    for i in (3, 4):
        token = bind(stack, sid, looper, f"k{i}", legacy=legacy)
        with stack.meter.counting() as tally:
            event = hook_event(token, b'{"text": "x"}', headers=JSON_TYPE)
            response = await handle_signal(stack.deps, event, None)
            await stack.worker()
        assert response["statusCode"] == 202, response
        assert sum(tally.wakes.values()) == 1  # one worker run
        record = stack.deps.store.get_task(sid, looper)
        assert record is not None and record.state.status == "sleeping"  # the next wait
        out.append(by_bide(stack, tally))
    return out


def test_signal_to_next_wait_through_a_webhook_is_five_requests() -> None:
    with fake_aws():
        stack = build_stack()
        rounds = asyncio.run(webhook_rounds(stack, legacy=False))
        legacy_rounds = asyncio.run(webhook_rounds(stack, legacy=True))
    for counts in rounds:
        assert counts == WEBHOOK_THEN_WAIT
        assert sum(counts.values()) == 5 < history.GOAL["signal -> next wait"] == 6
    # A token handed out before: the same, and its binding's GetItem first (6).
    for counts in legacy_rounds:
        assert counts == WEBHOOK_THEN_WAIT + Counter({"dynamodb:GetItem": 1})
