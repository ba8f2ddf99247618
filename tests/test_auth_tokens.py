"""Provider tokens at rest and their redaction.

* the envelope (bide.service.auth_tokens): opens only for its principal and provider, under a
  listed deployment key; a key rotated into ``previous`` still opens it, a dropped one does not;
* the service's port is per principal: another session of the same owner finds the token,
  another owner's session must sign in;
* a step raising an error that carries the token, in each encoding Bide's code produces, leaves
  no trace of it in the memos, the documents, the transcript the model reads or the logs;
* the callback's two commits (the sealed token, then the completed request) are crash safe:
  a crash before or after either one, then the callback again, resumes the step with the token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import urllib.parse

import pytest
from kit import Kit, run
from test_workflow_support import Note, deps_for

from bide import SQLiteStore
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.app import App
from bide.engine.store.base import Doc
from bide.service import workflow as wf_service
from bide.service.auth_tokens import (
    StoredAuthProviders,
    TokenRefused,
    doc_key,
    kek,
    partition,
    seal,
    unseal,
)
from bide.service.owners import OWNER_KEY
from bide.testing import Crash, FaultyStore
from bide.tools import ToolRegistry
from bide.tools.redaction import REDACTED, SECRETS, encodings, install_log_filter
from bide.tools.webhook_keys import StaticWebhookKeys
from bide.workflow import (
    RetryPolicy,
    StepFailed,
    background_tasks,
    define_workflow_tool,
    install,
    pending_authorizations,
)

TOKEN = 'gho_S3cr3t/T0k+n="a b"é'
KEY_A, KEY_B = b"a" * 32, b"b" * 32


@pytest.fixture(autouse=True)
def _fresh_registry():
    SECRETS.forget_all()
    yield
    SECRETS.forget_all()


# --- the envelope --------------------------------------------------------------------------


def test_the_envelope_opens_for_its_principal_and_provider_only():
    body = seal(TOKEN, "alice", "github", kek(KEY_A))
    text = json.dumps(body)
    assert not any(form in text for form in encodings(TOKEN))
    assert unseal(body, "alice", "github", [kek(KEY_A)]) == TOKEN
    assert unseal(body, "bob", "github", [kek(KEY_A)]) is None  # copied to another principal
    assert unseal(body, "alice", "gitlab", [kek(KEY_A)]) is None
    assert unseal(body, "alice", "github", [kek(KEY_B)]) is None  # a key that did not seal it
    altered = {**body, "sealed": base64.b64encode(b"x" * 40).decode()}
    assert unseal(altered, "alice", "github", [kek(KEY_A)]) is None
    assert seal(TOKEN, "alice", "github", kek(KEY_A)) != body  # fresh data key and nonces


def test_rotation_keeps_old_tokens_until_their_key_is_dropped():
    store = SQLiteStore()
    old = StoredAuthProviders(store, StaticWebhookKeys(KEY_A))
    old.store_token("s1", "github", TOKEN)
    rotated = StoredAuthProviders(store, StaticWebhookKeys(KEY_B, (KEY_A,)))
    assert rotated.get_token("s1", "github") == TOKEN
    dropped = StoredAuthProviders(store, StaticWebhookKeys(KEY_B))
    assert dropped.get_token("s1", "github") is None  # sign in again


def test_bad_tokens_and_providers_are_refused_with_the_field():
    port = StoredAuthProviders(SQLiteStore(), StaticWebhookKeys(KEY_A))
    for provider, token, field in (
        ("github", "", "token"),
        ("github", "x" * 70_000, "token"),
        ("", TOKEN, "provider"),
    ):
        with pytest.raises(TokenRefused, match=field):
            port.store_token("s1", provider, token)
    assert port.store.list_docs(partition("session:s1"), "") == []


def test_tokens_belong_to_the_sessions_owner():
    store = SQLiteStore()
    for sid, owner in (("s1", "alice"), ("s2", "alice"), ("s3", "bob")):
        store.commit(sid, 0, [], [Doc(OWNER_KEY, {"principal": owner})])
    port = StoredAuthProviders(store, StaticWebhookKeys(KEY_A))
    port.store_token("s1", "github", TOKEN)
    assert port.get_token("s2", "github") == TOKEN  # every session of alice's
    assert port.get_token("s3", "github") is None  # never bob's
    assert port.get_token("s4", "github") is None  # an unowned session keeps its own
    assert store.get_doc(partition("alice"), doc_key("github")) is not None


# --- redaction -----------------------------------------------------------------------------

ENCODERS = {
    "plain": lambda t: t,
    "json": lambda t: json.dumps({"auth": t}),
    "json-ascii": lambda t: json.dumps(t, ensure_ascii=True),
    "repr": repr,
    "repr-bytes": lambda t: repr(t.encode()),
    "base64": lambda t: base64.b64encode(t.encode()).decode(),
    "base64-url": lambda t: base64.urlsafe_b64encode(t.encode()).decode(),
    "basic-auth": lambda t: "Basic " + base64.b64encode(b"user:" + t.encode()).decode(),
    "url": lambda t: "https://api.example/x?token=" + urllib.parse.quote(t, safe=""),
    "url-path": lambda t: "https://api.example/" + urllib.parse.quote(t),
    "url-plus": lambda t: urllib.parse.urlencode({"access_token": t}),
}


def dump_store(store: SQLiteStore) -> str:
    """Every row of every table of an SQLite store (tasks ended or live, memos, documents)."""
    db = store._db
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    rows = [list(row) for name in names for row in db.execute(f'SELECT * FROM "{name}"')]
    return "\n".join(text for row in rows for cell in row for text in strings(cell))


def strings(value) -> list[str]:
    """``value`` as text, and every string inside it when it is JSON (each unescaped once,
    so a JSON text nested in a string is read as the code wrote it)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    out = [str(value)]
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return out
        stack = [parsed]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict):
                stack += [*item.keys(), *item.values()]
            elif isinstance(item, list):
                stack += item
    return out


