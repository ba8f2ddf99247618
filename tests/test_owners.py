"""Session owners: every IAM route of the API (the sessions API and the signal route by task
id) lets in the session's owner and the deployment's administrators, and answers anyone else
403 without naming the owner; capability webhooks stay open to whoever holds the token;
sessions without a recorded owner stay open. Over DynamoDB (moto) and SQLite."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fixtures import unique
from handler_fixtures import (
    ACCOUNT,
    PRINCIPAL,
    Bench,
    Probe,
    aws_fixture,
    bench_fixture,
    hook_event,
    http_event,
    make_app,
    response_json,
)
from test_workflow_support import Alarms, Queue

from bide import ManualClock, RandomIds, SQLiteStore
from bide.local.events import find_route, http_api_event
from bide.local.server import HttpRequest
from bide.local.stack import local_principal
from bide.service.config import ConfigError, deps_from_env, settings_from_env
from bide.service.deps import Deps
from bide.service.http import API_ROUTES, SIGNAL_ROUTES, handle_api, handle_signal
from bide.service.owners import LOCAL_PRINCIPAL, is_admin, owner_of, principal_of
from bide.service.sessions import create_session

__all__ = ["aws_fixture", "bench_fixture"]

ALICE = PRINCIPAL
BOB = f"arn:aws:sts::{ACCOUNT}:assumed-role/developer/bob"
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/bide-admin"
ADMIN = f"arn:aws:sts::{ACCOUNT}:assumed-role/bide-admin/carol"
JSON_TYPE = {"Content-Type": "application/json"}

#: How to call each IAM route on a session (method, path, body). Every route of the API must
#: be here (see the first test), so a new route cannot skip the owner check unnoticed.
SESSION_ROUTES: dict[str, tuple[str, str, Any]] = {
    "POST /sessions": ("POST", "/sessions", {"session_id": "{sid}"}),
    "GET /sessions/{session_id}": ("GET", "/sessions/{sid}", None),
    "GET /sessions/{session_id}/transcript": ("GET", "/sessions/{sid}/transcript", None),
    "GET /sessions/{session_id}/tasks": ("GET", "/sessions/{sid}/tasks", None),
    "GET /sessions/{session_id}/submissions": ("GET", "/sessions/{sid}/submissions", None),
    "GET /sessions/{session_id}/hooks": ("GET", "/sessions/{sid}/hooks", None),
    "POST /sessions/{session_id}/inputs": (
        "POST",
        "/sessions/{sid}/inputs",
        {"content": "hi", "request_id": "r-1"},
    ),
    "POST /sessions/{session_id}/stop": ("POST", "/sessions/{sid}/stop", None),
    "POST /sessions/{session_id}/tasks/{task_id}/cancel": (
        "POST",
        "/sessions/{sid}/tasks/t-1/cancel",
        None,
    ),
    "GET /sessions/{session_id}/workflow": ("GET", "/sessions/{sid}/workflow", None),
    "GET /sessions/{session_id}/workflow/{name}": ("GET", "/sessions/{sid}/workflow/tasks", None),
    "POST /sessions/{session_id}/asks/{ask_id}/answer": (
        "POST",
        "/sessions/{sid}/asks/a-1/answer",
        {"text": "yes"},
    ),
    "POST /sessions/{session_id}/authorizations/{request_id}/complete": (
        "POST",
        "/sessions/{sid}/authorizations/q-1/complete",
        {"token": "t"},
    ),
    "POST /sessions/{session_id}/approvals/{approval_id}/decide": (
        "POST",
        "/sessions/{sid}/approvals/p-1/decide",
        {"approved": True},
    ),
    "POST /sessions/{session_id}/end": ("POST", "/sessions/{sid}/end", None),
    "GET /sessions/{session_id}/events": ("GET", "/sessions/{sid}/events", None),
    "POST /sessions/{session_id}/promises/{promise_id}/resolve": (
        "POST",
        "/sessions/{sid}/promises/p-1/resolve",
        {"value": 1},
    ),
    "POST /sessions/{session_id}/promises/{promise_id}/reject": (
        "POST",
        "/sessions/{sid}/promises/p-1/reject",
        {"error": "no"},
    ),
    "POST /sessions/{session_id}/invocations/{invocation_id}/reply": (
        "POST",
        "/sessions/{sid}/invocations/i-1/reply",
        {"key": "done", "producer": "p", "correlation": "c"},
    ),
    SIGNAL_ROUTES["signal"]: (
        "POST",
        "/sessions/{sid}/tasks/t-1/signals/test.reply/done",
        {"text": "x"},
    ),
    SIGNAL_ROUTES["signal_failure"]: (
        "POST",
        "/sessions/{sid}/tasks/t-1/signals/test.reply/done/failure",
        {"type": "T", "message": "m"},
    ),
    SIGNAL_ROUTES["signal_beat"]: (
        "POST",
        "/sessions/{sid}/tasks/t-1/signals/test.reply/done/heartbeat",
        None,
    ),
}
#: Routes not about one session: the caller's own listing.
CALLER_ROUTES = {"GET /sessions"}


@pytest.fixture(params=["dynamodb", "sqlite"])
def deps(request: pytest.FixtureRequest) -> Iterator[Deps]:
    if request.param == "sqlite":
        store = SQLiteStore()
        made = Deps(
            store=store,
            alarms=Alarms(),
            queue=Queue(),
            app=make_app(Probe()),
            clock=ManualClock(),
            ids=RandomIds(),
        )
    else:
        made = request.getfixturevalue("bench").deps
    yield made.replace(admin_principals=frozenset({ADMIN_ROLE}))


def call(deps: Deps, route: str, sid: str, principal: str | None) -> tuple[int, Any]:
    method, path, body = SESSION_ROUTES[route]
    path = path.replace("{sid}", sid)
    if isinstance(body, dict):
        body = {k: (v.replace("{sid}", sid) if isinstance(v, str) else v) for k, v in body.items()}
    handler = handle_signal if route in SIGNAL_ROUTES.values() else handle_api
    event = http_event(method, path, body=body, principal=principal)
    if handler is handle_signal:
        event["routeKey"] = route
    response = asyncio.run(handler(deps, event, None))
    return response["statusCode"], response_json(response)


def create(deps: Deps, principal: str, sid: str | None = None) -> str:
    event = http_event(
        "POST", "/sessions", body={"session_id": sid or unique("s")}, principal=principal
    )
    response = asyncio.run(handle_api(deps, event, None))
    assert response["statusCode"] == 201, response
    return str(response_json(response)["session_id"])


def test_every_iam_route_is_in_the_owner_table() -> None:
    iam_signal_routes = {
        SIGNAL_ROUTES[name] for name in ("signal", "signal_failure", "signal_beat")
    }
    assert set(SESSION_ROUTES) | CALLER_ROUTES == set(API_ROUTES) | iam_signal_routes


@pytest.mark.parametrize("route", sorted(SESSION_ROUTES))
def test_another_principal_gets_403_without_learning_the_owner(deps: Deps, route: str) -> None:
    sid = create(deps, ALICE)
    seq = deps.store.head(sid)
    status, body = call(deps, route, sid, BOB)
    assert status == 403, body
    error = body["error"]
    assert error == f"session {sid!r} belongs to another principal"
    assert "alice" not in error and ACCOUNT not in error
    assert deps.store.head(sid) == seq  # refused before anything was written
    assert owner_of(deps.store, sid) == ALICE


@pytest.mark.parametrize("route", sorted(SESSION_ROUTES))
def test_the_owner_and_administrators_get_through(deps: Deps, route: str) -> None:
    sid = create(deps, ALICE)
    for principal in (ALICE, ADMIN):
        status, body = call(deps, route, sid, principal)
        # Each route answers in its own way (an unknown task or ask is a 404 or a result
        # saying so), never with the owner check's 403.
        assert status != 403 and status < 500, (principal, status, body)


@pytest.mark.parametrize("route", sorted(SESSION_ROUTES))
def test_a_request_without_an_iam_principal_is_refused(deps: Deps, route: str) -> None:
    sid = create(deps, ALICE)
    status, body = call(deps, route, sid, None)
    assert status == 403 and "no IAM principal" in body["error"], body


@pytest.mark.parametrize("route", sorted(SESSION_ROUTES))
def test_a_session_without_a_recorded_owner_stays_open(deps: Deps, route: str) -> None:
    legacy = asyncio.run(create_session(deps, unique("legacy")))
    assert owner_of(deps.store, legacy) is None
    status, body = call(deps, route, legacy, BOB)
    assert status != 403 and status < 500, (status, body)
    assert owner_of(deps.store, legacy) is None  # using it claims nothing


def test_two_principals_racing_for_one_id_one_wins(deps: Deps) -> None:
    sid = create(deps, ALICE)
    event = http_event("POST", "/sessions", body={"session_id": sid}, principal=BOB)
    response = asyncio.run(handle_api(deps, event, None))
    assert response["statusCode"] == 403
    assert owner_of(deps.store, sid) == ALICE


def test_a_webhook_works_for_whoever_holds_its_token(bench: Bench) -> None:
    sid = create(bench.deps, ALICE)
    task_id = bench.start_tool("await_hook", {}, sid)
    bench.drain()
    token = bench.probe.minted[task_id].token
    event = hook_event(token, '{"text": "green"}', headers=JSON_TYPE)
    assert principal_of(event) is None  # the webhook route has no IAM authorizer
    response = asyncio.run(handle_signal(bench.deps, event, None))
    assert response["statusCode"] == 202, response
    bench.drain()
    assert bench.task(sid, task_id).state.status == "terminal"


def test_administrators_are_read_from_the_environment() -> None:
    base = {
        "BIDE_APP": "handler_fixtures:default_app",
        "BIDE_TABLE": "table",
        "BIDE_BUCKET": "bucket",
        "BIDE_WAKE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q.fifo",
    }
    both = f"{ADMIN_ROLE}, {ALICE}"
    settings = settings_from_env({**base, "BIDE_ADMIN_PRINCIPALS": both})
    assert deps_from_env(settings=settings).admin_principals == {ADMIN_ROLE, ALICE}
    assert deps_from_env(settings=settings_from_env(base)).admin_principals == frozenset()
    with pytest.raises(ConfigError, match="BIDE_ADMIN_PRINCIPALS"):
        settings_from_env({**base, "BIDE_ADMIN_PRINCIPALS": "alice"})


def test_admin_matching() -> None:
    assert is_admin(ADMIN, {ADMIN_ROLE})  # any session of the named role
    assert is_admin(ALICE, {ALICE})
    assert not is_admin(BOB, {ADMIN_ROLE})
    assert not is_admin("arn:aws:sts::999999999999:assumed-role/bide-admin/x", {ADMIN_ROLE})
    assert not is_admin(ALICE, set())


def request(headers: list[tuple[str, str]], peer: str = "127.0.0.1", path: str = "/sessions"):
    return HttpRequest("GET", path, "", headers, b"", peer)


def test_the_local_stack_names_its_caller() -> None:
    route, params = find_route("GET", "/sessions")  # type: ignore[misc]
    assert local_principal(request([]), route) == LOCAL_PRINCIPAL
    assert local_principal(request([("X-Bide-Principal", "bob")]), route) == "bob"
    # Only a request from this machine may name its caller; a webhook has none.
    assert local_principal(request([("X-Bide-Principal", "bob")], "192.0.2.7"), route) is None
    hook, _ = find_route("POST", "/hooks/abc")  # type: ignore[misc]
    assert local_principal(request([], path="/hooks/abc"), hook) is None
    event = http_api_event(
        method="GET",
        raw_path="/sessions",
        raw_query="",
        headers=[],
        body=b"",
        route=route,
        path_parameters=params,
        source_ip="127.0.0.1",
        domain="127.0.0.1",
        request_id="r",
        now=0.0,
        principal="bob",
    )
    assert principal_of(event) == "bob"
    assert re.fullmatch(r"\d{12}", event["requestContext"]["authorizer"]["iam"]["accountId"])


def test_the_construct_names_the_administrators_to_every_function(tmp_path) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT, BideService
    from bide.constants import ENV_ADMIN_PRINCIPALS

    def stack(admins: list[str]) -> tuple[cdk.Stack, BideService]:
        app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
        made = cdk.Stack(app, "Owners")
        (tmp_path / "my_app.py").write_text("app = None\n")
        service = BideService(
            made, "S", app_module="my_app:app", app_paths=[tmp_path], admin_principals=admins
        )
        return made, service

    made, _ = stack([ADMIN_ROLE, ALICE])
    functions = Template.from_stack(made).find_resources("AWS::Lambda::Function")
    envs = [f["Properties"].get("Environment", {}).get("Variables", {}) for f in functions.values()]
    named = [env for env in envs if "BIDE_APP" in env]
    assert len(named) == 3
    assert all(env[ENV_ADMIN_PRINCIPALS] == f"{ADMIN_ROLE},{ALICE}" for env in named)
    with pytest.raises(ValueError, match="admin_principals"):
        stack(["bob"])
