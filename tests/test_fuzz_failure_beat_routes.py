"""Hostile-input fuzzing of the failure and heartbeat forms of the signal and webhook routes,
over HTTP on the local stack (``bide dev`` in-process on 127.0.0.1, port 0), with the
strategies of :mod:`test_fuzz_signal_routes` and the fixtures of :mod:`limits_fixtures`.

Failures: hypothesis sends failures well formed and not (type missing, empty, blank, over
128 characters or not a string; message not a string or over 16 KiB; data nested past the
depth limit or past the body limit; unknown fields; bodies that are not objects; the
``$failure`` envelope with keys beside it) to ``POST .../signals/{signal}/{key}/failure`` and
``POST /hooks/{token}/failure`` (plain, stream and HMAC-signed webhooks) and, as
``{"$failure": ...}``, to the plain routes; plus the arbitrary bodies and headers of the
plain-route fuzzer. After every request:

* no answer is a 5xx;
* a ``delivered`` (202) stored exactly the failure sent (type, message, data) under one new
  key, and ``read_signal`` returns it as :class:`~bide.SignalFailed`;
* a malformed failure with otherwise good headers gets 400 naming the field (413 past the
  body limit); any answer but 202 stored nothing (the session's sequence number and the
  task's values and failures unchanged); the session loads from a fresh read of its JSON.

Heartbeats: ``POST .../heartbeat`` on both routes, to a task sleeping with a heartbeat and to
one sleeping without, with arbitrary bodies and signatures. A beat never stores a value and
changes nothing but the sleep's ``beat_by`` (and the record's revision); to the signed
webhook, an unsigned, stale or mis-signed beat is refused 401 and writes nothing.

CI-sized (:data:`EXAMPLES` requests per test, well under a minute); ``CI`` set makes it
deterministic, like :mod:`test_fuzz_signal_routes`. ``pytest -s`` prints the statuses seen.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fixtures import unique
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limits_fixtures import (
    BLOB,
    HOLDER,
    RAISER,
    STORER,
    HttpSession,
    bind_webhook,
    http,
    nested,
)
from test_fuzz_signal_routes import CONTENT_TYPES, KEY_TEXT, bodies, json_values

from bide import (
    App,
    Harness,
    SignalFailed,
    Sleeping,
    SQLiteStore,
    TaskRuntime,
    TaskView,
    define_task,
)
from bide.constants import MAX_WEBHOOK_BODY_BYTES
from bide.engine.failures import MAX_FAILURE_MESSAGE, MAX_FAILURE_TYPE
from bide.engine.limits import MAX_JSON_DEPTH
from bide.engine.runtime import Runtime
from bide.engine.state import Running
from bide.local import LocalStack
from bide.local.thread import BackgroundStack
from bide.service.webhooks import sign

EXAMPLES = 150
STATUSES: dict[str, Counter[int]] = {"failure": Counter(), "beat": Counter()}
BEAT_KEY, HEARTBEAT = "beat", 3600.0
MOVED = [0]  # delivered beats that moved the beater's beat_by
READ: Counter[str] = Counter()  # delivered failures read back, by form


async def _beat_sleep(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(
        Sleeping(checkpoint="done", signals=(BLOB.key(BEAT_KEY),), until=1e12, heartbeat=HEARTBEAT)
    )


BEATER = define_task("test.beater", 1, lambda _input: "sleep", {"sleep": _beat_sleep})
"""Sleeps on :data:`BEAT_KEY` with a heartbeat: a beat moves its ``beat_by``."""


class Stage:
    """The fuzzed session (:class:`HttpSession`: a parked holder and its webhooks) plus a
    parked :data:`BEATER` with a plain and a signed webhook on its key."""

    def __init__(self, running: Any) -> None:
        self.web = HttpSession(running, unique("s"))
        store = SQLiteStore(running.stack.db_path)

        async def setup() -> tuple[str, str, str]:
            h = Harness(store, self.web.sid, [HOLDER, STORER, BEATER])
            await h.open()
            task = await h.create_task(BEATER)
            await h.run_until_parked()
            keys = running.stack.webhook_keys
            plain = bind_webhook(h, task, BEAT_KEY, keys=keys)
            signed = bind_webhook(h, task, BEAT_KEY, hmac_secret=self.web.hmac_secret, keys=keys)
            await h.close()
            return task, plain, signed

        self.beater, plain, signed = asyncio.run(setup())
        store.close()
        self.beat_hook = f"{running.url}/hooks/{plain}"
        self.beat_signed = f"{running.url}/hooks/{signed}"
        base = self.web.signal_base.rsplit("/tasks/", 1)[0]
        self.beat_signal = f"{base}/tasks/{self.beater}/signals/{BLOB.name}/{BEAT_KEY}"

    def records(self) -> dict[str, dict[str, Any]]:
        """Every task's record as stored (JSON), by task id."""
        store = self.web.store
        out = {}
        for task_id in store.load(self.web.sid).tasks:
            record = store.get_task(self.web.sid, task_id)
            assert record is not None
            out[task_id] = json.loads(record.to_json())
        return out

    def failures(self) -> dict[str, dict[str, Any]]:
        """The failures held on the holder, by slot."""
        record = self.web.store.get_task(self.web.sid, self.web.task)
        assert record is not None
        again = type(record).from_json(record.to_json())
        return {k: s.failure for k, s in again.signals.items() if s.failure is not None}

    def read_failure(self, slot: str) -> Any:
        """``read_signal`` on the holder for ``slot``, as a phase would call it."""
        key = slot.split("/", 1)[1] if "/" in slot else slot
        store = SQLiteStore(self.web.stack.stack.db_path)

        async def read() -> Any:
            h = Harness(store, self.web.sid, [HOLDER, STORER, BEATER])
            await h.open()
            try:
                # A runtime is built for a running task; this one only reads (read_signal
                # looks at the harness's record, not at the one it was built from).
                record = h._live[self.web.task]
                running = Running(checkpoint=record.state.checkpoint)  # type: ignore[union-attr]
                handle = Runtime(h, record.replace(state=running), "fuzz", aborting=False)
                return await handle.read_signal(BLOB, key)
            finally:
                await h.close()

        try:
            return asyncio.run(read())
        finally:
            store.close()


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    db = str(tmp_path_factory.mktemp("fuzz-fb") / "dev.sqlite")
    app = App(tasks=[HOLDER, STORER, RAISER, BEATER], signals=[BLOB])
    with BackgroundStack(LocalStack(app, db, port=0)) as running:
        built = Stage(running)
        yield built
        built.web.close()


