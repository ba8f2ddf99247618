"""What the dev console reads and does, over HTTP to an in-process local stack: the live
webhook URLs of the sessions API (``GET /sessions/{id}/hooks`` and the session view's
``webhooks``), pending approvals and their decisions, the local-only routes
(``/_local/sessions``, ``/_local/sessions/{id}`` with progress) and the page's files.

The page itself is driven in a real browser by tests/test_console_browser.py.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limits_fixtures import http
from pydantic import BaseModel
from stack_kit import local_stack

from bide import SignalValue, define_signal
from bide.agent import Agent
from bide.agent.providers import ModelRequest, ModelResponse, ToolResultMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.local.client import ApiClient
from bide.local.console import ASSETS, MAX_PROGRESS_TASKS, ProgressLog, asset
from bide.local.thread import BackgroundStack
from bide.service.webhooks import mint_webhook, sign
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool
from bide.workflow import define_workflow_tool, setup_app
from examples.console_app import build_app as console_app

DONE = define_signal("test.done", 1, dict)
HMAC_SECRET = "s3cret-for-the-test"


class NoArgs(BaseModel):
    pass


async def signed_hook(args: NoArgs, api: Any) -> ToolResult | Sleep:
    state = await api.read_signal(DONE, "done")
    if isinstance(state, SignalValue):
        return ToolResult.of_text(f"got {json.dumps(state.value, sort_keys=True)}")
    await mint_webhook(api, DONE, "done", hmac_secret=HMAC_SECRET)
    return Sleep(checkpoint="minted", signals=[DONE.key("done")])


async def two_requests(args: NoArgs, ctx: Any) -> list[Any]:
    hook = await ctx.webhook(name="callback")
    return [await hook, await hook]


def script(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return reply(f"result: {last.text}")
    tool = "two_requests" if "flow" in str(last.text) else "signed_hook"
    return call_tool(tool, {}, id=f"{tool}-1")


def hooks_app() -> App:
    tools = ToolRegistry(
        [
            define_tool("signed_hook", "mint a signed webhook", NoArgs, signed_hook),
            define_workflow_tool("two_requests", "take two webhook requests", NoArgs, two_requests),
        ]
    )
    return setup_app(App(signals=[DONE], tools=tools, agent=Agent(ScriptedProvider(script), tools)))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[BackgroundStack]:
    with local_stack(hooks_app(), tmp_path) as s:
        yield s


@pytest.fixture
def console(tmp_path: Path) -> Iterator[BackgroundStack]:
    with local_stack(console_app(), tmp_path) as s:
        yield s


def start(stack: BackgroundStack, sid: str, text: str) -> ApiClient:
    client = ApiClient(stack.url)
    assert client.request("POST", "/sessions", {"session_id": sid}).status == 201
    body = {"content": text, "request_id": "r1"}
    assert client.request("POST", f"/sessions/{sid}/inputs", body).status == 202
    assert stack.settle(10)
    return client


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return http("POST", url, body, {"Content-Type": "application/json", **(headers or {})})


def answer_of(client: ApiClient, sid: str) -> str | None:
    [submission] = client.request("GET", f"/sessions/{sid}").body["submissions"]
    return submission.get("answer")


# --- webhook URLs ---------------------------------------------------------------------------


def test_a_tool_webhook_is_listed_until_its_task_ends(stack: BackgroundStack) -> None:
    client = start(stack, "s-tool", "go")
    listed = client.request("GET", "/sessions/s-tool/hooks")
    assert listed.status == 200 and listed.body["session_id"] == "s-tool"
    [hook] = listed.body["items"]
    [task] = [t for t in client.request("GET", "/sessions/s-tool").body["tasks"] if t.get("tool")]
    assert hook["url"].startswith(f"{stack.url}/hooks/")
    assert (hook["task_id"], hook["tool"], hook["source"]) == (task["id"], "signed_hook", "tool")
    assert (hook["signal"], hook["key"], hook["signed"], hook["received"]) == (
        "test.done",
        "done",
        True,
        0,
    )
    # The session view carries the same list.
    assert client.request("GET", "/sessions/s-tool").body["webhooks"] == [hook]

    # The listed URL is the one that works: unsigned is refused, signed is delivered.
    body = b'{"ok": true}'
    assert post(hook["url"], body)[0] == 401
    stamp = str(int(time.time()))  # whole Unix seconds, as the route requires
    headers = {"X-Bide-Timestamp": stamp, "X-Bide-Signature": sign(HMAC_SECRET, stamp, body)}
    assert post(hook["url"], body, headers) == (202, {"result": "delivered", "errors": []})
    assert stack.settle(10)
    assert answer_of(client, "s-tool") == 'result: got {"ok": true}'
    assert client.request("GET", "/sessions/s-tool/hooks").body["items"] == []


def test_a_workflow_webhook_counts_its_requests(stack: BackgroundStack) -> None:
    client = start(stack, "s-flow", "flow")
    [hook] = client.request("GET", "/sessions/s-flow/hooks").body["items"]
    assert (hook["source"], hook["name"], hook["tool"], hook["signed"]) == (
        "workflow",
        "callback",
        "two_requests",
        False,
    )
    assert hook["signal"] == "bide.workflow.webhook" and hook["key"].endswith(".*")
    assert post(hook["url"], b'{"n": 1}')[0] == 202
    assert stack.settle(10)
    [again] = client.request("GET", "/sessions/s-flow/hooks").body["items"]
    assert (again["url"], again["received"]) == (hook["url"], 1)
    assert post(hook["url"], b'{"n": 2}')[0] == 202
    assert stack.settle(10)
    assert answer_of(client, "s-flow") == 'result: [{"n": 1}, {"n": 2}]'
    assert client.request("GET", "/sessions/s-flow/hooks").body["items"] == []


def test_hooks_of_an_unknown_or_malformed_session_are_refused(stack: BackgroundStack) -> None:
    client = ApiClient(stack.url)
    assert client.request("GET", "/sessions/s-nobody/hooks").status == 404
    assert client.request("GET", "/sessions/has%20space/hooks").status == 422


# --- approvals ------------------------------------------------------------------------------


def test_a_pending_approval_is_listed_with_its_arguments_and_decided_once(
    console: BackgroundStack,
) -> None:
    client = start(console, "s-ap", "Please delete feature-x")
    [approval] = client.request("GET", "/sessions/s-ap/workflow").body["approvals"]
    assert (approval["tool"], approval["status"]) == ("delete_branch", "pending")
    assert approval["arguments"] == {"branch": "feature-x"}
    path = f"/sessions/s-ap/approvals/{approval['id']}/decide"
    assert client.request("POST", path, {"approved": "maybe"}).status == 422
    assert client.request("POST", path, {"approved": True, "extra": 1}).status == 422
    decided = client.request("POST", path, {"approved": True, "by": "test", "note": "fine"})
    assert (decided.status, decided.body) == (200, {"result": "decided"})
    again = client.request("POST", path, {"approved": False})
    assert again.body == {"result": "already_decided"}
    assert console.settle(10)
    assert answer_of(client, "s-ap") == "Done: deleted branch feature-x"
    assert client.request("GET", "/sessions/s-ap/workflow").body["approvals"] == []
    unknown = client.request("POST", "/sessions/s-ap/approvals/ap-none/decide", {"approved": True})
    assert unknown.body == {"result": "not_found"}
    nobody = "/sessions/s-nobody/approvals/ap-x/decide"
    assert client.request("POST", nobody, {"approved": True}).status == 404


def test_a_denied_approval_blocks_the_call(console: BackgroundStack) -> None:
    client = start(console, "s-deny", "delete main")
    [approval] = client.request("GET", "/sessions/s-deny/workflow").body["approvals"]
    path = f"/sessions/s-deny/approvals/{approval['id']}/decide"
    body = {"approved": False, "by": "ops", "note": "not main"}
    assert client.request("POST", path, body).body == {"result": "decided"}
    assert console.settle(10)
    answer = answer_of(client, "s-deny") or ""
    assert answer.startswith("Failed:") and "denied by ops (not main)" in answer


# --- the local-only routes ------------------------------------------------------------------


def test_the_session_list_says_what_each_session_is_doing(console: BackgroundStack) -> None:
    client = start(console, "s-ask", "Please deploy api")
    start(console, "s-ci", "Fix the flaky test")
    ApiClient(console.url).request("POST", "/sessions", {"session_id": "s-new"})
    listed = client.request("GET", "/_local/sessions")
    assert listed.status == 200
    found = {s["session_id"]: s for s in listed.body["sessions"]}
    assert [s["session_id"] for s in listed.body["sessions"]] == ["s-new", "s-ci", "s-ask"]
    assert found["s-ask"]["state"] == "needs you" and found["s-ask"]["asks"] == 1
    assert found["s-ci"]["state"] == "parked" and found["s-ci"]["alarm_at"] is not None
    assert found["s-ci"]["live_tasks"] == 2 and found["s-ci"]["asks"] == 0
    assert found["s-new"]["state"] == "idle" and found["s-new"]["live_tasks"] == 0


def test_a_sessions_local_facts_hold_its_alarm_and_progress(console: BackgroundStack) -> None:
    client = start(console, "s-ask", "Please deploy api")
    facts = client.request("GET", "/_local/sessions/s-ask")
    assert facts.status == 200
    [progress] = facts.body["progress"]
    [call] = [t for t in client.request("GET", "/sessions/s-ask").body["tasks"] if t.get("tool")]
    assert progress["task_id"] == call["id"]
    assert progress["value"] == {"stage": "waiting for approval", "plan": "3 pods, 1 migration"}
    assert facts.body["alarm_at"] is None and facts.body["wakes_queued"] == []
    assert facts.body["worker_running"] is False

    start(console, "s-ci", "Fix the flaky test")
    ci = client.request("GET", "/_local/sessions/s-ci").body
    assert ci["alarm_at"] == client.request("GET", "/sessions/s-ci").body["wake"]["at"]
    assert ci["progress"] == []
    assert client.request("GET", "/_local/sessions/s-nobody").status == 404
    assert client.request("POST", "/_local/sessions/s-ci", {}).status == 405


def test_the_progress_log_keeps_the_last_value_of_the_newest_tasks() -> None:
    class Clock:
        t = 0.0

        def now(self) -> float:
            self.t += 1
            return self.t

    log = ProgressLog(Clock(), limit=2)
    log("a", {"n": 1})
    log("a", {"n": 2})
    log("b", object())  # not JSON: kept as its repr
    assert [(p.task_id, p.value, p.count) for p in log.of({"a"})] == [("a", {"n": 2}, 2)]
    assert log.of({"b"})[0].value.startswith("<object object")
    log("c", "three")
    assert [p.task_id for p in log.of({"a", "b", "c"})] == ["b", "c"]
    assert MAX_PROGRESS_TASKS >= 100


def test_the_console_page_and_its_files_are_served_from_the_package(
    console: BackgroundStack,
) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path, name in [
        ("/_console", "console.html"),
        ("/_console/", "console.html"),
        ("/_console/console.js", "console.js"),
        ("/_console/console.css", "console.css"),
    ]:
        with opener.open(console.url + path, timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == ASSETS[name]
            assert "default-src 'none'" in response.headers["Content-Security-Policy"]
            assert response.read() == asset(name)
    page = asset("console.html").decode()
    # Nothing on the page comes from elsewhere: every src and href is this server's.
    assert 'src="/_console/console.js"' in page and 'href="/_console/console.css"' in page
    for text in (page, asset("console.js").decode(), asset("console.css").decode()):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    client = ApiClient(console.url)
    assert client.request("GET", "/_console/../stack.py").status == 404
    assert client.request("GET", "/_console/console.html").status == 404
    assert client.request("POST", "/_console", {}).status == 405
    assert client.request("GET", "/_local/nothing").status == 404
