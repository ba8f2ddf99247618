"""Hostile-input fuzzing of the signal and webhook routes, over HTTP on the local stack
(``bide dev`` in-process on 127.0.0.1, port 0: the handlers the signal function runs).

hypothesis sends requests to ``POST /sessions/{id}/tasks/{task}/signals/{signal}/{key}``
(keys plain and stream, signals known and not), to ``POST /hooks/{token}`` (a plain webhook,
a stream webhook, an HMAC-signed stream webhook, mangled and made-up tokens): arbitrary
bytes, JSON of every shape with unicode keys, nesting around and far past the depth limit,
integers past the digit limit, ``NaN``, wrong and missing content types, and random or
genuine ``X-Bide-Timestamp``/``X-Bide-Signature`` headers. After every request:

* no answer is a 5xx;
* a ``delivered`` (202) stored exactly the value sent, under one new key, readable back;
* any other answer (2xx ``duplicate``/``closed`` included) stored nothing: the session's
  sequence number and the values held on the task are unchanged;
* the session loads from a fresh read of its JSON.

CI-sized (:data:`EXAMPLES` requests, well under a minute); ``CI`` set makes it
deterministic, as in the model-based test. ``pytest -s`` prints the statuses seen.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from aws_fixtures import unique
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limits_fixtures import BLOB, WAIT_KEY, HttpSession, http, limits_app, nested

from bide.engine.limits import MAX_JSON_DEPTH, MAX_VALUE_BYTES
from bide.local import LocalStack
from bide.local.thread import BackgroundStack
from bide.service.webhooks import sign

EXAMPLES = 300
STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpSession]:
    db = str(tmp_path_factory.mktemp("fuzz") / "dev.sqlite")
    with BackgroundStack(LocalStack(limits_app(), db, port=0)) as running:
        session = HttpSession(running, unique("s"))
        yield session
        session.close()


# --- strategies ----------------------------------------------------------------------------------

HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
KEY_TEXT = st.text(min_size=1, max_size=20).filter(lambda k: k != WAIT_KEY)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ["json", "json", "bytes", "deep", "huge int", "constant", "unicode", "text", "big"]
        )
    )
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "deep":
        depth = draw(st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1]))
        depth = draw(st.one_of(st.just(depth), st.integers(0, 100_000)))
        return json.dumps(nested(depth)).encode() if depth < 400 else b"[" * depth + b"]" * depth
    if kind == "huge int":
        digits = draw(st.integers(4_200, 4_400))
        return b'{"n": ' + b"7" * digits + b"}"
    if kind == "constant":
        return draw(
            st.sampled_from(
                [b"NaN", b"[Infinity]", b'{"x": -Infinity}', b"1e400", b'"\\ud800"',
                 b'{"\\udfff": 1}', b"\xef\xbb\xbf{}", b"[1e9, 1E+2, -0.0]"]
            )
        )  # fmt: skip
    if kind == "big":  # around the value size limit, the body limit and the task's budget
        size = MAX_VALUE_BYTES + draw(st.integers(-3, 3))
        return json.dumps("b" * (size - 2)).encode()
    if kind == "unicode":
        keys = st.text(st.characters(blacklist_categories=["Cs"]), max_size=8)
        value = draw(st.dictionaries(keys, st.text(), max_size=4))
        return json.dumps(value, ensure_ascii=draw(st.booleans())).encode()
    return draw(st.text(max_size=40)).encode("utf-8", "surrogatepass")


# Mostly JSON, so most requests get past the content type to the checks behind it.
CONTENT_TYPES = st.integers(0, 9).flatmap(
    lambda n: (
        st.sampled_from(["application/json", "application/json; charset=utf-8", "APPLICATION/JSON"])
        if n < 8
        else st.one_of(st.just("text/plain"), st.none(), HEADER_TEXT)
    )
)


@st.composite
def requests(draw: st.DrawFn, web: HttpSession) -> tuple[str, bytes, dict[str, str]]:
    body = draw(bodies())
    target = draw(st.sampled_from(["signal", "stream", "hook", "signed", "bad token"]))
    if target == "signal":
        key = draw(st.one_of(KEY_TEXT, KEY_TEXT.map(lambda k: k + ".*")))
        signal = draw(st.one_of(st.just(BLOB.name), st.text(min_size=1, max_size=10)))
        url = web.signal_url(key, signal)
    elif target == "stream":
        url = web.stream_url
    elif target == "hook":
        url = web.hook_url
    elif target == "signed":
        url = web.signed_url
    else:  # the real session's token with its secret changed, or text
        real = web.signed_url.rsplit("/", 1)[1]
        mangled = draw(st.one_of(st.just(real[:-1]), st.just(real + "0"), HEADER_TEXT))
        url = f"{web.stack.url}/hooks/{quote(mangled, safe='') or 'x'}"
    headers: dict[str, str] = {}
    content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type
    signing = draw(st.sampled_from(["genuine", "random", "none", "stale"]))
    now = int(time.time())
    if signing in ("genuine", "stale"):
        stamp = str(now if signing == "genuine" else now - 3600)
        headers["X-Bide-Timestamp"] = stamp
        headers["X-Bide-Signature"] = sign(web.hmac_secret, stamp, body)
    elif signing == "random":
        headers["X-Bide-Timestamp"] = draw(HEADER_TEXT)
        headers["X-Bide-Signature"] = draw(HEADER_TEXT)
    return url, body, headers


# --- the invariants ------------------------------------------------------------------------------


def test_fuzzed_signal_and_webhook_requests(web: HttpSession) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        url, body, headers = data.draw(requests(web))
        before_seq, before = web.head(), web.held()
        status, answer = http("POST", url, body, headers)
        STATUSES[status] += 1
        what = f"POST {url[len(web.stack.url) :][:80]} {headers} {body[:120]!r}"
        assert status < 500, f"{what} -> {status}: {answer}"
        after = web.held()  # loads the session from its stored JSON: it always loads
        if status == 202:
            assert answer["result"] == "delivered", answer
            added = {k: v for k, v in after.items() if k not in before}
            assert list(added.values()) == [json.loads(body)], (what, added)
            assert {k: v for k, v in after.items() if k in before} == before
        else:
            assert isinstance(answer, dict), (what, status, answer)
            assert web.head() == before_seq, f"{what} -> {status} wrote to the session"
            assert after == before, what
            if status >= 400:  # says why (an unmatched path gets the router's "Not Found")
                assert answer.get("error") or answer.get("message"), (what, answer)

    started = time.perf_counter()
    check()
    assert web.store.get_task(web.sid, web.task).state.status == "sleeping"  # type: ignore[union-attr]
    print(
        f"\nfuzzed signal routes: {sum(STATUSES.values())} requests, "
        f"{dict(sorted(STATUSES.items()))}, {time.perf_counter() - started:.1f}s"
    )
    assert STATUSES[202] and STATUSES[400] and STATUSES[401] and STATUSES[404]
