"""The sessions API function: synthetic API Gateway v2 events against moto.

Create, submit (idempotent by request id), view (task graph, live tool calls, transcript),
stop, cancel; validation errors naming each field and why; unknown sessions; the committed
OpenAPI document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Before importing them: their asserts get pytest's messages (other modules register the same).
from aws_fixtures import unique
from handler_fixtures import (
    PRINCIPAL,
    REPLY,
    Bench,
    aws_fixture,
    bench_fixture,
    http_event,
    response_json,
    run,
    signal_event,
)

from bide.service.http import (
    API_ROUTES,
    _resolver_for,
    api_resolver,
    handle_api,
    handle_signal,
    openapi_json,
)

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

ROOT = Path(__file__).resolve().parents[1]
HOUR = 3600.0


def call(b: Bench, method: str, path: str, body=None, **kw) -> tuple[int, dict]:
    response = run(handle_api(b.deps, http_event(method, path, body=body, **kw), None))
    assert isinstance(response["statusCode"], int)
    return response["statusCode"], response_json(response)


def new_session(b: Bench, session_id: str | None = None) -> str:
    status, body = call(b, "POST", "/sessions", {"session_id": session_id} if session_id else None)
    assert status == 201
    return body["session_id"]


def field_errors(body: dict) -> dict[str, str]:
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in body["detail"]}


# --- create -------------------------------------------------------------------------------------


def test_create_with_and_without_an_id_is_idempotent(bench: Bench) -> None:
    generated = new_session(bench)
    assert generated.startswith("s-")
    chosen = unique("mine")
    assert new_session(bench, chosen) == chosen
    seq = bench.seq(chosen)
    assert new_session(bench, chosen) == chosen
    assert bench.seq(chosen) == seq  # creating again wrote nothing
    status, view = call(bench, "GET", f"/sessions/{chosen}")
    assert status == 200
    assert view == {
        "session_id": chosen,
        "owner": PRINCIPAL,
        "running": False,
        "wake": {"active": False, "at": None},
        "entries_total": 0,
        "tasks_total": 0,
        "tasks": [],
        "tasks_next": None,
        "tasks_more": False,
        "entries": [],
        "entries_next": None,
        "entries_more": False,
        "submissions": [],
        "submissions_next": None,
        "submissions_more": False,
        "webhooks": [],
        "webhooks_next": None,
        "webhooks_more": False,
    }


def test_create_validation(bench: Bench) -> None:
    status, body = call(bench, "POST", "/sessions", {"session_id": "has spaces"})
    assert status == 422
    assert "body.session_id" in field_errors(body)
    assert "pattern" in field_errors(body)["body.session_id"]
    status, body = call(bench, "POST", "/sessions", {"session": "typo"})
    assert status == 422 and "body.session" in field_errors(body)
    status, body = call(bench, "POST", "/sessions", {"session_id": "x" * 129})
    assert status == 422


# --- submit -------------------------------------------------------------------------------------


def test_submit_is_accepted_idempotent_by_request_id_and_wakes_the_session(bench: Bench) -> None:
    sid = new_session(bench)
    inputs = f"/sessions/{sid}/inputs"
    status, first = call(bench, "POST", inputs, {"content": "hello", "request_id": "r1"})
    assert status == 202
    assert (first["id"], first["content"], first["status"]) == ("r1", "hello", "placed")
    # Woken before the write (a crash never strands the input) and after it.
    assert [w["reason"] for w in bench.queued()] == ["submit", "submitted"]
    seq = bench.seq(sid)
    status, again = call(bench, "POST", inputs, {"content": "hello again", "request_id": "r1"})
    assert status == 202 and again == first
    assert bench.seq(sid) == seq  # a repeat stores nothing

    bench.drain()
    status, view = call(bench, "GET", f"/sessions/{sid}")
    assert [(e["type"], e["text"]) for e in view["entries"]] == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
    ]
    (submission,) = view["submissions"]
    assert (submission["status"], submission["answer"]) == ("done", "echo: hello")
    # Asked again after it was answered: still the same submission, now done.
    status, late = call(bench, "POST", inputs, {"content": "hello", "request_id": "r1"})
    assert (status, late["status"]) == (202, "done")


def test_submit_validation_names_each_field_and_why_and_stores_nothing(bench: Bench) -> None:
    sid = new_session(bench)
    seq = bench.seq(sid)
    path = f"/sessions/{sid}/inputs"
    status, body = call(bench, "POST", path, {"request_id": "r1"})
    assert status == 422
    assert field_errors(body) == {"body.content": "Field required"}
    assert body["detail"][0]["type"] == "missing"

    status, body = call(bench, "POST", path, {"content": "", "request_id": "r1"})
    assert status == 422 and "at least 1 character" in field_errors(body)["body.content"]

    later = {"content": "x", "request_id": "r1", "when_busy": "later"}
    status, body = call(bench, "POST", path, later)
    assert status == 422 and "'steer'" in field_errors(body)["body.when_busy"]

    status, body = call(bench, "POST", path, {"content": "x", "request_id": "a/b"})
    assert status == 422 and "body.request_id" in field_errors(body)

    json_type = {"content-type": "application/json"}
    status, body = call(bench, "POST", path, raw="{broken", headers=json_type)
    assert status == 422 and body["detail"][0]["type"] == "json_invalid"

    status, body = call(bench, "POST", path)
    assert status == 422

    body_ok = {"content": "x", "request_id": "r"}
    status, body = call(bench, "POST", "/sessions/bad%20id/inputs", body_ok)
    assert status == 422 and "path.session_id" in field_errors(body)

    assert bench.seq(sid) == seq and bench.queued() == []


# --- view, stop, cancel -------------------------------------------------------------------------


def parked_session(b: Bench) -> tuple[str, dict]:
    """A session whose run waits on a tool call parked on a webhook (1 hour deadline)."""
    sid = new_session(b)
    content = 'call await_hook {"after": 3600}'
    status, _ = call(b, "POST", f"/sessions/{sid}/inputs", {"content": content, "request_id": "r1"})
    assert status == 202
    b.drain()
    status, view = call(b, "GET", f"/sessions/{sid}")
    assert status == 200
    return sid, view


def tool_of(view: dict) -> str:
    (tool,) = [t for t in view["tasks"] if t["kind"] == "bide.tool"]
    return tool["id"]


def test_view_shows_the_task_graph_live_tool_calls_and_entries(bench: Bench) -> None:
    start = bench.clock.now()
    _, view = parked_session(bench)
    assert view["running"] is True
    assert view["wake"] == {"active": False, "at": start + HOUR}
    by_kind = {t["kind"]: t for t in view["tasks"]}
    generation, tool = by_kind["bide.generation"], by_kind["bide.tool"]
    assert len(view["tasks"]) == 2 and generation["status"] == "waiting"
    assert generation["policy"] == "any" and generation["on"] == [tool["id"]]
    assert tool == {
        "id": tool["id"],
        "kind": "bide.tool",
        "owner": generation["id"],
        "status": "sleeping",
        "abort_marked": False,
        "phase": "parked",
        "until": start + HOUR,
        "keys": [{"signal": REPLY.name, "key": "done"}],
        "heartbeat": None,  # no heartbeat on this sleep
        "beat_by": None,
        "slots": None,  # no key holds anything
        "policy": None,
        "on": None,
        "tool": {"name": "await_hook", "arguments": {"after": 3600}},  # as the model sent them
    }
    assert [e["type"] for e in view["entries"]] == ["user", "assistant"]
    assert view["entries"][1]["tool_calls"][0]["name"] == "await_hook"
    (submission,) = view["submissions"]
    assert submission["status"] == "placed"


def test_stop_aborts_the_run_and_its_parked_tool_call(bench: Bench) -> None:
    sid, _ = parked_session(bench)
    assert len(bench.schedules()) == 1
    status, body = call(bench, "POST", f"/sessions/{sid}/stop")
    assert (status, body) == (202, {"stopped": True})
    bench.drain()
    status, view = call(bench, "GET", f"/sessions/{sid}")
    assert view["tasks"] == [] and view["running"] is False
    assert view["wake"] == {"active": False, "at": None}
    assert bench.schedules() == []
    assert call(bench, "POST", f"/sessions/{sid}/stop") == (202, {"stopped": False})


def test_cancel_a_parked_tool_call(bench: Bench) -> None:
    sid, view = parked_session(bench)
    tool_id = tool_of(view)
    status, body = call(bench, "POST", f"/sessions/{sid}/tasks/{tool_id}/cancel")
    assert (status, body) == (202, {"cancelled": True})
    bench.drain()
    status, view = call(bench, "GET", f"/sessions/{sid}")
    types = [e["type"] for e in view["entries"]]
    assert types == ["user", "assistant", "tool_result", "assistant"]
    assert view["tasks"] == [] and bench.schedules() == []
    # The call has ended: cancelling again changes nothing; an unknown task is 404.
    status, body = call(bench, "POST", f"/sessions/{sid}/tasks/{tool_id}/cancel")
    assert (status, body) == (202, {"cancelled": False})
    status, body = call(bench, "POST", f"/sessions/{sid}/tasks/t-nope/cancel")
    assert status == 404 and "t-nope" in body["error"]


def test_a_parked_session_resumes_through_the_signal_function(bench: Bench) -> None:
    sid, view = parked_session(bench)
    tool_id = tool_of(view)
    event = signal_event(sid, tool_id, REPLY.name, "done", {"text": "green"})
    assert run(handle_signal(bench.deps, event, None))["statusCode"] == 202
    bench.drain()
    _, view = call(bench, "GET", f"/sessions/{sid}")
    assert view["entries"][-1]["text"] == "tool said hook said green (15 chars)"
    assert view["submissions"][0]["status"] == "done"


# --- errors -------------------------------------------------------------------------------------


def test_unknown_sessions_are_404(bench: Bench) -> None:
    ghost = unique("s")
    for method, path, body in [
        ("GET", f"/sessions/{ghost}", None),
        ("POST", f"/sessions/{ghost}/inputs", {"content": "hi", "request_id": "r1"}),
        ("POST", f"/sessions/{ghost}/stop", None),
        ("POST", f"/sessions/{ghost}/tasks/t-1/cancel", None),
    ]:
        status, answer = call(bench, method, path, body)
        assert status == 404, (method, path)
        assert ghost in answer["error"]
    assert bench.seq(ghost) == 0 and bench.queued() == []
    assert call(bench, "GET", "/elsewhere")[0] == 404
    assert call(bench, "DELETE", f"/sessions/{ghost}")[0] == 404


def test_a_busy_store_is_503_and_a_crash_is_a_plain_500(bench: Bench, monkeypatch) -> None:
    from bide.engine.errors import StoreUnavailable
    from bide.service import routes_api  # where the route looks view up

    sid = new_session(bench)

    async def busy(deps, session_id):
        raise StoreUnavailable("throttled 8 times")

    monkeypatch.setattr(routes_api, "view", busy)
    response = run(handle_api(bench.deps, http_event("GET", f"/sessions/{sid}"), None))
    assert response["statusCode"] == 503 and response["headers"]["Retry-After"] == "1"
    assert "throttled" not in response["body"]  # the store's own words stay in the logs

    async def broken(deps, session_id):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(routes_api, "view", broken)
    status, body = call(bench, "GET", f"/sessions/{sid}")
    assert (status, body) == (500, {"error": "internal error"})


def test_the_resolver_is_built_once_per_deps(bench: Bench) -> None:
    first = _resolver_for(bench.deps)
    call(bench, "GET", "/sessions/x")
    assert _resolver_for(bench.deps) is first
    other = _resolver_for(bench.deps.replace())  # an equal copy, another Deps
    assert other is not first


# --- OpenAPI ------------------------------------------------------------------------------------


def test_the_committed_openapi_document_is_current() -> None:
    committed = (ROOT / "docs" / "openapi.json").read_text()
    assert committed == openapi_json() + "\n", "run: python scripts/export_openapi.py"
    document = json.loads(committed)
    documented = {
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method in operations
    }
    assert documented == set(API_ROUTES)
    schemas = document["components"]["schemas"]
    assert {"SessionView", "Submission", "SubmitInput", "ValidationErrorBody"} <= set(schemas)
    submit = document["paths"]["/sessions/{session_id}/inputs"]["post"]
    assert set(submit["responses"]) == {"202", "403", "404", "422", "503"}
    assert document["security"] == [{"sigv4": []}]


def test_a_resolver_without_deps_refuses_to_run() -> None:
    with pytest.raises(RuntimeError, match="OpenAPI document only"):
        run(api_resolver().resolve_async(http_event("GET", "/sessions/s-1"), None))