def every_trace(text: str) -> list[str]:
    """The encodings of TOKEN found in ``text`` (each decoder's view of it)."""
    return sorted(name for name, enc in ENCODERS.items() if enc(TOKEN) in text) + sorted(
        f"form:{form}" for form in encodings(TOKEN) if form in text
    )


def leaky_session(encoding: str):
    """An agent whose workflow tool's step fetches the token, logs and raises it encoded; the
    body returns the step's error, so the model sees it."""
    log = logging.getLogger("bide.test.leaky")

    async def body(args, ctx):
        async def call_api(step):
            token = await step.get_token("github")
            leaked = ENCODERS[encoding](token)
            log.error("request failed: %s", leaked)
            raise RuntimeError(f"GET failed for {leaked}")

        try:
            return await ctx.step(call_api, name="call", retry=RetryPolicy(2, initial_delay=60))
        except StepFailed as exc:
            log.warning("step failed", exc_info=True)
            return f"failed: {exc}"

    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tool("leaky", {}, id="c1")
        return reply(last_tool_result(request))

    tools = ToolRegistry([define_workflow_tool("leaky", "", Note, body)])
    agent = Agent(ScriptedProvider(script), tools)
    install(agent)
    kit = Kit(*agent.task_kinds())
    port = StoredAuthProviders(kit.store, StaticWebhookKeys(KEY_A))
    port.store_token("s1", "github", TOKEN)
    SECRETS.forget_all()  # a fresh process: only the step's own read registers it
    kit.h.services.update({"auth_providers": port})
    return kit, Conversations(kit.h, agent)


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_step_error_carrying_the_token_leaves_no_trace(encoding, caplog):
    caplog.set_level(logging.INFO)
    install_log_filter()  # on the root logger's handlers, caplog's included

    async def go():
        kit, conv = leaky_session(encoding)
        await kit.h.open()
        await conv.create("main")
        await conv.submit("main", "go", request_id="r1")
        await kit.h.run_until_parked()
        parked = dump_store(kit.store)  # the first attempt's error is a memo of the live call
        assert "GET failed for " in parked and REDACTED in parked
        kit.clock.advance(60)
        await kit.h.run_until_parked()
        entries = conv.entries("main")
        results = [e for e in entries if e["type"] == "tool_result"]
        assert results and "failed: step 'call' failed after 2 attempt(s)" in results[0]["text"]
        assert REDACTED in results[0]["text"]
        return entries, parked + dump_store(kit.store)

    entries, everything = asyncio.run(go())
    assert "GET failed for " in everything and REDACTED in everything  # the error, recorded
    assert every_trace(json.dumps(entries)) == []
    assert every_trace(everything) == []
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "request failed: " in logged
    assert every_trace(logged) == []


