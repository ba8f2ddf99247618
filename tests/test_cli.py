"""The ``bide`` CLI against an in-process local stack on 127.0.0.1: create, submit, show,
signal, answer, --json, exit codes and error messages; SigV4 signing (built, never sent)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials

from bide.cli import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, main, read_value
from bide.local import LocalStack
from bide.local.client import ApiClient, ClientError, region_of
from bide.local.render import relative, render_session, when
from bide.local.thread import BackgroundStack
from examples.agent_app import build_app

PASSED = '{"status": "passed", "log_url": "https://ci.example/build-7"}'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    db = str(tmp_path_factory.mktemp("cli") / "dev.sqlite")
    # The handlers print EMF metric blobs to stdout, where the CLI's output is read.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        with BackgroundStack(LocalStack(build_app(), db, port=0)) as running:
            yield running


def bide(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def parked_tool(url: str, sid: str) -> dict[str, Any]:
    give_up = time.monotonic() + 10
    while time.monotonic() < give_up:
        tasks = ApiClient(url).request("GET", f"/sessions/{sid}").body["tasks"]
        tools = [t for t in tasks if t.get("tool") and t["status"] == "sleeping"]
        if tools:
            return tools[0]
        time.sleep(0.02)
    raise AssertionError("run_ci never parked")


def test_create_submit_show_and_signal(stack: BackgroundStack, capsys) -> None:
    code, out, _ = bide(capsys, stack.url, "create")
    assert code == 0
    sid = out.strip()
    assert sid.startswith("s-")

    code, out, _ = bide(
        capsys, stack.url, "submit", sid, "Fix the flaky test and verify it", "--request-id", "r1"
    )
    assert (code, out.strip()) == (0, "submission r1: placed")
    tool = parked_tool(stack.url, sid)
    assert stack.settle(5)

    code, out, _ = bide(capsys, stack.url, "show", sid)
    assert code == 0
    assert f"session {sid}" in out
    assert "wake(): active=False  at=" in out and "(in 2h 0m)" in out
    assert "bide.generation  waiting" in out
    assert f"└─ {tool['id']}  tool run_ci(ref='main')  sleeping" in out
    assert "on app.ci-result/done" in out
    assert "live tool slots:" in out
    assert "assistant  I fixed the flaky test; running CI on main to verify it." in out

    code, out, _ = bide(capsys, stack.url, "--json", "show", sid)
    assert code == 0 and json.loads(out)["session_id"] == sid

    # An invalid value: refused, nothing stored, each field said.
    code, out, _ = bide(
        capsys, stack.url, "signal", sid, tool["id"], "app.ci-result", "done", '{"status": 1}'
    )
    assert code == EXIT_REFUSED
    assert out.startswith("invalid (HTTP 422)")

    code, out, _ = bide(
        capsys, stack.url, "signal", sid, tool["id"], "app.ci-result", "done", PASSED
    )
    assert (code, out.strip()) == (0, "delivered (HTTP 202)")
    assert stack.settle(5)
    code, out, _ = bide(capsys, stack.url, "show", sid, "--tail", "2")
    assert "tasks: none live" in out
    assert "tool       run_ci: CI passed on main: https://ci.example/build-7" in out
    assert "transcript (last 2 of 4)" in out

    # The call has ended: a late signal is closed.
    code, out, _ = bide(
        capsys, stack.url, "signal", sid, tool["id"], "app.ci-result", "done", PASSED
    )
    assert code == EXIT_REFUSED and out.startswith("closed (HTTP 410)")


def test_errors_say_what_happened(stack: BackgroundStack, capsys) -> None:
    code, _, err = bide(capsys, stack.url, "show", "s-nobody")
    assert code == EXIT_REFUSED
    assert "HTTP 404" in err and "s-nobody" in err

    code, _, err = bide(capsys, stack.url, "signal", "s1", "t1", "app.ci-result", "done", "{oops")
    assert code == EXIT_USAGE
    assert "the value is not valid JSON" in err

    code, _, err = bide(capsys, stack.url, "submit", "s1", "")
    assert code == EXIT_REFUSED and "HTTP 422" in err

    # Until the server has the answer route (issue 6) the CLI says so; once it has, an
    # unknown ask is a plain 404.
    code, _, err = bide(capsys, stack.url, "answer", "s1", "ask-1", "yes")
    assert code == EXIT_REFUSED
    assert "not supported by this server" in err or "HTTP 404" in err
    code, _, err = bide(capsys, stack.url, "answer", "s1", "ask-1")
    assert code == EXIT_USAGE and "give the answer's text, --option ID, or both" in err


def test_connection_refused_says_how_to_start_the_local_stack(capsys) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = bide(capsys, f"http://127.0.0.1:{port}", "show", "s1")
    assert code == EXIT_UNREACHABLE
    assert f"the local stack is not running at http://127.0.0.1:{port}" in err
    assert f"python -m bide dev --port {port}" in err


def test_bad_urls_and_usage_are_refused(capsys) -> None:
    code, _, err = bide(capsys, "ftp://example", "show", "s1")
    assert code == EXIT_UNREACHABLE and "--url must be an http(s) URL" in err
    with pytest.raises(SystemExit) as exited:
        main(["show"])
    assert exited.value.code == EXIT_USAGE


def test_read_value_takes_json_a_file_or_stdin(tmp_path: Path) -> None:
    import io

    (tmp_path / "v.json").write_text(PASSED)
    assert read_value(PASSED)["status"] == "passed"
    assert read_value(f"@{tmp_path / 'v.json'}")["status"] == "passed"
    assert read_value("-", io.StringIO("[1, 2]")) == [1, 2]


# --- SigV4 ----------------------------------------------------------------------------------

API = "https://abc123.execute-api.eu-west-1.amazonaws.com"


def test_requests_to_a_deployed_api_are_signed_for_execute_api() -> None:
    creds = Credentials("AKIDEXAMPLE", "secret", "session-token")
    client = ApiClient(API, credentials=creds)
    assert client.sign and client.region == "eu-west-1"
    prepared = client.prepare("POST", "/sessions/s1/inputs", {"content": "hi"})
    auth = prepared.headers["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in auth
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token", "content-type"} <= set(signed)
    assert prepared.headers["X-Amz-Security-Token"] == "session-token"
    assert prepared.url == API + "/sessions/s1/inputs"
    assert json.loads(prepared.body or b"") == {"content": "hi"}
    # The signature covers the body: another body, another signature.
    other = client.prepare("POST", "/sessions/s1/inputs", {"content": "bye"})
    if other.headers["X-Amz-Date"] == prepared.headers["X-Amz-Date"]:
        assert other.headers["Authorization"] != auth


def test_local_requests_are_never_signed_and_regions_come_from_the_host() -> None:
    local = ApiClient("http://127.0.0.1:8787")
    assert not local.sign
    assert "Authorization" not in local.prepare("GET", "/sessions/s1").headers
    assert region_of(API) == "eu-west-1"
    assert region_of("https://api.example.com") is None
    custom = ApiClient("https://api.example.com", credentials=Credentials("a", "b"))
    with pytest.raises(ClientError, match="pass --region"):
        custom.prepare("GET", "/sessions/s1")
    signed = ApiClient(
        "https://api.example.com", region="us-west-2", credentials=Credentials("a", "b")
    )
    assert "/us-west-2/execute-api/" in signed.prepare("GET", "/x").headers["Authorization"]


# --- rendering ------------------------------------------------------------------------------


def test_times_render_in_utc_and_relative_to_now() -> None:
    now = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    assert when(now + 7200, now) == "2026-01-01 02:00:00 UTC (in 2h 0m)"
    assert when(None, now) == "never"
    assert relative(-190) == "3m 10s ago"
    assert relative(0.2) == "now"
    assert relative(3 * 86400 + 3600) == "in 3d 1h"


def test_render_shows_pending_asks_when_the_server_reports_them() -> None:
    view = {
        "session_id": "s1",
        "tasks": [],
        "asks": [{"id": "ask-1", "prompt": "Deploy?", "options": [{"id": "yes"}, {"id": "no"}]}],
        "authorizations": [{"id": "auth-1", "provider": "github", "task_id": "t-9"}],
    }
    text = render_session(view, 0.0)
    assert "pending asks:\n  ask-1: Deploy?  options: yes, no" in text
    assert "pending sign-ins:\n  auth-1: github  task t-9" in text


def test_the_task_tree_nests_by_owner_and_says_what_each_task_waits_for() -> None:
    now = 1_767_225_600.0
    tasks = [
        {
            "id": "g",
            "kind": "bide.generation",
            "status": "waiting",
            "policy": "all_settled",
            "on": ["a", "b"],
            "until": None,
        },
        {
            "id": "a",
            "kind": "bide.tool",
            "owner": "g",
            "status": "sleeping",
            "until": None,
            "keys": [{"signal": "app.answer", "key": "k"}],
            "tool": {"name": "ask", "arguments": {"q": "ok?"}},
        },
        {
            "id": "b",
            "kind": "bide.tool",
            "owner": "g",
            "status": "sleeping",
            "until": now + 60,
            "keys": [],
            "tool": {"name": "nap", "arguments": {}},
        },
    ]
    text = render_session({"session_id": "s", "tasks": tasks}, now)
    assert "  └─ g  bide.generation  waiting  policy=all_settled on 2 tasks" in text
    assert "     ├─ a  tool ask(q='ok?')  sleeping  until never  on app.answer/k" in text
    assert "     └─ b  tool nap()  sleeping  until 2026-01-01 00:01:00 UTC (in 1m 0s)" in text
