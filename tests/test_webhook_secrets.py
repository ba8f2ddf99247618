"""Nothing written while webhooks are live is a token the webhook route accepts.

Sessions with live webhooks of every form (a tool's plain, signed and stream webhooks, and a
workflow's ``ctx.webhook()``) run on the DynamoDB store (moto, with S3 offload: each parked
call's record is over the offload threshold) and on the local stack's SQLite file. Then every
item, object, queued message, row and raw database byte is dumped; every token-shaped string
in it, and every token built from a stored (session, nonce) pair with any 48-hex-character
window of the dump as its mac, is posted to ``POST /hooks/{token}``: each is refused 404. The
tokens the tools were handed at mint time (kept in this process's memory only) are then
accepted. A canary run stores a token in a memo, as the code before derived tokens did, and
the same check finds it: the check can fail.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gzip
import json
import os
import re
import sqlite3
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_fixtures import fake_aws_environment
from handler_fixtures import (  # noqa: F401
    FakeContext,
    aws_fixture,
    hook_event,
    make_bench,
    signal_event,
)
from limits_fixtures import http
from pydantic import BaseModel

from bide import Harness, SignalValue, SQLiteStore, define_signal
from bide.app import App
from bide.engine.errors import StoreUnavailable
from bide.service.http import handle_signal
from bide.service.webhooks import make_token, mint_webhook, parse_token, sign, token_parts
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool
from bide.workflow import define_workflow_tool

assert fake_aws_environment  # the bench runs inside moto with fake credentials only


class Note(BaseModel):
    text: str


class HoldArgs(BaseModel):
    form: str
    run: str
    leak: bool = False


REPLY = define_signal("test.secrets.reply", 1, Note)
HMAC = "sender-shared-secret-for-signing"
FORM_KEYS = {"plain": "done", "signed": "done", "stream": "events.*"}
#: A checkpoint this big puts the parked call's record over the store's offload threshold.
PAD = "p" * 70_000
#: Tokens as the tools were handed them, by run and form: in this process's memory only.
REAL: dict[str, dict[str, str]] = {}


async def hold(args: HoldArgs, api: Any) -> ToolResult | Sleep:
    state = await api.read_signal(REPLY, "done")
    if isinstance(state, SignalValue):
        return ToolResult.of_text(f"got {state.value.text}")
    secret = HMAC if args.form == "signed" else None
    hook = await mint_webhook(api, REPLY, FORM_KEYS[args.form], hmac_secret=secret)
    REAL.setdefault(args.run, {})[args.form] = hook.token
    if args.leak:  # the canary: what minting did before tokens were derived
        await api.memo("leaked-token", hook.token)
    return Sleep(checkpoint={"pad": PAD}, signals=[REPLY.key("done")])


class WfArgs(BaseModel):
    run: str


async def flow(args: WfArgs, ctx: Any) -> Any:
    hook = await ctx.webhook()
    REAL.setdefault(args.run, {})["workflow"] = hook.token
    return await hook


REGISTRY = ToolRegistry(
    [
        define_tool("hold", "park on a webhook", HoldArgs, hold),
        define_workflow_tool("flow", "a workflow awaiting its webhook", WfArgs, flow),
    ]
)
APP = App(signals=[REPLY], tools=REGISTRY)
CALLS = [("hold", {"form": form}) for form in FORM_KEYS] + [("flow", {})]


# --- dumping and checking ------------------------------------------------------------------

# Anchored at the start of a run of the alphabet (a look-behind), so long runs of it (the
# checkpoints' padding) are scanned once, not once per position. Both forms: the four-part
# ``<session>.<task>.<nonce>.<mac>`` minted now and the three-part one minted before.
TOKEN_SHAPED = re.compile(
    r"(?<![A-Za-z0-9_.-])[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)?\.[0-9a-f]{32,64}\.[0-9a-f]{48}"
)
HEX_RUN = re.compile(r"(?<![0-9a-f])[0-9a-f]{48,}")


def readings(raw: bytes) -> list[str]:
    """``raw`` as text, plus what it is when it is base64, gzip or zlib data."""
    out = [raw.decode("latin-1")]
    for unpack in (gzip.decompress, zlib.decompress):
        with contextlib.suppress(OSError, zlib.error, EOFError):
            out.append(unpack(raw).decode("latin-1"))
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if decoded:
        out += readings(decoded)
    return out


def flatten(value: Any) -> Iterator[str]:
    """Every string in a DynamoDB item (bytes read every way :func:`readings` knows)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from flatten(v)
    elif isinstance(value, list | tuple | set):
        for v in value:
            yield from flatten(v)
    elif isinstance(value, bytes | bytearray):
        yield from readings(bytes(value))
    else:
        yield str(value)