def returning(encode):
    async def body(args, ctx):
        async def leak(step):
            return {"header": encode(await step.get_token("github"))}

        try:
            return await ctx.step(leak, name="leak")
        except StepFailed as exc:
            return exc.message

    return body


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_step_returning_the_token_in_any_encoding_is_refused(encoding):
    from bide.workflow import workflow_kinds

    async def go():
        tools = ToolRegistry(
            [define_workflow_tool("leak", "", Note, returning(ENCODERS[encoding]))]
        )
        kit = Kit(tools.task, *workflow_kinds(tools))
        port = StoredAuthProviders(kit.store, StaticWebhookKeys(KEY_A))
        port.store_token("s1", "github", TOKEN)
        SECRETS.forget_all()
        kit.h.services.update({"auth_providers": port})
        await kit.h.open()
        task = await kit.h.create_task(tools.task, tools.call("leak", {}))
        await kit.h.run_until_parked()
        return json.dumps(kit.h.outcome(task).to_dict())

    outcome = run(go())
    assert "tokens never enter the history" in outcome
    assert every_trace(outcome) == []


# --- crash safety of the callback's commits -----------------------------------------------


def signing_in(store):
    calls: list[str] = []

    async def body(args, ctx, task):
        async def create(step):
            calls.append(await step.get_token("devbox"))
            return "created"

        return await ctx.step(create, name="create")

    tools = ToolRegistry([define_workflow_tool("box", "", Note, body, lifetime="task")])
    app = App(tools=tools)
    from bide.workflow import setup_app

    app = setup_app(app)
    kit = Kit(*app.task_kinds(), store=store)
    deps = deps_for(kit, app)
    deps.webhook_keys = StaticWebhookKeys(KEY_A)
    return kit, deps, tools, calls


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_crash_at_either_callback_commit_then_the_callback_again_resumes(fail_at, when):
    faulty = FaultyStore(SQLiteStore())
    kit, deps, tools, calls = signing_in(faulty)

    async def go():
        h = kit.h
        h.services.update(deps.harness_services())
        await h.open()
        await h.create_task(tools.task, tools.call("box", {}))
        await h.run_until_parked()
        [request] = pending_authorizations(faulty, "s1")
        faulty.commits, faulty.fail_at, faulty.when = 0, fail_at, when
        with pytest.raises(Crash):
            await wf_service.complete_authorization(deps, "s1", request.id, TOKEN)
        faulty.disarm()
        again = await wf_service.complete_authorization(deps, "s1", request.id, TOKEN)
        # the first try may have completed the request before it crashed (after commit 2)
        assert str(again) == ("duplicate" if (fail_at, when) == (2, "after") else "delivered")
        h = await kit.reopen()
        h.services.update(deps.harness_services())
        await h.run_until_parked()
        [info] = background_tasks(h)
        assert (info.status, info.result) == ("completed", "created")
        assert calls == [TOKEN]

    run(go())


def test_a_tool_result_carrying_a_registered_token_reaches_neither_model_nor_history():
    from bide.tools import define_tool

    seen: list[str] = []

    async def leaky(args, api):
        return f"authorized with {ENCODERS['basic-auth'](TOKEN)}"

    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tool("leaky", {}, id="c1")
        seen.append(json.dumps([m.model_dump(mode="json") for m in request.messages]))
        return reply("ok")

    async def go():
        agent = Agent(
            ScriptedProvider(script), ToolRegistry([define_tool("leaky", "", Note, leaky)])
        )
        kit = Kit(*agent.task_kinds())
        conv = Conversations(kit.h, agent)
        port = StoredAuthProviders(kit.store, StaticWebhookKeys(KEY_A))
        port.store_token("s1", "github", TOKEN)  # this process handled it: registered
        await kit.h.open()
        await conv.create("main")
        await conv.submit("main", "go", request_id="r1")
        await kit.h.run_until_parked()
        return json.dumps(conv.entries("main")), dump_store(kit.store)

    entries, everything = run(go())
    assert "authorized with Basic" in entries and REDACTED in entries
    assert seen and every_trace(seen[0]) == []  # what the model was sent
    assert every_trace(entries) == [] and every_trace(everything) == []


def test_a_background_runs_end_carries_no_registered_token():
    from test_workflow_support import Tools

    async def body(args, ctx, task):
        if args.note == "fail":
            raise RuntimeError(f"gave up on {ENCODERS['url'](TOKEN)}")
        return {"summary": f"done with {ENCODERS['base64'](TOKEN)}"}

    async def go():
        t = await Tools(define_workflow_tool("bg", "", Note, body, lifetime="task")).start()
        SECRETS.register(TOKEN)  # this process handled it
        await t.call("bg", {"note": "ok"})
        await t.call("bg", {"note": "fail"})
        await t.h.run_until_parked()
        infos = background_tasks(t.h)
        return infos, dump_store(t.kit.store)

    infos, everything = run(go())
    assert sorted(i.status for i in infos) == ["completed", "failed"]
    assert "done with" in everything and "gave up on" in everything
    assert every_trace(everything) == []
    assert every_trace(json.dumps([i.model_dump(mode="json") for i in infos])) == []
