"""Hostile input, end to end over HTTP on the local stack (``bide dev`` started in-process on
127.0.0.1 with a free port: the same handlers the Lambda functions run).

* schemathesis generates requests from ``docs/openapi.json`` for every operation, valid
  ones and ones that break the schema (wrong types, missing fields, odd path segments):
  no answer is a 5xx; afterwards every stored submission and conversation head validates,
  and every session in the store was created by a request that was answered 2xx.
* A tool mints a signed capability webhook; then a forged token (the real session, a secret
  it never issued), a wrong signature, a replay outside the time window, an oversized body,
  a wrong content type, a malformed body and an unknown token are each refused with a 4xx
  saying why, and none of them stores anything. The genuine call is then delivered.

``pytest -s`` prints how many generated requests each operation got.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.register_assert_rewrite("aws_fixtures", "handler_fixtures", "proof_fixtures")
from limits_fixtures import http, post_json  # noqa: E402
from proof_fixtures import ProofProbe, proof_app  # noqa: E402
from stack_kit import local_stack, wait_for  # noqa: E402

from bide import SQLiteStore  # noqa: E402
from bide.agent.conversation import ConversationHead, Submission  # noqa: E402
from bide.constants import MAX_WEBHOOK_BODY_BYTES, WEBHOOK_SIGNATURE_WINDOW_SECONDS  # noqa: E402
from bide.service.api_models import MAX_CONTENT_CHARS, REQUEST_ID_PATTERN  # noqa: E402
from bide.service.owners import INDEX_PARTITION_PREFIX  # noqa: E402
from bide.service.webhooks import (  # noqa: E402
    WebhookBinding,
    WebhookRejected,
    make_token,
    parse_token,
    sign,
    verify,
)

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = schemathesis.openapi.from_path(ROOT / "docs" / "openapi.json")
EXAMPLES_PER_OPERATION = 30  # per generation mode: valid and schema-breaking
HMAC_SECRET = secrets.token_hex(16)


@pytest.fixture(scope="module")
def probe() -> ProofProbe:
    found = ProofProbe()
    found.hmac_secret = HMAC_SECRET
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, probe: ProofProbe) -> Iterator[Any]:
    with local_stack(proof_app(probe), tmp_path_factory.mktemp("hostile")) as running:
        assert running.url.startswith("http://127.0.0.1:")
        yield running


def stored(stack: Any) -> SQLiteStore:
    """A second connection to the stack's file: what is really stored."""
    return SQLiteStore(stack.stack.db_path)


def session_ids(stack: Any) -> set[str]:
    """Every session the file holds anything for (the store contract has no listing: read the
    SQLite file itself, read-only)."""
    db = sqlite3.connect(f"file:{stack.stack.db_path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT session_id FROM heads UNION SELECT session_id FROM docs")
        # Not the owners' indexes of their sessions (bide.service.owners): no sessions.
        return {row[0] for row in rows.fetchall() if not row[0].startswith(INDEX_PARTITION_PREFIX)}
    finally:
        db.close()


# --- schemathesis against the sessions API ----------------------------------------------------

OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_generated_requests_never_get_a_5xx(stack: Any, operation: Any) -> None:
    known = create_session(stack)
    statuses: Counter[int] = Counter()
    strategies = [operation.as_strategy(mode) for mode in schemathesis.GenerationMode]
    if "{session_id}" in operation.path:
        # Half the requests name a session that exists, so they get past the lookup.
        # The events route of a session without events would long-poll for up to `wait`
        # real seconds (bide.service.host): ask the existing session without waiting;
        # generated waits still reach it for unknown sessions and bad values (at once 4xx).
        no_wait = {"query": {"wait": 0}} if operation.path.endswith("/events") else {}
        strategies += [
            operation.as_strategy(mode, path_parameters={"session_id": known}, **no_wait)
            for mode in schemathesis.GenerationMode
        ]

    @settings(
        max_examples=EXAMPLES_PER_OPERATION * 2,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(strategies))
    def check(case: Any) -> None:
        response = case.call(base_url=stack.url, timeout=30, allow_redirects=False)
        statuses[response.status_code] += 1
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: "
            f"{response.text[:300]}\n{case.as_curl_command()}"
        )
        creates = operation.path == "/sessions" and operation.method.upper() == "POST"
        if creates and response.status_code in (200, 201):
            CREATED.add(response.json()["session_id"])
        elif creates:
            assert response.status_code in (400, 404, 405, 415, 422), response.text

    check()
    assert sum(statuses.values()) >= EXAMPLES_PER_OPERATION, statuses
    print(f"\n{operation.method.upper()} {operation.path}: {dict(sorted(statuses.items()))}")
    check_nothing_invalid_stored(stack)