def candidates(dump: str, real: list[str]) -> set[str]:
    """Every token-shaped string in ``dump``, and tokens of both forms for each (session,
    task, nonce) of a minted webhook with each 48-character window of every hex run as its
    mac."""
    found = set(TOKEN_SHAPED.findall(dump))
    macs = {run[i : i + 48] for run in HEX_RUN.findall(dump) for i in range(len(run) - 47)}
    named = {(p.session_id, p.task_id, p.nonce) for p in map(token_parts, real)}
    for sid, task_id, nonce in named:
        found |= {make_token(sid, nonce, mac, task) for mac in macs for task in (None, task_id)}
    return found


def tokens_of(run: str) -> list[str]:
    return sorted(REAL[run].values())


# --- DynamoDB, S3 and SQS on moto ----------------------------------------------------------


@pytest.fixture(name="bench")
def bench_fixture(aws: dict[str, Any]) -> Any:
    bench = make_bench(aws)
    bench.deps.app = APP
    return bench


def ddb_run(bench: Any, run: str, *, leak: bool = False) -> str:
    sid = f"s-{run}"
    for name, arguments in CALLS:
        bench.start_tool(name, {**arguments, "run": run, "leak": leak}, sid)
    bench.drain()
    assert sorted(REAL[run]) == ["plain", "signed", "stream", "workflow"]
    return sid


def ddb_dump(bench: Any) -> str:
    parts: list[str] = []
    pages = bench.ddb.get_paginator("scan").paginate(TableName=bench.table)
    for page in pages:
        for item in page["Items"]:
            parts += flatten(item)
    listed = bench.s3.list_objects_v2(Bucket=bench.bucket).get("Contents", [])
    assert listed, "the parked calls' records were offloaded to S3"
    for obj in listed:
        parts.append(obj["Key"])
        parts += readings(bench.s3.get_object(Bucket=bench.bucket, Key=obj["Key"])["Body"].read())
    parts += [json.dumps(body) for body in bench.queued()]
    return "\n".join(parts)


def ddb_post(bench: Any, token: str, *, signed: bool = False) -> int:
    body = b'{"text": "hi"}'
    headers = {"content-type": "application/json"}
    if signed:
        stamp = str(int(bench.clock.now()))
        headers |= {"x-bide-timestamp": stamp, "x-bide-signature": sign(HMAC, stamp, body)}
    event = hook_event(token, body, headers=headers)
    response = asyncio.run(handle_signal(bench.deps, event, FakeContext()))
    return int(response["statusCode"])


def ddb_accepted(bench: Any, run: str) -> list[str]:
    """The dump's candidates the webhook route does not answer 404 (unknown webhook)."""
    dump = ddb_dump(bench)
    return sorted(
        token for token in candidates(dump, tokens_of(run)) if ddb_post(bench, token) != 404
    )


def test_no_token_in_the_table_objects_or_queue_is_accepted_on_dynamodb(bench: Any) -> None:
    run = "ddb"
    ddb_run(bench, run)
    dump = ddb_dump(bench)
    for token in tokens_of(run):
        assert parse_token(token)[2] not in dump
    assert ddb_accepted(bench, run) == []
    # The tokens handed out at mint time are the ones the route takes.
    for form, token in REAL[run].items():
        assert ddb_post(bench, token, signed=form == "signed") == 202, form


def test_the_check_finds_a_stored_token_on_dynamodb(bench: Any) -> None:
    run = "ddb-canary"
    ddb_run(bench, run, leak=True)
    leaked = {REAL[run][form] for form in ("plain", "signed", "stream")}
    assert leaked <= set(ddb_accepted(bench, run))


# --- the local stack's SQLite file ---------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from bide.local import LocalStack
    from bide.local.thread import BackgroundStack

    db = str(tmp_path_factory.mktemp("secrets") / "dev.sqlite")
    with BackgroundStack(LocalStack(APP, db, port=0)) as running:
        yield running