# --- strategies ----------------------------------------------------------------------------------

TYPES = st.text(min_size=1, max_size=MAX_FAILURE_TYPE).filter(lambda t: t.strip() != "")


@st.composite
def failures(draw: st.DrawFn) -> tuple[Any, str | None]:
    """A failure's JSON form and the field a malformed one must be refused for (None: valid;
    "(size)": past the body limit)."""
    good: dict[str, Any] = {"type": draw(TYPES), "message": draw(st.text(max_size=60))}
    if draw(st.booleans()):
        good["data"] = draw(json_values)
    kind = draw(
        st.sampled_from(
            ["valid", "valid", "valid", "no type", "no message", "empty type", "long type",
             "type not text", "message not text", "long message", "deep data", "big data",
             "extra field", "not an object"]
        )
    )  # fmt: skip
    bad = dict(good)
    if kind == "valid":
        return good, None
    if kind in ("no type", "no message"):
        field = kind.split()[1]
        del bad[field]
        return bad, field
    if kind == "empty type":
        bad["type"] = draw(st.sampled_from(["", " ", "\t\n", "   "]))
        return bad, "type"
    if kind == "long type":
        bad["type"] = "t" * (MAX_FAILURE_TYPE + draw(st.integers(1, 3)))
        return bad, "type"
    if kind in ("type not text", "message not text"):
        field = kind.split()[0]
        bad[field] = draw(json_values.filter(lambda v: not isinstance(v, str)))
        return bad, field
    if kind == "long message":
        bad["message"] = "m" * (MAX_FAILURE_MESSAGE + draw(st.integers(1, 3)))
        return bad, "message"
    if kind == "deep data":
        bad["data"] = nested(MAX_JSON_DEPTH + draw(st.integers(1, 3)))
        return bad, "data"
    if kind == "big data":
        bad["data"] = "d" * (MAX_WEBHOOK_BODY_BYTES + draw(st.integers(-2, 2)))
        return bad, "(size)"
    if kind == "extra field":
        name = draw(st.text(max_size=8).filter(lambda k: k not in good))
        bad[name] = draw(json_values)
        return bad, name
    return draw(json_values.filter(lambda v: not isinstance(v, dict))), "(failure)"