CREATED: set[str] = set()  # every session id a create was answered 2xx for


def create_session(stack: Any) -> str:
    status, body = post_json(f"{stack.url}/sessions", {})
    assert status in (200, 201), body
    CREATED.add(body["session_id"])
    return str(body["session_id"])


def check_nothing_invalid_stored(stack: Any) -> tuple[int, int]:
    """Sessions exist only where a create was answered 2xx; every stored conversation head
    and submission validates. How many sessions and submissions there are."""
    found = session_ids(stack)
    assert found <= CREATED, sorted(found - CREATED)[:5]
    return len(found), check_documents(stack, found)


def check_documents(stack: Any, sessions: set[str]) -> int:
    store = stored(stack)
    count = 0
    try:
        for sid in sessions:
            head = store.get_doc(sid, "conv/main")
            assert head is not None, f"session {sid} has no conversation"
            ConversationHead.model_validate(head.body)
            for doc in store.list_docs(sid, "conv/main/s/"):
                submission = Submission.model_validate(doc.body)
                assert 1 <= len(submission.content) <= MAX_CONTENT_CHARS
                assert re.fullmatch(REQUEST_ID_PATTERN, submission.id), submission.id
                assert doc.key == f"conv/main/s/{submission.id}"
                count += 1
    finally:
        store.close()
    return count


def test_after_all_generated_requests_the_store_holds_only_valid_data(stack: Any) -> None:
    assert stack.settle(10)
    sessions, submissions = check_nothing_invalid_stored(stack)
    assert sessions and submissions, "the generated requests stored nothing at all"
    print(f"\nstore after the generated requests: {sessions} sessions, {submissions} submissions")


def test_a_body_that_is_not_utf8_is_a_400_not_a_500(stack: Any) -> None:
    """What schemathesis found first: the byte 0x80 as a JSON body used to be a 500."""
    sid = create_session(stack)
    for path in (f"/sessions/{sid}/inputs", "/sessions", f"/sessions/{sid}/stop"):
        status, body = http(
            "POST", f"{stack.url}{path}", b"\x80", {"Content-Type": "application/json"}
        )
        assert status == 400, (path, status, body)
        assert "not valid UTF-8" in body["error"], body
    store = stored(stack)
    try:
        assert store.list_docs(sid, "conv/main/s/") == []
    finally:
        store.close()


# --- webhooks over HTTP --------------------------------------------------------------------------


def signed_headers(body: bytes, secret: str, at: float) -> dict[str, str]:
    timestamp = str(int(at))
    return {
        "Content-Type": "application/json",
        "X-Bide-Timestamp": timestamp,
        "X-Bide-Signature": sign(secret, timestamp, body),
    }


