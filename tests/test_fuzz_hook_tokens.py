"""Hostile-input fuzzing of webhook tokens' task part, over HTTP on the local stack (``bide dev``
in-process on 127.0.0.1, port 0: the handlers the signal function runs).

A token names its task (``<session>.<task>.<nonce>.<mac>``) so the route reads the binding, the
head and the task together; the task part is therefore input the route acts on before the mac
is checked. hypothesis sends a genuine four-part token with its task part replaced (another
text, base64url or not, long, empty, non-canonical), characters changed, inserted or deleted
anywhere, parts dropped, repeated or swapped, to the value, ``/failure`` and ``/heartbeat``
routes. Every one must be answered 404 ``unknown webhook`` (never a 5xx), and nothing is
written: the session's sequence number and the values on its task stay as they were. The
genuine token, and its three-part form handed out before tokens carried the task, still
deliver afterwards. CI-sized; ``CI`` set makes it deterministic.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from aws_fixtures import unique
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limits_fixtures import HttpSession, http, limits_app

from bide.local import LocalStack
from bide.local.thread import BackgroundStack
from bide.service.webhooks import binding_key, make_token, token_parts

EXAMPLES = 200
ROUTES = ("", "/failure", "/heartbeat")
UNKNOWN = (404, {"error": "unknown webhook"})


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpSession]:
    db = str(tmp_path_factory.mktemp("fuzz-tokens") / "dev.sqlite")
    with BackgroundStack(LocalStack(limits_app(), db, port=0)) as running:
        session = HttpSession(running, unique("s"))
        yield session
        session.close()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@st.composite
def task_parts(draw: st.DrawFn, real: str) -> str:
    kind = draw(st.sampled_from(["text", "bytes", "raw", "edit", "long", "padded", "other"]))
    if kind == "text":
        return b64(draw(st.text(max_size=40)).encode())
    if kind == "bytes":
        return b64(draw(st.binary(max_size=40)))
    if kind == "raw":  # not base64url at all
        return draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40))
    if kind == "long":
        return b64(b"t-" + b"0" * draw(st.integers(200, 2000)))
    if kind == "padded":
        return real + "=" * draw(st.integers(1, 2))
    if kind == "other":  # the other base64 alphabet, or a task of the same shape
        return draw(st.sampled_from([real.replace("-", "+"), b64(b"t-" + b"0" * 32)]))
    position = draw(st.integers(0, len(real)))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    char = draw(st.sampled_from(alphabet))
    how = draw(st.sampled_from(["replace", "insert", "delete"]))
    if how == "insert":
        return real[:position] + char + real[position:]
    if how == "delete":
        return real[:position] + real[position + 1 :]
    return real[:position] + char + real[position + 1 :]


@st.composite
def forged_tokens(draw: st.DrawFn, token: str) -> str:
    session, task, nonce, mac = token.split(".")
    shape = draw(st.sampled_from(["task", "task", "task", "drop", "repeat", "swap", "anywhere"]))
    if shape == "task":
        return f"{session}.{draw(task_parts(task))}.{nonce}.{mac}"
    parts = [session, task, nonce, mac]
    if shape == "drop":  # the three-part form without its task is the genuine legacy token,
        del parts[draw(st.sampled_from([0, 2, 3]))]  # so only other parts are dropped
    elif shape == "repeat":
        i = draw(st.integers(0, 3))
        parts.insert(i, parts[i])
    elif shape == "swap":
        i, j = draw(st.sampled_from([(0, 1), (1, 2), (0, 2)]))
        parts[i], parts[j] = parts[j], parts[i]
    else:
        text = ".".join(parts)
        position = draw(st.integers(0, len(text) - 1))
        char = draw(st.sampled_from("ABCabc019-_.=+/%"))
        return text[:position] + char + text[position + 1 :]
    return ".".join(parts)


def test_forged_task_parts_are_unknown_and_write_nothing(web: HttpSession) -> None:
    token = web.hook_url.rsplit("/", 1)[-1]
    assert token.count(".") == 3 and token_parts(token).task_id == web.task
    seen: set[str] = set()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=list(HealthCheck),
    )
    @given(forged=forged_tokens(token), route=st.sampled_from(ROUTES))
    def check(forged: str, route: str) -> None:
        if forged == token:
            return  # an edit that changed nothing (inserted and deleted the same character)
        seen.add(forged)
        before_seq, before = web.head(), web.held()
        url = f"{web.stack.url}/hooks/{quote(forged, safe='') or 'x'}{route}"
        status, answer = http("POST", url, b"{}", {"Content-Type": "application/json"})
        assert (status, answer) == UNKNOWN, (forged, route, status, answer)
        assert web.head() == before_seq and web.held() == before, forged

    check()
    assert len(seen) > EXAMPLES // 2
    # The genuine tokens, and the three-part token of the same binding, still deliver (the
    # stream webhook: each value goes to the next member of its stream).
    stream = web.stream_url.rsplit("/", 1)[-1]
    parts = token_parts(stream)
    assert web.store.get_doc(web.sid, binding_key(parts.nonce)) is not None
    legacy = make_token(parts.session_id, parts.nonce, parts.mac)
    for url in (web.stream_url, f"{web.stack.url}/hooks/{legacy}"):
        seq = web.head()
        status, answer = http("POST", url, b'{"v": 1}', {"Content-Type": "application/json"})
        assert (status, answer["result"]) == (202, "delivered"), answer
        assert web.head() == seq + 1