def sqlite_run(stack: Any, run: str, *, leak: bool = False) -> str:
    sid = f"s-{run}"
    services = {"webhook_base_url": stack.url, "webhook_keys": stack.stack.webhook_keys}

    async def go() -> None:
        store = SQLiteStore(stack.stack.db_path)
        h = Harness(store, sid, APP.task_kinds(), services=services)
        await h.open()
        for name, arguments in CALLS:
            payload = {**arguments, "run": run, "leak": leak}
            await h.create_task(REGISTRY.task, REGISTRY.call(name, payload))
        await h.run_until_parked()
        await h.close()
        store.close()

    asyncio.run(go())
    return sid


def sqlite_dump(db_path: str) -> str:
    parts: list[str] = []
    with sqlite3.connect(db_path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                parts += flatten(list(row))
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(db_path + suffix)
        if path.exists():
            parts += readings(path.read_bytes())
    return "\n".join(parts)


def sqlite_post(stack: Any, token: str, *, signed: bool = False, over_http: bool = False) -> int:
    """The local stack's answer to a webhook request: over HTTP, or (for the many candidates)
    from the handler its server calls, in-process, with the stack's own deps."""
    body = b'{"text": "hi"}'
    headers = {"Content-Type": "application/json"}
    if signed:
        stamp = str(int(time.time()))
        headers |= {"X-Bide-Timestamp": stamp, "X-Bide-Signature": sign(HMAC, stamp, body)}
    if over_http:
        return http("POST", f"{stack.url}/hooks/{token}", body, headers)[0]
    event = hook_event(token, body, headers=headers)
    response = stack.call(lambda: handle_signal(stack.stack._deps, event, FakeContext()))
    return int(response["statusCode"])


def sqlite_accepted(stack: Any, run: str) -> list[str]:
    dump = sqlite_dump(stack.stack.db_path)
    found = candidates(dump, tokens_of(run))
    return sorted(token for token in found if sqlite_post(stack, token) != 404)


def test_no_token_in_the_sqlite_file_is_accepted_on_the_local_stack(stack: Any) -> None:
    run = "sqlite"
    sqlite_run(stack, run)
    dump = sqlite_dump(stack.stack.db_path)
    for token in tokens_of(run):
        assert parse_token(token)[2] not in dump
    assert sqlite_accepted(stack, run) == []
    for form, token in REAL[run].items():
        assert sqlite_post(stack, token, signed=form == "signed", over_http=True) == 202, form
    # The key is beside the database, not in it, and only its owner may read it.
    key_file = Path(stack.stack.db_path + ".webhook-key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert json.loads(key_file.read_text())["current"] not in dump


def test_the_check_finds_a_stored_token_on_the_local_stack(stack: Any) -> None:
    run = "sqlite-canary"
    sqlite_run(stack, run, leak=True)
    leaked = {REAL[run][form] for form in ("plain", "signed", "stream")}
    assert leaked <= set(sqlite_accepted(stack, run))


def test_a_key_file_open_to_others_is_refused(tmp_path: Path) -> None:
    from bide.local.webhook_keys import local_keys
    from bide.tools.webhook_keys import WebhookKeyError

    db = str(tmp_path / "dev.sqlite")
    first = local_keys(db)
    assert local_keys(db) == first  # made once, then read back
    os.chmod(db + ".webhook-key", 0o644)
    with pytest.raises(WebhookKeyError, match="open to others"):
        local_keys(db)


# --- error bodies: nothing internal reaches a caller ------------------------------------------

MARK = "INTERNAL-detail-7f3a"


class FailingStore:
    """Passes every call to ``inner`` but ``method``, which raises ``error``."""

    def __init__(self, inner: Any, method: str, error: BaseException) -> None:
        self._inner, self._method, self._error = inner, method, error

    def __getattr__(self, name: str) -> Any:
        if name != self._method:
            return getattr(self._inner, name)

        def fail(*args: Any, **kwargs: Any) -> Any:
            raise self._error

        return fail


class FailingKeys:
    def current(self) -> bytes:
        raise StoreUnavailable(f"secret read failed: {MARK}")

    def accepted(self) -> list[bytes]:
        raise RuntimeError(f"AccessDenied on the secret: {MARK}")


def errors() -> list[BaseException]:
    from botocore.exceptions import ClientError

    from bide.engine.errors import CommitTooLarge, ConflictError, DefinitionError

    denied = {"Error": {"Code": "AccessDeniedException", "Message": f"not authorized {MARK}"}}
    return [
        StoreUnavailable(f"throttled: {MARK}"),
        ConflictError(MARK, 3, 4),
        CommitTooLarge(f"too large: {MARK}"),
        DefinitionError(f"store said: {MARK}"),
        ClientError(denied, "GetItem"),  # type: ignore[arg-type]
        KeyError(MARK),
        ValueError(MARK),
        RuntimeError(MARK),
    ]


def test_store_and_key_errors_never_reach_a_callers_body(bench: Any) -> None:
    """Every store method the signal routes call fails in turn, with each kind of error,
    carrying a distinctive text: the webhook and by-task routes answer 5xx with their fixed
    text (the logs get the detail); so does a key that cannot be read."""
    run = "errors"
    sid = ddb_run(bench, run)
    token = REAL[run]["plain"]
    task_id = ddb_binding_task(bench, token)
    healthy = bench.deps.store
    failed: dict[str, int] = {"hook": 0, "signal": 0}
    body = '{"text": "hi"}'
    json_type = {"content-type": "application/json"}
    for method in (
        "get_doc",
        "head",
        "get_task",
        "task_at_head",
        "task_and_doc_at_head",
        "commit",
    ):
        for error in errors():
            bench.deps.store = FailingStore(healthy, method, error)
            events = {
                "hook": hook_event(token, body, headers=json_type),
                "signal": signal_event(sid, task_id, REPLY.name, "done", {"text": "hi"}),
            }
            for route, event in events.items():
                response = asyncio.run(handle_signal(bench.deps, event, FakeContext()))
                assert MARK not in response["body"], (method, error, route)
                assert "Traceback" not in response["body"]
                failed[route] += response["statusCode"] >= 500
    bench.deps.store = healthy
    assert failed["hook"] and failed["signal"]  # the errors did reach the routes
    bench.deps.webhook_keys = FailingKeys()  # type: ignore[assignment]
    response = asyncio.run(
        handle_signal(bench.deps, hook_event(token, body, headers=json_type), FakeContext())
    )
    assert response["statusCode"] >= 500 and MARK not in response["body"]


def ddb_binding_task(bench: Any, token: str) -> str:
    from bide.service.webhooks import binding_key

    session_id, nonce, _ = parse_token(token)
    found = bench.store.get_doc(session_id, binding_key(nonce))
    assert found is not None
    return str(found.body["task_id"])


# --- key rotation ------------------------------------------------------------------------------


def test_a_rotated_out_key_is_accepted_while_listed_and_refused_after() -> None:
    from bide.service.webhooks import StaticWebhookKeys, WebhookBinding, resolve, token_of
    from bide.service.webhooks import WebhookRejected as Rejected
    from bide.tools.webhook_keys import WebhookKeyError, parse_keys

    old, new = b"o" * 32, b"n" * 32
    binding = WebhookBinding(
        session_id="s-1", task_id="t-1", signal="sig", key="k", nonce="ab" * 16
    )
    docs = {("s-1", "hook/" + binding.nonce): binding.to_doc()}

    def find(session_id: str, key: str) -> Any:
        return docs.get((session_id, key))

    minted = token_of(binding, StaticWebhookKeys(old))
    rotated = StaticWebhookKeys(new, (old,))
    assert resolve(minted, find, rotated) == binding  # minted before the rotation
    assert resolve(token_of(binding, rotated), find, rotated) == binding  # and after
    assert token_of(binding, rotated) != minted
    with pytest.raises(Rejected) as refused:
        resolve(minted, find, StaticWebhookKeys(new))  # the old key dropped
    assert (refused.value.status, refused.value.message) == (404, "unknown webhook")
    # The binding is part of what is signed: the same mac for another task is refused.
    docs[("s-1", "hook/" + binding.nonce)] = {**binding.to_doc(), "task_id": "t-2"}
    with pytest.raises(Rejected):
        resolve(minted, find, rotated)
    # Key documents name what is wrong.
    with pytest.raises(WebhookKeyError, match="'current' must be a non-empty string"):
        parse_keys('{"previous": []}', source="test")
    with pytest.raises(WebhookKeyError, match="at least 32"):
        parse_keys('{"current": "short"}', source="test")
