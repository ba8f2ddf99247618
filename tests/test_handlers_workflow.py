"""The workflow routes of the sessions API: open questions and answers, the workflow view,
ending a session's background work (API Gateway v2 events through handle_api)."""

from __future__ import annotations

import asyncio

from handler_fixtures import http_event, response_json
from kit import Kit
from pydantic import BaseModel
from test_workflow_support import deps_for

from bide.agent import Agent
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.app import App
from bide.service.http import handle_api
from bide.service.sessions import create_session, submit
from bide.service.worker import run_session
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool, setup_app


class Deploy(BaseModel):
    service: str


async def deploy_body(args: Deploy, ctx):
    answer = await ctx.ask(
        f"Deploy {args.service}?",
        options=[{"id": "yes", "label": "Deploy"}, {"id": "no", "label": "Cancel"}],
    )
    return f"deploy {args.service}: {answer.option_id}"


def script(request: ModelRequest):
    if request.messages[-1].role == "user":
        return call_tool("deploy", {"service": "api"}, id="d1")
    return reply(last_tool_result(request))


def make(body=deploy_body):
    tools = ToolRegistry([define_workflow_tool("deploy", "Deploy", Deploy, body)])
    app = setup_app(App(agent=Agent(ScriptedProvider(script), tools)))
    kit = Kit(*app.task_kinds())
    return kit, deps_for(kit, app)


def api(deps, method, path, body=None):
    response = asyncio.run(handle_api(deps, http_event(method, path, body=body), None))
    return response["statusCode"], response_json(response)


def test_a_question_is_visible_answered_once_and_resumes_the_run():
    _kit, deps = make()
    sid = asyncio.run(create_session(deps, "s-wf"))
    asyncio.run(submit(deps, sid, "ship it", request_id="r1"))
    asyncio.run(run_session(deps, sid))
    status, view = api(deps, "GET", f"/sessions/{sid}/workflow")
    assert status == 200
    [ask] = view["asks"]
    assert ask["prompt"] == "Deploy api?" and ask["status"] == "open"

    status, body = api(
        deps, "POST", f"/sessions/{sid}/asks/{ask['id']}/answer", {"option_id": "yes"}
    )
    assert (status, body) == (200, {"result": "delivered"})
    status, body = api(
        deps, "POST", f"/sessions/{sid}/asks/{ask['id']}/answer", {"option_id": "no"}
    )
    assert body == {"result": "duplicate"}
    asyncio.run(run_session(deps, sid))
    status, session = api(deps, "GET", f"/sessions/{sid}")
    assert session["submissions"][0]["answer"] == "deploy api: yes"
    # an answer never steers the conversation: no user entry was added for it
    assert [e["type"] for e in session["entries"]].count("user") == 1
    assert api(deps, "GET", f"/sessions/{sid}/workflow")[1]["asks"] == []


def test_an_ask_answered_with_a_failure_ends_the_call_failed_with_it():
    _kit, deps = make()
    sid = asyncio.run(create_session(deps, "s-wf-fail"))
    asyncio.run(submit(deps, sid, "ship it", request_id="r1"))
    asyncio.run(run_session(deps, sid))
    [ask] = api(deps, "GET", f"/sessions/{sid}/workflow")[1]["asks"]
    path = f"/sessions/{sid}/asks/{ask['id']}/answer"
    status, body = api(deps, "POST", path, {"failure": {"type": "", "message": "m"}})
    assert status == 422 and body["detail"][0]["loc"][-1] == "type"
    failure = {"type": "Unavailable", "message": "nobody on call"}
    assert api(deps, "POST", path, {"failure": failure}) == (200, {"result": "delivered"})
    assert api(deps, "POST", path, {"option_id": "yes"})[1] == {"result": "duplicate"}
    [answered] = [e for e in events_after(deps, sid)["items"] if e["type"] == "ask_answered"]
    assert (answered["answer"], answered["failure"]) == (None, failure)
    asyncio.run(run_session(deps, sid))
    session = api(deps, "GET", f"/sessions/{sid}")[1]
    assert session["submissions"][0]["answer"] == "Unavailable: nobody on call"


