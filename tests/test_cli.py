"""The ``bide`` CLI against an in-process local stack on 127.0.0.1: create, submit, show,
signal, answer, approve, hooks, watch, --json, exit codes (a request the server did not take
exits non-zero) and error messages; SigV4 signing (built, never sent)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials
from stack_kit import bide, local_stack, started

from bide.cli import EXIT_REFUSED, EXIT_TIMEOUT, EXIT_UNREACHABLE, EXIT_USAGE, main, read_value
from bide.local.client import ApiClient, ClientError, region_of
from bide.local.render import relative, render_session, when
from bide.local.thread import BackgroundStack
from examples.agent_app import build_app

PASSED = '{"status": "passed", "log_url": "https://ci.example/build-7"}'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundStack]:
    with local_stack(build_app(), tmp_path_factory.mktemp("cli")) as running:
        yield running


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


# --- hooks, watch, answers and decisions (examples/console_app.py for questions) ------------


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory):
    from examples.console_app import build_app as console_app

    with local_stack(console_app(), tmp_path_factory.mktemp("cli-console")) as running:
        yield running


def test_hooks_lists_the_live_webhook_urls(stack: BackgroundStack, capsys) -> None:
    sid, _ = started(stack, "Fix the flaky test and verify it")
    tool = parked_tool(stack.url, sid)
    code, out, _ = bide(capsys, stack.url, "hooks", sid)
    assert code == 0
    url, detail = out.splitlines()
    assert url.startswith(f"{stack.url}/hooks/")
    assert detail == f"    task {tool['id']} (run_ci) -> app.ci-result/done  received 0"
    code, out, _ = bide(capsys, stack.url, "hooks", "-q", sid)
    assert (code, out) == (0, url + "\n")
    code, out, _ = bide(capsys, stack.url, "--json", "hooks", sid)
    assert json.loads(out)["url"] == url  # one JSON object a line
    code, out, _ = bide(capsys, stack.url, "show", sid)
    assert f"webhooks (live):\n  {url}\n    task {tool['id']} (run_ci)" in out

    # The listed URL is the one a CI posts to.
    request = urllib.request.Request(url, data=PASSED.encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request) as answered:
        assert answered.status == 202
    assert stack.settle(10)
    code, out, _ = bide(capsys, stack.url, "hooks", sid)
    assert (code, out.strip()) == (0, f"no live webhooks in session {sid}")
    code, _, err = bide(capsys, stack.url, "hooks", "s-nobody")
    assert code == EXIT_REFUSED and "HTTP 404" in err


def test_watch_follows_a_session_until_it_is_idle(console: BackgroundStack, capsys) -> None:
    sid, client = started(console, "Please deploy api")
    [ask] = client.request("GET", f"/sessions/{sid}/workflow").body["asks"]

    def answer_soon() -> None:
        time.sleep(0.5)
        path = f"/sessions/{sid}/asks/{ask['id']}/answer"
        client.request("POST", path, {"option_id": "approve"})

    helper = threading.Thread(target=answer_soon)
    helper.start()
    code, out, err = bide(capsys, console.url, "watch", sid, "--interval", "0.1", "--timeout", "20")
    helper.join()
    assert (code, err) == (0, "")
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[")]
    assert lines[0] == f"session {sid}: conversation running"
    assert any(
        line.startswith("+ task ") and "tool deploy(service='api')" in line for line in lines
    )
    assert any(line.startswith(f"? question {ask['id']}: Deploy api?") for line in lines)
    assert f"question {ask['id']} closed" in lines
    assert any(
        line.startswith("- task ") and "deploy(service='api')  ended" in line for line in lines
    )
    assert "  assistant  Done: " + '{"deployed": true' in "\n".join(lines)
    assert "submission r1: done" in lines and "conversation idle" in lines
    assert out.endswith(f"session {sid} is idle: no live task, no run going\n")


def test_watch_stops_at_its_timeout_and_refuses_what_it_cannot_read(
    stack: BackgroundStack, capsys
) -> None:
    sid, _ = started(stack, "Fix the flaky test and verify it")
    code, out, err = bide(capsys, stack.url, "watch", sid, "--timeout", "0.3", "--interval", "0.1")
    assert code == EXIT_TIMEOUT
    assert "webhook http://127.0.0.1" in out and "on app.ci-result/done" in out
    assert "still busy after 0.3s" in err
    code, out, _ = bide(capsys, stack.url, "--json", "watch", sid, "--timeout", "0")
    assert code == EXIT_TIMEOUT and json.loads(out)["view"]["session_id"] == sid
    code, _, err = bide(capsys, stack.url, "watch", "s-nobody", "--timeout", "1")
    assert code == EXIT_REFUSED and "HTTP 404" in err
    code, _, err = bide(capsys, stack.url, "watch", sid, "--interval", "0")
    assert code == EXIT_USAGE and "--interval" in err


def test_answers_that_were_not_taken_exit_non_zero(console: BackgroundStack, capsys) -> None:
    sid, client = started(console, "Please deploy api")
    [ask] = client.request("GET", f"/sessions/{sid}/workflow").body["asks"]
    code, out, err = bide(capsys, console.url, "answer", sid, "ask-nope", "yes")
    assert (code, out.strip()) == (EXIT_REFUSED, "not_found (HTTP 200)")
    assert "no such question in this session" in err
    code, out, err = bide(capsys, console.url, "answer", sid, ask["id"], "--option", "maybe")
    assert (code, out.strip()) == (EXIT_REFUSED, "invalid (HTTP 200)")
    assert "does not fit the question" in err
    code, out, _ = bide(capsys, console.url, "answer", sid, ask["id"], "--option", "approve")
    assert (code, out.strip()) == (0, "delivered (HTTP 200)")
    code, out, err = bide(capsys, console.url, "answer", sid, ask["id"], "--option", "cancel")
    assert (code, out.strip()) == (EXIT_REFUSED, "duplicate (HTTP 200)")
    assert "the first answer stands" in err
    code, out, _ = bide(capsys, console.url, "--json", "answer", sid, "ask-nope", "yes")
    assert code == EXIT_REFUSED and json.loads(out) == {"result": "not_found"}


def test_approve_decides_once(console: BackgroundStack, capsys) -> None:
    sid, client = started(console, "Please delete feature-x")
    code, out, _ = bide(capsys, console.url, "show", sid)
    [approval] = client.request("GET", f"/sessions/{sid}/workflow").body["approvals"]
    assert f"pending approvals:\n  {approval['id']}: delete_branch delete_branch" in out
    code, out, err = bide(capsys, console.url, "approve", sid, "ap-nope")
    assert (code, out.strip()) == (EXIT_REFUSED, "approved: not_found")
    assert "no such approval" in err
    code, out, _ = bide(capsys, console.url, "approve", sid, approval["id"], "--note", "ok")
    assert (code, out.strip()) == (0, "approved: decided")
    code, out, err = bide(capsys, console.url, "approve", sid, approval["id"], "--deny")
    assert (code, out.strip()) == (EXIT_REFUSED, "denied: already_decided")
    assert "the first decision stands" in err
    assert console.settle(10)
    submission = client.request("GET", f"/sessions/{sid}").body["submissions"][0]
    assert submission["answer"] == "Done: deleted branch feature-x"


def test_signals_and_submissions_not_taken_exit_non_zero(stack: BackgroundStack, capsys) -> None:
    sid, _ = started(stack, "Fix the flaky test and verify it")
    tool = parked_tool(stack.url, sid)
    # A value on a key nobody waits on is stored; a second one is a duplicate (HTTP 200).
    args = ["signal", sid, tool["id"], "app.ci-result", "early", PASSED]
    assert bide(capsys, stack.url, *args)[:2] == (0, "delivered (HTTP 202)\n")
    code, out, err = bide(capsys, stack.url, *args)
    assert (code, out.strip()) == (EXIT_REFUSED, "duplicate (HTTP 200)")
    assert "the key already holds a value" in err
    # The conversation is busy (run_ci parked): reject refuses the input.
    code, out, err = bide(capsys, stack.url, "submit", sid, "again", "--when-busy", "reject")
    assert code == EXIT_REFUSED and out.strip().endswith(": unanswered")
    assert "the submission was not taken" in err


def test_dev_exact_and_redrive_are_commands(monkeypatch) -> None:
    from bide.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["dev"]).exact is False  # AWS-like timing by default
    assert parser.parse_args(["dev", "--exact"]).exact is True
    monkeypatch.setenv("BIDE_WAKE_DLQ_URL", "https://sqs.example/dead.fifo")
    args = build_parser().parse_args(["redrive", "s1"])
    assert (args.session, args.all, args.dlq_url) == ("s1", False, "https://sqs.example/dead.fifo")


# --- pages and owners (GET /sessions, transcript pages, X-Bide-Principal) ---------------------


def test_sessions_lists_yours_and_show_reads_a_long_transcripts_tail(
    stack: BackgroundStack, capsys
) -> None:
    from bide import SQLiteStore
    from bide.engine.store.base import Doc

    made = [bide(capsys, stack.url, "create")[1].strip() for _ in range(2)]
    code, out, _ = bide(capsys, stack.url, "sessions", "--all", "--limit", "1")
    listed = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and set(made) <= set(listed) and len(listed) == len(set(listed))
    code, out, _ = bide(capsys, stack.url, "--json", "sessions", "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 1 and "session_id" in json.loads(out)
    with pytest.raises(SystemExit) as usage:
        main(["--url", stack.url, "sessions", "--limit", "501"])
    assert usage.value.code == EXIT_USAGE and "--limit: must be" in capsys.readouterr().err

    # Another principal (the local stack trusts X-Bide-Principal from 127.0.0.1) is refused.
    request = urllib.request.Request(
        f"{stack.url}/sessions/{made[0]}", headers={"X-Bide-Principal": "bob"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(request, timeout=10)
    assert refused.value.code == 403

    # 120 entries: more than the summary's first page; show reads the tail by entry number.
    sid = made[1]
    store = SQLiteStore(stack.stack.db_path)
    try:
        head = store.get_doc(sid, "conv/main")
        assert head is not None
        for first in range(1, 121, 60):
            docs = [
                Doc(f"conv/main/e/{n:08d}", {"type": "user", "text": f"line {n}"})
                for n in range(first, first + 60)
            ]
            counted = Doc("conv/main", {**head.body, "entries": first + 59})
            store.commit(sid, store.head(sid), [], [*docs, counted])
    finally:
        store.close()
    code, out, _ = bide(capsys, stack.url, "show", sid, "--tail", "3")
    assert code == 0 and "transcript (last 3 of 120)" in out
    assert "line 118" in out and "line 120" in out and "line 117" not in out


def test_watch_follows_a_transcript_past_its_first_page(stack: BackgroundStack, capsys) -> None:
    from bide import SQLiteStore
    from bide.engine.store.base import Doc
    from bide.local.watch import changes, read_snapshot

    sid = bide(capsys, stack.url, "create")[1].strip()
    client = ApiClient(stack.url)
    first = read_snapshot(client, sid)
    assert first.new_entries == []
    store = SQLiteStore(stack.stack.db_path)
    try:
        head = store.get_doc(sid, "conv/main")
        assert head is not None
        for start in (1, 61, 121):
            docs = [
                Doc(f"conv/main/e/{n:08d}", {"type": "user", "text": f"line {n}"})
                for n in range(start, start + 60)
            ]
            counted = Doc("conv/main", {**head.body, "entries": start + 59})
            store.commit(sid, store.head(sid), [], [*docs, counted])
            if start == 61:
                middle = read_snapshot(client, sid, first)
    finally:
        store.close()
    last = read_snapshot(client, sid, middle)
    assert [e["text"] for e in middle.new_entries] == [f"line {n}" for n in range(1, 121)]
    assert [e["text"] for e in last.new_entries] == [f"line {n}" for n in range(121, 181)]
    lines = changes(middle, last, 0.0)
    assert [line.split()[-1] for line in lines if "line " in line] == [
        str(n) for n in range(121, 181)
    ]
