"""The local stack: HTTP server -> API Gateway v2 events -> the Lambda handlers, the in-process
worker (one per session at a time), the local alarm clock, and a restart that loses nothing.

Every request goes to 127.0.0.1; every wait is bounded.
The stack's parts on their own (alarm clock, wake queue, event shapes) are tested in
``test_local_parts.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from limits_fixtures import post_json
from pydantic import BaseModel
from stack_kit import wait_for

from bide import ManualClock, SQLiteStore
from bide.agent import Agent
from bide.agent.providers import ModelRequest, ToolResultMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.local import LocalStack
from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack
from bide.tools import Sleep, ToolRegistry, define_tool
from examples.agent_app import CI_DEADLINE_SECONDS, CI_INBOX, build_app

ROOT = Path(__file__).resolve().parent.parent
PASSED = {"status": "passed", "log_url": "https://ci.example/build-7"}


# --- helpers ------------------------------------------------------------------------------------


def create(client: ApiClient) -> str:
    response = client.request("POST", "/sessions", {})
    assert response.status in (200, 201), response
    return str(response.body["session_id"])


def submit(client: ApiClient, sid: str, text: str, request_id: str = "r-1") -> None:
    body = {"content": text, "request_id": request_id, "when_busy": "follow_up"}
    response = client.request("POST", f"/sessions/{sid}/inputs", body)
    assert response.ok, response


def view(client: ApiClient, sid: str) -> dict[str, Any]:
    response = client.request("GET", f"/sessions/{sid}")
    assert response.status == 200, response
    return response.body


def parked_tool(client: ApiClient, sid: str) -> dict[str, Any] | None:
    tools = [t for t in view(client, sid)["tasks"] if t.get("tool") and t["status"] == "sleeping"]
    return tools[0] if tools else None


def finished(client: ApiClient, sid: str) -> dict[str, Any] | None:
    found = view(client, sid)
    last = found["entries"][-1] if found["entries"] else {}
    done = not found["tasks"] and last.get("type") == "assistant" and not last.get("tool_calls")
    return found if done else None


def webhook_url(db_path: str, sid: str) -> str:
    store = SQLiteStore(db_path)
    try:
        [doc] = store.list_docs(sid, CI_INBOX)
    finally:
        store.close()
    return str(doc.body["webhook_url"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "dev.sqlite")


# --- the story -------------------------------------------------------------------------------


def test_the_run_ci_story_over_http(db: str) -> None:
    with BackgroundStack(LocalStack(build_app(), db, port=0)) as stack:
        client = ApiClient(stack.url)
        sid = create(client)
        submit(client, sid, "Fix the flaky test and verify it")

        # The agent called run_ci; the tool parked on the webhook's signal with a 2h deadline.
        tool = wait_for(lambda: parked_tool(client, sid), "run_ci to park")
        assert tool["tool"] == {"name": "run_ci", "arguments": {"ref": "main"}}
        assert tool["keys"] == [{"signal": "app.ci-result", "key": "done"}]
        assert stack.settle(5)
        parked = view(client, sid)
        assert parked["wake"]["active"] is False
        assert parked["wake"]["at"] == tool["until"]
        assert tool["until"] == pytest.approx(time.time() + CI_DEADLINE_SECONDS, abs=30)

        # Nothing runs: no worker, no wake queued; one alarm, at wake().at.
        status = stack.status()
        assert status["workers_running"] == []
        assert status["wakes_queued"] == []
        assert status["alarms"] == [{"session_id": sid, "at": tool["until"]}]

        # The CI calls the capability webhook over HTTP.
        url = webhook_url(db, sid)
        assert url.startswith(stack.url + "/hooks/")
        assert post_json(url, PASSED)[0] == 202

        # The session resumed and the model received the result.
        done = wait_for(lambda: finished(client, sid), "the final answer")
        types = [e["type"] for e in done["entries"]]
        assert types == ["user", "assistant", "tool_result", "assistant"]
        assert done["entries"][2]["text"] == "CI passed on main: https://ci.example/build-7"
        assert "CI passed on main" in done["entries"][3]["text"]
        assert stack.settle(5)
        assert stack.status()["alarms"] == []  # disarmed: nothing left to wake for

        # A replayed webhook finds the call ended.
        status_code, body = post_json(url, PASSED)
        assert (status_code, body["result"]) == (410, "closed")


def test_a_ci_failure_over_http_ends_the_call_failed_and_the_model_hears_it(db: str) -> None:
    """Issue 13 on the local stack: the CI posts to ``<webhook>/failure``; a bad failure body
    is 400 naming the field, the good one ends run_ci failed with its type and message."""
    with BackgroundStack(LocalStack(build_app(), db, port=0)) as stack:
        client = ApiClient(stack.url)
        sid = create(client)
        submit(client, sid, "Fix the flaky test and verify it")
        wait_for(lambda: parked_tool(client, sid), "run_ci to park")
        url = webhook_url(db, sid) + "/failure"
        status, body = post_json(url, {"type": "", "message": "m"})
        assert status == 400 and "'type'" in body["error"]
        red = {"type": "BuildFailed", "message": "3 tests failed"}
        assert post_json(url, red) == (202, {"result": "delivered", "errors": []})
        done = wait_for(lambda: finished(client, sid), "the final answer")
        assert done["entries"][2]["text"] == "BuildFailed: 3 tests failed"
        assert done["entries"][3]["text"].startswith("CI did not pass: BuildFailed")
        # The plain route of the same webhook now finds the call ended.
        assert post_json(url[: -len("/failure")], PASSED)[0] == 410


def test_the_status_route_is_local_only_and_unknown_routes_are_404(db: str) -> None:
    with BackgroundStack(LocalStack(build_app(), db, port=0)) as stack:
        client = ApiClient(stack.url)
        assert client.request("GET", "/_local/status").status == 200
        missing = client.request("GET", "/nowhere")
        assert (missing.status, missing.body) == (404, {"message": "Not Found"})
        # The webhook route takes POST only, as on API Gateway.
        assert client.request("GET", "/hooks/abc").status == 404


# --- alarms --------------------------------------------------------------------------------


class NapArgs(BaseModel):
    seconds: float


async def nap(args: NapArgs, api: Any) -> Any:
    if api.wake is not None:
        return f"woke: {api.wake.reason}"
    return Sleep(checkpoint={}, until=api.now() + args.seconds)


def napping_app(seconds: float) -> App:
    def model(request: ModelRequest):
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return reply(f"rested ({last.text})")
        return call_tool("nap", {"seconds": seconds}, id="nap-1")

    tools = ToolRegistry([define_tool("nap", "Sleep a while", NapArgs, nap)])
    return App(tools=tools, agent=Agent(ScriptedProvider(model), tools))


def test_a_timed_park_is_woken_by_the_local_alarm(db: str) -> None:
    # The stack's clock is the test's: the nap cannot end before the test has seen it parked
    # (with wall time, a slow machine let the 0.4 s nap pass before the first look). The alarm
    # loop still sleeps real time, at most the nap's length, between looks at the clock.
    clock = ManualClock()
    # Exact mode: the alarm fires at the deadline itself (AWS-like mode fires within the
    # Scheduler's minute after it, tested in test_local_parts.py).
    stack = LocalStack(napping_app(0.4), db, port=0, clock=clock, exact=True)
    with BackgroundStack(stack) as stack:
        client = ApiClient(stack.url)
        sid = create(client)
        submit(client, sid, "take a nap")
        tool = wait_for(lambda: parked_tool(client, sid), "nap to park")
        assert tool["keys"] == [] and tool["until"] == clock.now() + 0.4
        assert wait_for(lambda: stack.status()["alarms"], "the alarm") == [
            {"session_id": sid, "at": tool["until"]}
        ]
        clock.advance(0.4)
        done = wait_for(lambda: finished(client, sid), "the alarm to wake the session", 10)
        assert done["entries"][-1]["text"] == "rested (woke: time)"
        assert stack.settle(5)
        assert stack.status()["alarms"] == []


# --- malformed requests ---------------------------------------------------------------------


def raw_exchange(port: int, data: bytes, *, shut: bool = True) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    reply_bytes = b"".join(chunks)
    status = int(reply_bytes.split(b" ", 2)[1])
    return status, reply_bytes.partition(b"\r\n\r\n")[2]


MALFORMED = {
    "garbage": (b"hello there\r\n\r\n", 400),
    "no version": (b"GET /sessions\r\n\r\n", 400),
    "bad version": (b"GET /sessions HTTP/x\r\n\r\n", 400),
    "absolute target": (b"GET http://x/sessions HTTP/1.1\r\n\r\n", 400),
    "bad header": (b"GET /sessions HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    "space before colon": (b"GET /sessions HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    "post without length": (b"POST /sessions HTTP/1.1\r\nHost: x\r\n\r\n", 411),
    "chunked": (
        b"POST /sessions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        411,
    ),
    "bad length": (b"POST /sessions HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400),
    "two lengths": (
        b"POST /sessions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        400,
    ),
    "too large": (b"POST /sessions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
    "short body": (b"POST /sessions HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}", 400),
    "headers too large": (b"GET /sessions HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
    "cut off headers": (b"GET /sessions HTTP/1.1\r\nHost: x\r\n", 400),
    "unknown route": (b"GET /etc/passwd HTTP/1.1\r\n\r\n", 404),
}


def test_malformed_requests_get_4xx_and_the_server_keeps_serving(db: str) -> None:
    with BackgroundStack(LocalStack(build_app(), db, port=0)) as stack:
        port = stack.stack.server.port
        for name, (data, expected) in MALFORMED.items():
            status, body = raw_exchange(port, data)
            assert status == expected, (name, status, body)
            assert "message" in json.loads(body), name
        # A client that connects and says nothing, or hangs up at once, changes nothing.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        # Bodies the webhook handler refuses are 4xx too: not JSON, not UTF-8, wrong type.
        client = ApiClient(stack.url)
        sid = create(client)
        submit(client, sid, "Fix the flaky test and verify it")
        wait_for(lambda: parked_tool(client, sid), "run_ci to park")
        path = webhook_url(db, sid).removeprefix(stack.url)
        for body, content_type in [
            (b"{not json", "application/json"),
            (b"\xff\xfe\x00", "application/json"),
            (b'{"status": "maybe"}', "application/json"),
            (b"{}", "text/plain"),
        ]:
            request = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            status, _ = raw_exchange(port, request)
            assert 400 <= status < 500, (body, status)
        assert parked_tool(client, sid) is not None  # nothing was delivered
        assert client.request("GET", "/_local/status").status == 200


def test_expect_100_continue_is_honoured(db: str) -> None:
    with BackgroundStack(LocalStack(build_app(), db, port=0)) as stack:
        port = stack.stack.server.port
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                b"POST /sessions HTTP/1.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\nExpect: 100-continue\r\n\r\n"
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(b"{}")
            rest = sock.recv(65536)
        assert int(rest.split(b" ", 2)[1]) in (200, 201)


# --- kill -9 and restart ---------------------------------------------------------------------


def start_dev(port: int, db: str, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    for name in [n for n in env if n.startswith("AWS_ENDPOINT_URL")]:
        env.pop(name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bide", "dev", "--port", str(port), "--db", db],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("a"),
        text=True,
    )
    assert proc.stdout is not None
    # The server prints one line once it listens; never wait for it unboundedly.
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if "listening on" not in line:
        proc.kill()
        raise AssertionError(f"bide dev did not start: {line!r}\n{log.read_text()}")
    # The second line tells a person where the console is. It is printed right after the
    # first with nothing in between (and may already sit in the pipe's read buffer, where
    # select cannot see it), so reading it cannot block.
    console = proc.stdout.readline()
    assert console == f"bide dev: console at http://127.0.0.1:{port}/_console\n", console
    return proc


def test_kill_minus_9_while_parked_loses_nothing(db: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "dev.log"
    client = ApiClient(f"http://127.0.0.1:{port}", timeout=10)
    proc = start_dev(port, db, log)
    try:
        sid = create(client)
        submit(client, sid, "Fix the flaky test and verify it")
        tool = wait_for(lambda: parked_tool(client, sid), "run_ci to park")
        wait_for(lambda: client.request("GET", "/_local/status").body["alarms"], "the alarm")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    proc = start_dev(port, db, log)
    try:
        assert proc.poll() is None
        # The park, its alarm and the webhook's binding all survived.
        assert parked_tool(client, sid)["id"] == tool["id"]
        status = client.request("GET", "/_local/status").body
        assert status["alarms"] == [{"session_id": sid, "at": tool["until"]}]
        assert post_json(webhook_url(db, sid), PASSED)[0] == 202
        done = wait_for(lambda: finished(client, sid), "the session to complete")
        assert done["entries"][-1]["text"].startswith("Done: the flaky test is fixed")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0, log.read_text()


def test_a_second_dev_server_on_the_same_file_is_refused(db: str, tmp_path: Path) -> None:
    with BackgroundStack(LocalStack(build_app(), db, port=0)):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
        result = subprocess.run(
            [sys.executable, "-m", "bide", "dev", "--port", "0", "--db", db],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 3
        assert "another 'bide dev' is using" in result.stderr


def test_a_taken_port_is_a_clear_error_and_releases_the_file(db: str) -> None:
    from bide.local import LocalStackError

    async def go() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(LocalStackError, match=f"127.0.0.1:{port}: the port is in use"):
                await LocalStack(build_app(), db, port=port).start()
        async with LocalStack(build_app(), db, port=0) as stack:  # the file is free again
            assert stack.status()["alarms"] == []

    asyncio.run(go())


# --- make demo ---------------------------------------------------------------------------------


def test_the_demo_tells_the_run_ci_story() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo_run_ci.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in [
        "bide dev: listening on http://127.0.0.1:",
        "bide dev: console at http://127.0.0.1:",
        "run_ci(ref='main') is sleeping on app.ci-result/done",
        "(in 2h 0m): the CI gets two hours",
        "tool run_ci(ref='main')  sleeping",
        "wake(): active=False, at=",
        "at == run_ci's deadline: True",
        "workers running: 0",
        "wakes queued:    0",
        "local alarm:",
        '-> HTTP 202 {"result":"delivered"',
        "the tool's result, as the model received it: 'CI passed on main:",
        "the final answer: 'Done: the flaky test is fixed and verified.",
        "alarms left: 0",
        '-> HTTP 410 {"result":"closed"',
        "bide dev: stopped",
        "ok: run_ci parked, nothing ran while it waited, the webhook resumed the session",
    ]:
        assert line in result.stdout, line