def test_webhook_attacks_are_refused_clearly_and_store_nothing(
    stack: Any, probe: ProofProbe
) -> None:
    sid = create_session(stack)
    body = {"content": 'call await_hook {"signed": true}', "request_id": "r1"}
    assert post_json(f"{stack.url}/sessions/{sid}/inputs", body)[0] in (200, 201, 202)

    def minted() -> Any:
        hooks = [h for h in probe.minted.values() if parse_token(h.token)[0] == sid]
        return hooks[0] if hooks else None

    hook = wait_for(minted, "the tool to mint its webhook", 15.0)
    assert hook.url.startswith(f"{stack.url}/hooks/")
    assert stack.settle(10)
    store = stored(stack)
    try:
        (call,) = [t for t in store.load(sid).tasks.values() if t.kind == "bide.tool"]
        seq = store.head(sid)
    finally:
        store.close()

    good = json.dumps({"text": "green"}).encode()
    now = time.time()
    # Far past the window on either side: the cases below take real time, and a timestamp just
    # past the window (now + 301, truncated) drifts back inside it on a slow machine. The exact
    # boundary is checked with an injected clock in test_webhook_window_boundary.
    outside = 10 * WEBHOOK_SIGNATURE_WINDOW_SECONDS
    # The real session and binding (nonce), a made-up mac.
    forged_token = make_token(sid, parse_token(hook.token)[1], secrets.token_hex(24))
    cases = [
        ("forged token", f"{stack.url}/hooks/{forged_token}", good,
         signed_headers(good, HMAC_SECRET, now), 404, "unknown webhook"),
        ("wrong signing secret", hook.url, good, signed_headers(good, "not-the-secret", now),
         401, "signature does not match"),
        ("signature of another body", hook.url, good,
         signed_headers(b'{"text": "other"}', HMAC_SECRET, now), 401, "signature does not match"),
        ("replayed: timestamp too old", hook.url, good,
         signed_headers(good, HMAC_SECRET, now - outside), 401, "window"),
        ("timestamp in the future", hook.url, good,
         signed_headers(good, HMAC_SECRET, now + outside), 401, "window"),
        ("no signature", hook.url, good, {"Content-Type": "application/json"}, 401,
         "X-Bide-Signature"),
        ("oversized", hook.url, b"x" * (MAX_WEBHOOK_BODY_BYTES + 1),
         {"Content-Type": "application/json"}, 413, "limit"),
        ("wrong content type", hook.url, good,
         {**signed_headers(good, HMAC_SECRET, now), "Content-Type": "text/plain"}, 415,
         "content type must be application/json"),
        ("malformed JSON", hook.url, b"{oops", signed_headers(b"{oops", HMAC_SECRET, now), 400,
         "not valid JSON"),
        ("unknown token",
         f"{stack.url}/hooks/{'A' * 43}.{secrets.token_hex(16)}.{secrets.token_hex(24)}", good,
         signed_headers(good, HMAC_SECRET, now), 404, "unknown webhook"),
        ("garbage token", f"{stack.url}/hooks/garbage", good,
         {"Content-Type": "application/json"}, 404, "unknown webhook"),
    ]  # fmt: skip
    for name, url, raw, headers, status, message in cases:
        got, answer = http("POST", url, raw, headers)
        assert got == status, (name, got, answer)
        assert isinstance(answer, dict) and message in answer["error"], (name, answer)
    assert stack.settle(10)
    store = stored(stack)
    try:
        assert store.head(sid) == seq, "a refused request wrote to the session"
        record = store.get_task(sid, call.id)
        assert record is not None and record.state.status == "sleeping"
        assert record.signals == {}, record.signals
    finally:
        store.close()

    # The genuine call is delivered, once.
    status, answer = http("POST", hook.url, good, signed_headers(good, HMAC_SECRET, time.time()))
    assert (status, answer["result"]) == (202, "delivered")
    status, answer = http("POST", hook.url, good, signed_headers(good, HMAC_SECRET, time.time()))
    assert status in (200, 410) and answer["result"] in ("duplicate", "closed")
    wait_for(
        lambda: stack.settle(1) and stored_outcome(stack, sid, call.id), "the call to end", 15.0
    )
    assert stored_outcome(stack, sid, call.id) == "hook said green"


def stored_outcome(stack: Any, sid: str, task_id: str) -> str | None:
    store = stored(stack)
    try:
        record = store.get_task(sid, task_id)
    finally:
        store.close()
    if record is None or record.state.status != "terminal":
        return None
    return str(record.state.outcome.result["content"][0]["text"])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [
        (0, True),
        (WEBHOOK_SIGNATURE_WINDOW_SECONDS, True),
        (-WEBHOOK_SIGNATURE_WINDOW_SECONDS, True),
        (WEBHOOK_SIGNATURE_WINDOW_SECONDS + 1, False),
        (-WEBHOOK_SIGNATURE_WINDOW_SECONDS - 1, False),
    ],
)
def test_webhook_window_boundary(offset: int, accepted: bool) -> None:
    """The window's edges with the clock injected: exactly ``window`` seconds either way is
    accepted, one second more is refused (no wall time involved, so no flake)."""
    now = 1_700_000_000.0
    binding = WebhookBinding(
        session_id="s", task_id="t", signal="hook", key="k", hmac_secret=HMAC_SECRET
    )
    body = b'{"text": "green"}'
    headers = {k.lower(): v for k, v in signed_headers(body, HMAC_SECRET, now + offset).items()}
    if accepted:
        verify(binding, headers, body, now)
    else:
        with pytest.raises(WebhookRejected) as refused:
            verify(binding, headers, body, now)
        assert refused.value.status == 401 and "window" in refused.value.message


@pytest.mark.parametrize(
    "timestamp", ["nan", "NaN", "inf", "-inf", "1e9", " 1700000000", "+1700000000", "1700000000.5",
                  "-1", "\uff11" * 10, "9" * 13]
)  # fmt: skip
def test_webhook_timestamps_must_be_whole_seconds(timestamp: str) -> None:
    """A timestamp that is not plain whole seconds is refused before any window arithmetic:
    ``nan`` compares false with everything, so a window check alone let it through."""
    now = 1_700_000_000.0
    binding = WebhookBinding(
        session_id="s", task_id="t", signal="hook", key="k", hmac_secret=HMAC_SECRET
    )
    body = b'{"text": "green"}'
    headers = {
        "x-bide-timestamp": timestamp,
        "x-bide-signature": sign(HMAC_SECRET, timestamp, body),  # a valid signature of it
    }
    with pytest.raises(WebhookRejected) as refused:
        verify(binding, headers, body, now)
    assert refused.value.status == 401 and "whole Unix seconds" in refused.value.message