@st.composite
def failure_requests(draw: st.DrawFn, stage: Stage) -> tuple[str, bytes, dict[str, str], Any]:
    """(url, body, headers, oracle): the oracle is the failure sent and the field a refusal
    must name when the headers are good, else None (any body, any headers)."""
    web = stage.web
    target = draw(st.sampled_from(["signal", "stream", "hook", "signed"]))
    if target == "signal":
        key = draw(st.one_of(KEY_TEXT, KEY_TEXT.map(lambda k: k + ".*")))
        url = web.signal_url(key)
    else:
        url = {"stream": web.stream_url, "hook": web.hook_url, "signed": web.signed_url}[target]
    oracle: Any = None
    form = draw(st.sampled_from(["route", "route", "envelope", "envelope", "any body"]))
    if form == "any body":
        body = draw(bodies())
        url += draw(st.sampled_from(["", "/failure"]))
    else:
        failure, field = draw(failures())
        sent: Any = failure
        if form == "route":
            url += "/failure"
        else:
            sent = {"$failure": failure}
            if draw(st.integers(0, 4)) == 0:  # a key beside the envelope: never a failure
                sent[draw(st.text(max_size=8).filter(lambda k: k != "$failure"))] = 1
                # ... unless the body is refused before it is read as one: too deep for the
                # JSON parser (past the size limit, the oracle expects 413 whatever the field).
                field = "data" if field == "data" else "$failure"
        body = json.dumps(sent).encode()
        oracle = (failure, field)
    headers = {"Content-Type": "application/json"}
    signing = "genuine"
    if draw(st.integers(0, 4)) == 0:  # hostile headers too: the oracle no longer applies
        oracle = None
        content_type = draw(CONTENT_TYPES)
        headers = {} if content_type is None else {"Content-Type": content_type}
        signing = draw(st.sampled_from(SIGNINGS))
    sign_into(headers, signing, web.hmac_secret, body)
    return url, body, headers, oracle


def sign_into(headers: dict[str, str], signing: str, secret: str, body: bytes) -> None:
    """Add ``X-Bide-*`` headers: ``genuine``, ``stale`` (an hour old), ``other secret``,
    ``random`` (not a signature), ``none``."""
    now = int(time.time())
    if signing in ("genuine", "stale", "other secret"):
        stamp = str(now if signing != "stale" else now - 3600)
        headers["X-Bide-Timestamp"] = stamp
        key = "0" * 32 if signing == "other secret" else secret
        headers["X-Bide-Signature"] = sign(key, stamp, body)
    elif signing == "random":
        headers["X-Bide-Timestamp"] = str(now)
        headers["X-Bide-Signature"] = "v1=" + "0" * 64


SIGNINGS = ["genuine", "random", "none", "stale", "other secret"]

# --- the invariants ------------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=list(HealthCheck),
)


def test_fuzzed_failures_on_the_signal_and_webhook_routes(stage: Stage) -> None:
    web, seen = stage.web, STATUSES["failure"]

    def exercise(url: str, body: bytes, headers: dict[str, str], oracle: Any) -> None:
        before_seq, before, failed = web.head(), web.held(), stage.failures()
        status, answer = http("POST", url, body, headers)
        seen[status] += 1
        what = f"POST {url[len(web.stack.url) :][:90]} {headers} {body[:120]!r}"
        assert status < 500, f"{what} -> {status}: {answer}"
        after, failed_after = web.held(), stage.failures()  # the session always loads
        sent = json.loads(body) if status == 202 else None
        # Only an object holding "$failure" is the envelope: `null`, a list or a string that
        # happens to contain the text is a plain value.
        envelope = isinstance(sent, dict) and "$failure" in sent
        if status == 202 and not url.endswith("/failure") and not envelope:
            # a plain value (an arbitrary body on a plain route): stored as in the plain fuzzer
            added = {k: v for k, v in after.items() if k not in before}
            assert list(added.values()) == [sent] and failed_after == failed, (what, added)
        elif status == 202:
            assert answer["result"] == "delivered", answer
            added = {k: v for k, v in failed_after.items() if k not in failed}
            if not url.endswith("/failure"):  # the envelope on a plain route
                sent = sent["$failure"]
            assert list(added.values()) == [{k: v for k, v in sent.items() if v is not None}], (
                what,
                added,
            )
            assert {k: v for k, v in after.items() if k in before} == before
            state = stage.read_failure(next(iter(added)))
            assert state == SignalFailed(sent["type"], sent["message"], sent.get("data")), what
            READ["route" if url.endswith("/failure") else "envelope"] += 1
        else:
            assert isinstance(answer, dict), (what, status, answer)
            assert web.head() == before_seq, f"{what} -> {status} wrote to the session"
            assert after == before and failed_after == failed, what
            if status >= 400:
                assert answer.get("error") or answer.get("message"), (what, answer)
        if oracle is None:
            return
        _failure, field = oracle
        if field is None:
            assert status in (200, 202, 422), f"{what} -> {status}: {answer}"
            if status == 422:  # only the task's budget may refuse a well-formed failure
                assert "budget" in json.dumps(answer) or "pending" in json.dumps(answer), answer
        elif field == "(size)" or len(body) > MAX_WEBHOOK_BODY_BYTES:
            assert status == 413, f"{what} -> {status}: {answer}"
        else:
            assert status == 400, f"{what} -> {status}: {answer}"
            # Data nested too deep makes the whole body too deep: the JSON parser refuses it
            # first, saying so (over HTTP a failure's data nests at most 63 levels, 62 in the
            # envelope, though the engine takes 64).
            why = answer["error"]
            assert ("nests" in why) if field == "data" else (repr(field) in why), (what, why)

    @SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        exercise(*data.draw(failure_requests(stage)))

    # Each kind of answer the invariants speak of, once for certain (a random run of this size
    # may draw none of one kind), then the fuzzed requests.
    good = {"type": "Fixed", "message": "one of each"}
    for n, (sent, suffix, failure, field) in enumerate(
        [
            (good, "/failure", good, None),
            ({"$failure": good}, "", good, None),
            ({"message": "no type"}, "/failure", {"message": "no type"}, "type"),
            (big := {**good, "data": "d" * MAX_WEBHOOK_BODY_BYTES}, "/failure", big, "(size)"),
        ]
    ):
        body, headers = json.dumps(sent).encode(), {"Content-Type": "application/json"}
        sign_into(headers, "genuine", web.hmac_secret, body)
        exercise(web.signal_url(f"fixed-{n}") + suffix, body, headers, (failure, field))
    check()
    print(f"\nfuzzed failure routes: {dict(sorted(seen.items()))}, read back {dict(READ)}")
    assert seen[400] and seen[413] and READ["route"] and READ["envelope"]


