"""Sign-in in steps, deployed: the service and the local stack give workflow steps the sealed
token store, and the callback route stores a token for the session's owner only.

* On the functions' code (moto: DynamoDB, S3, SQS, Secrets Manager): a workflow tool's step
  needs a token, the run parks on a sign-in request listed by ``GET /sessions/{id}/workflow``;
  another principal's callback is refused 403 and stores nothing; the owner's callback resumes
  the step with the token; another session of the same owner finds it without a sign-in.
  Then every item of the table, object of the bucket and queued message is dumped: no form of
  the token (plain, JSON-escaped, base64, percent-encoded, repr) nor the deployment key is in
  it. A canary (the token written in the clear) shows the check finds one.
* On the local stack over HTTP on 127.0.0.1: the same flow from a model's tool call, and the
  SQLite file (with its WAL) dumped the same way.

The callback route is IAM-authorised and owner-checked (docs/deploy.md, "Sign-in in steps"):
the token lands under the caller's principal, so only the owner (or an administrator) may
complete a session's sign-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fixtures import aws_client, fake_aws_environment
from handler_fixtures import (  # noqa: F401
    PRINCIPAL,
    FakeContext,
    aws_fixture,
    http_event,
    make_bench,
    response_json,
)
from limits_fixtures import http
from pydantic import BaseModel
from test_webhook_secrets import flatten, readings, sqlite_dump

from bide.agent import Agent
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.app import App
from bide.aws.webhook_keys import SecretsManagerWebhookKeys
from bide.engine.store.base import Doc
from bide.service.auth_tokens import partition
from bide.service.http import handle_api
from bide.tools import ToolRegistry
from bide.tools.redaction import SECRETS, encodings
from bide.tools.webhook_keys import new_key_document
from bide.workflow import define_workflow_tool, setup_app

assert fake_aws_environment  # moto with fake credentials only

TOKEN = 'gho_Dep10yed/T0k+n="x y"é'
OTHER = PRINCIPAL.replace("user/alice", "user/mallory")
CALLS: list[str] = []


class Box(BaseModel):
    name: str = "a"


async def box(args: Box, ctx: Any) -> Any:
    async def create(step: Any) -> dict[str, str]:
        token = await step.get_token("devbox")
        CALLS.append(token)
        return {"id": f"box-{args.name}"}

    return await ctx.step(create, name="create")


def script(request: ModelRequest) -> Any:
    if request.messages[-1].role == "user":
        return call_tool("box", {"name": "one"}, id="b1")
    return reply(last_tool_result(request))


def make_app() -> App:
    """An agent whose model calls the workflow tool ``box`` and answers with its result."""
    tools = ToolRegistry([define_workflow_tool("box", "create a devbox", Box, box)])
    return setup_app(App(agent=Agent(ScriptedProvider(script), tools)))


def traces(dump: str) -> list[str]:
    """The forms of TOKEN found in ``dump``."""
    return sorted(form for form in encodings(TOKEN) | {TOKEN} if form in dump)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    CALLS.clear()
    SECRETS.forget_all()
    yield
    SECRETS.forget_all()


# --- the functions' code on moto -----------------------------------------------------------


@pytest.fixture(name="bench")
def bench_fixture(aws: dict[str, Any]) -> Any:
    bench = make_bench(aws)
    bench.deps.app = make_app()
    secrets = aws_client("secretsmanager")
    name = f"bide-webhook-key-{bench.table}"
    secrets.create_secret(Name=name, SecretString=new_key_document())
    bench.deps.webhook_keys = SecretsManagerWebhookKeys(name, secrets)
    bench.secret = secrets.get_secret_value(SecretId=name)["SecretString"]
    return bench


def api(bench: Any, method: str, path: str, body: Any = None, principal: str = PRINCIPAL) -> Any:
    event = http_event(method, path, body=body, principal=principal)
    response = asyncio.run(handle_api(bench.deps, event, FakeContext()))
    return response["statusCode"], response_json(response)


def ddb_dump(bench: Any) -> str:
    parts: list[str] = []
    for page in bench.ddb.get_paginator("scan").paginate(TableName=bench.table):
        for item in page["Items"]:
            parts += flatten(item)
            # each string read as the code wrote it, when it is JSON
            for text in flatten(item):
                with contextlib.suppress(ValueError):
                    parts += flatten(json.loads(text))
    for obj in bench.s3.list_objects_v2(Bucket=bench.bucket).get("Contents", []):
        parts += readings(bench.s3.get_object(Bucket=bench.bucket, Key=obj["Key"])["Body"].read())
    parts += [json.dumps(body) for body in bench.queued()]
    return "\n".join(parts)


def test_sign_in_through_the_service_handlers_on_dynamodb(bench: Any) -> None:
    sid = "s-auth-1"
    assert api(bench, "POST", "/sessions", {"session_id": sid})[0] == 201
    submitted = {"content": "make a box", "request_id": "r1"}
    assert api(bench, "POST", f"/sessions/{sid}/inputs", submitted)[0] == 202
    bench.drain()
    status, view = api(bench, "GET", f"/sessions/{sid}/workflow")
    assert status == 200
    [request] = view["authorizations"]
    assert request["provider"] == "devbox" and CALLS == []
    path = f"/sessions/{sid}/authorizations/{request['id']}/complete"

    # Another principal may not complete the owner's sign-in, and stores nothing.
    assert api(bench, "POST", path, {"token": "mallory-token-1234"}, OTHER)[0] == 403
    assert bench.store.list_docs(partition(OTHER), "") == []
    assert bench.store.list_docs(partition(PRINCIPAL), "") == []

    assert api(bench, "POST", path, {"token": TOKEN}) == (200, {"result": "delivered"})
    bench.drain()
    assert CALLS == [TOKEN]
    session = api(bench, "GET", f"/sessions/{sid}")[1]
    assert "box-one" in session["submissions"][0]["answer"]  # what the model was given

    # The token is the owner's: another session of theirs needs no sign-in.
    assert api(bench, "POST", "/sessions", {"session_id": "s-auth-2"})[0] == 201
    assert api(bench, "POST", "/sessions/s-auth-2/inputs", submitted)[0] == 202
    bench.drain()
    assert CALLS == [TOKEN, TOKEN]
    assert api(bench, "GET", "/sessions/s-auth-2/workflow")[1]["authorizations"] == []

    dump = ddb_dump(bench)
    assert partition(PRINCIPAL) in dump  # the sealed document is there...
    assert traces(dump) == []  # ...and no form of the token
    assert json.loads(bench.secret)["current"] not in dump


def test_the_dump_check_finds_a_token_stored_in_the_clear(bench: Any) -> None:
    store = bench.store
    store.commit("#canary", 0, [], [Doc("p/devbox", {"token": TOKEN})])
    assert TOKEN in traces(ddb_dump(bench))


# --- the local stack over HTTP -------------------------------------------------------------


@pytest.fixture(name="stack")
def stack_fixture(tmp_path: Any) -> Iterator[Any]:
    from bide.local import LocalStack
    from bide.local.thread import BackgroundStack

    with BackgroundStack(LocalStack(make_app(), str(tmp_path / "dev.sqlite"), port=0)) as running:
        yield running


def call(stack: Any, method: str, path: str, body: Any = None, who: str = "alice") -> Any:
    headers = {"Content-Type": "application/json", "X-Bide-Principal": who}
    data = None if body is None else json.dumps(body).encode()
    return http(method, f"{stack.url}{path}", data, headers)


def test_sign_in_through_the_local_stack_over_http(stack: Any) -> None:
    sid = "s-local"
    assert call(stack, "POST", "/sessions", {"session_id": sid})[0] == 201
    submitted = {"content": "make a box", "request_id": "r1"}
    assert call(stack, "POST", f"/sessions/{sid}/inputs", submitted)[0] == 202
    assert stack.settle()
    [request] = call(stack, "GET", f"/sessions/{sid}/workflow")[1]["authorizations"]
    path = f"/sessions/{sid}/authorizations/{request['id']}/complete"
    assert call(stack, "POST", path, {"token": "mallory-token-1234"}, "mallory")[0] == 403
    assert call(stack, "POST", path, {"token": TOKEN}) == (200, {"result": "delivered"})
    assert stack.settle()
    assert CALLS == [TOKEN]
    session = call(stack, "GET", f"/sessions/{sid}")[1]
    assert "box-one" in session["submissions"][0]["answer"]
    dump = sqlite_dump(stack.stack.db_path)
    assert partition("alice") in dump
    assert traces(dump) == []