async def deploy_with_progress(args: Deploy, ctx):
    ctx.progress({"stage": "planning"})
    return await deploy_body(args, ctx)


def events_after(deps, sid, cursor=None):
    query = {"cursor": cursor} if cursor else None
    event = http_event("GET", f"/sessions/{sid}/events", query=query)
    response = asyncio.run(handle_api(deps, event, None))
    assert response["statusCode"] == 200
    return response_json(response)


def test_a_client_following_the_events_sees_progress_and_answers_the_question():
    _kit, deps = make(deploy_with_progress)
    sid = asyncio.run(create_session(deps, "s-wf"))
    asyncio.run(submit(deps, sid, "ship it", request_id="r1"))
    asyncio.run(run_session(deps, sid))
    page = events_after(deps, sid)
    progress, opened = page["items"]
    assert (progress["type"], progress["tool"], progress["value"]) == (
        "progress",
        "deploy",
        {"stage": "planning"},
    )
    assert opened["type"] == "ask_opened" and opened["prompt"] == "Deploy api?"
    assert opened["task_id"] == progress["task_id"] and opened["call_id"] == "d1"
    # The event says where the answer goes: the client needs nothing else.
    status, body = api(deps, "POST", opened["answer_path"], {"option_id": "yes"})
    assert (status, body) == (200, {"result": "delivered"})
    asyncio.run(run_session(deps, sid))
    rest = events_after(deps, sid, page["next"])["items"]
    assert [e["type"] for e in rest] == ["ask_answered", "run_ended"]
    assert rest[0]["ask"] == opened["ask"] and rest[0]["answer"]["option_id"] == "yes"
    assert rest[1]["answer"] == "deploy api: yes"


def test_workflow_routes_validate_and_404():
    _kit, deps = make()
    sid = asyncio.run(create_session(deps, "s-wf2"))
    assert api(deps, "GET", "/sessions/s-nope/workflow")[0] == 404
    status, body = api(deps, "POST", f"/sessions/{sid}/asks/a1/answer", {"option_id": 3})
    assert status == 422 and body["detail"][0]["loc"][-1] == "option_id"
    status, body = api(deps, "POST", f"/sessions/{sid}/asks/a-none/answer", {"text": "x"})
    assert body == {"result": "not_found"}
    status, body = api(deps, "POST", f"/sessions/{sid}/end")
    assert (status, body) == (202, {"cancelled": []})
    status, body = api(
        deps, "POST", f"/sessions/{sid}/authorizations/r-none/complete", {"token": "t"}
    )
    assert body == {"result": "not_found"}


def test_a_value_the_store_refuses_is_the_senders_4xx_not_a_500(monkeypatch):
    """Whatever route a refused value comes through (today the route's own checks stop
    them earlier), the engine's ValueRefused is answered with its status and message, never
    as a 500, and nothing is delivered."""
    from bide.engine.limits import ValueTooLarge
    from bide.service import workflow as workflow_service

    _kit, deps = make()
    sid = asyncio.run(create_session(deps, "s-wf3"))
    asyncio.run(submit(deps, sid, "ship it", request_id="r1"))
    asyncio.run(run_session(deps, sid))
    [ask] = api(deps, "GET", f"/sessions/{sid}/workflow")[1]["asks"]

    def refuse(*_args, **_kwargs):
        raise ValueTooLarge("the answer", "is 300000 bytes of JSON; the limit is 262144", 262144)

    monkeypatch.setattr(workflow_service, "answer_in", refuse)
    path = f"/sessions/{sid}/asks/{ask['id']}/answer"
    status, body = api(deps, "POST", path, {"text": "big"})
    assert status == 413 and body["error"].endswith("nothing was stored"), (status, body)
    assert api(deps, "GET", f"/sessions/{sid}/workflow")[1]["asks"][0]["status"] == "open"