def test_fuzzed_heartbeats_write_nothing_but_beat_by(stage: Stage) -> None:
    web, seen = stage.web, STATUSES["beat"]

    @SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        target = data.draw(
            st.sampled_from(
                ["beat signal", "beat hook", "beat signed", "holder", "hook", "signed",
                 "unknown signal", "bad token"]
            )
        )  # fmt: skip
        real = stage.beat_signed.rsplit("/", 1)[1]
        mangled = data.draw(st.sampled_from([real[:-1], real + "0"]))
        url = {
            "beat signal": stage.beat_signal,
            "beat hook": stage.beat_hook,
            "beat signed": stage.beat_signed,
            "holder": web.signal_url(data.draw(KEY_TEXT)),
            "hook": web.hook_url,
            "signed": web.signed_url,
            "unknown signal": stage.beat_signal.replace(BLOB.name, "test.no-such-signal"),
            "bad token": f"{web.stack.url}/hooks/{mangled}",
        }[target] + "/heartbeat"
        body = data.draw(st.one_of(st.just(b""), bodies()))
        content_type = data.draw(CONTENT_TYPES)
        headers = {} if content_type is None else {"Content-Type": content_type}
        signing = data.draw(st.sampled_from(SIGNINGS))
        sign_into(headers, signing, web.hmac_secret, body)
        before_seq, before = web.head(), stage.records()
        status, answer = http("POST", url, body, headers)
        seen[status] += 1
        what = f"POST {url[len(web.stack.url) :][:90]} {headers} {body[:80]!r}"
        assert status < 500, f"{what} -> {status}: {answer}"
        after = stage.records()
        moved = {t for t in before if before[t] != after[t]}
        # The one write a beat may make is a commit of the task, conditioned on the session's
        # sequence number like a value's (bide.engine.delivery.deliver_beat): it moves it on.
        assert web.head() == before_seq + bool(moved), f"{what} -> {status}: sequence moved"
        if target.endswith("signed") and signing != "genuine":
            assert status in (401, 413), f"{what} -> {status}: {answer}"
        if len(body) > MAX_WEBHOOK_BODY_BYTES and target in ("beat hook", "hook"):
            assert status == 413, f"{what} -> {status}"  # a real token: the size is checked
        if status != 202 or not target.startswith("beat"):
            assert not moved, f"{what} -> {status} wrote {moved}"
            return
        assert answer["result"] == "delivered", answer
        assert moved == {stage.beater}, what
        old, new = before[stage.beater], after[stage.beater]
        assert new["state"]["beat_by"] > old["state"]["beat_by"] or new == old
        for record in (old, new):
            record["state"].pop("beat_by")
            record.pop("rev")
        assert old == new, f"{what}: a beat changed more than beat_by"
        MOVED[0] += 1

    check()
    print(f"\nfuzzed heartbeat routes: {dict(sorted(seen.items()))}")
    assert seen[202] and seen[401] and seen[404] and MOVED[0]
