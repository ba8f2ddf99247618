"""The host's events and actions on the local stack over HTTP on 127.0.0.1: server-sent
events of a session's event stream, and the CLI's ``events``, ``deny``, ``resolve``,
``reject`` and ``reply`` (examples/console_app.py: ``delete_branch`` needs an approval)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from stack_kit import bide, local_stack, started

from bide import Harness, SQLiteStore
from bide.cli import EXIT_REFUSED, EXIT_USAGE, main
from bide.promises import Promises


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory):
    from examples.console_app import build_app as console_app

    with local_stack(console_app(), tmp_path_factory.mktemp("host-cli")) as running:
        yield running


def sse(url: str, path: str, count: int, headers: dict[str, str] | None = None) -> list[Any]:
    """Read ``count`` SSE messages (id, event, data) from the stack over a raw socket, then
    hang up: the stream itself never ends."""
    host, port = url.removeprefix("http://").split(":")
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
        conn.sendall(f"{request}{extra}\r\n".encode())
        raw = b""
        messages: list[Any] = []
        while len(messages) < count:
            chunk = conn.recv(65536)
            if not chunk:
                break
            raw += chunk
            head, _, body = raw.partition(b"\r\n\r\n")
            blocks = [b for b in body.decode().split("\n\n")[:-1] if not b.startswith(":")]
            messages = []
            for block in blocks:
                fields = dict(line.split(": ", 1) for line in block.split("\n"))
                messages.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    assert b"200 OK" in head.split(b"\r\n")[0] and b"text/event-stream" in head, head
    return messages


def test_server_sent_events_stream_a_sessions_events_and_resume(console, capsys) -> None:
    sid, client = started(console, "Please delete feature-x")
    [(first_id, kind, requested)] = sse(console.url, f"/sessions/{sid}/events", 1)
    assert kind == "approval_requested" and requested["tool"] == "delete_branch"
    [approval] = requested["approvals"]
    body = {"approved": True, "by": "ana"}
    decided = client.request("POST", f"/sessions/{sid}/approvals/{approval}/decide", body)
    assert decided.body == {"result": "decided"}
    assert console.settle(10)
    # Resuming after the first message (EventSource sends its id back) reads on from there.
    rest = sse(console.url, f"/sessions/{sid}/events", 2, {"Last-Event-ID": first_id})
    assert [(m[1], m[2]["seq"]) for m in rest] == [("approval_decided", 2), ("run_ended", 3)]
    assert rest[1][2]["answer"] == "Done: deleted branch feature-x"


def test_a_refused_stream_gets_the_apis_answer(console) -> None:
    host, port = console.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"GET /sessions/no-such/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 404") and b"no-such" in answer


def test_events_and_deny_from_the_cli(console, capsys) -> None:
    sid, _ = started(console, "Please delete feature-y")
    code, out, err = bide(capsys, console.url, "events", sid)
    assert code == 0 and out.startswith("#1 approval_requested "), out
    approval = json.loads(out.split("approvals=", 1)[1].split(" ")[0])[0]
    cursor = err.strip().removeprefix("next: ")
    code, out, err = bide(capsys, console.url, "deny", sid, approval, "--note", "keep it")
    assert (code, out.strip()) == (0, "decided")
    assert console.settle(10)
    code, out, _ = bide(capsys, console.url, "--json", "events", sid, "--cursor", cursor)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in lines] == ["approval_decided", "run_ended"]
    assert lines[0]["decision"]["note"] == "keep it" and lines[0]["status"] == "denied"
    code, out, err = bide(capsys, console.url, "deny", sid, approval)
    assert code == EXIT_REFUSED and "already_decided" in err
    # --follow with --count stops once it printed that many (it waits for them by long poll).
    code, out, _ = bide(capsys, console.url, "events", sid, "--follow", "--count", "2")
    assert code == 0 and len(out.splitlines()) == 2


def test_resolve_and_reject_end_promises_from_the_cli(console, capsys) -> None:
    from examples.console_app import build_app as console_app

    sid, _ = started(console, "hello")

    async def create() -> None:
        # A second connection to the stack's file, as a producer in another process would.
        store = SQLiteStore(console.stack.db_path)
        harness = Harness(store, sid, console_app().task_kinds())
        await harness.attach()
        await Promises(harness).create("p-1")
        await Promises(harness).create("p-2")
        store.close()

    asyncio.run(create())
    code, out, _ = bide(capsys, console.url, "resolve", sid, "p-1", '{"ok": true}')
    assert (code, out.strip()) == (0, "settled")
    code, out, _ = bide(capsys, console.url, "reject", sid, "p-2", "gone")
    assert (code, out.strip()) == (0, "settled")
    code, out, err = bide(capsys, console.url, "resolve", sid, "p-2", "late")
    assert code == EXIT_REFUSED and "ignored" in err  # the first outcome stands
    code, out, _ = bide(capsys, console.url, "--json", "events", sid)
    settled = [json.loads(line) for line in out.splitlines()][-2:]
    assert [(e["promise"], e["status"]) for e in settled] == [
        ("p-1", "resolved"),
        ("p-2", "rejected"),
    ]
    assert settled[0]["value"] == {"ok": True}
    assert settled[1]["error_type"] == "Rejected"  # a bare message: the default type


def test_reject_from_the_cli_takes_a_type_and_data(console, capsys) -> None:
    from examples.console_app import build_app as console_app

    sid, _ = started(console, "hello")

    async def create() -> None:
        store = SQLiteStore(console.stack.db_path)
        harness = Harness(store, sid, console_app().task_kinds())
        await harness.attach()
        await Promises(harness).create("p-typed")
        store.close()

    asyncio.run(create())
    args = ("reject", sid, "p-typed", "render died", "--type", "OutOfMemory")
    code, out, _ = bide(capsys, console.url, *args, "--data", '{"frame": 812}')
    assert (code, out.strip()) == (0, "settled")
    code, out, _ = bide(capsys, console.url, "--json", "events", sid)
    [event] = [json.loads(line) for line in out.splitlines() if "p-typed" in line]
    assert (event["error"], event["error_type"]) == ("render died", "OutOfMemory")


def test_promise_and_reply_commands_say_what_was_not_taken(console, capsys) -> None:
    sid, _ = started(console, "hello")
    code, _, err = bide(capsys, console.url, "resolve", sid, "p-none", '{"ok": true}')
    assert code == EXIT_REFUSED and "not_found" in err
    code, _, err = bide(capsys, console.url, "reject", sid, "p-none", "gone")
    assert code == EXIT_REFUSED and "not_found" in err
    args = ("reply", sid, "i-none", "done", "--producer", "p", "--correlation", "c")
    code, _, err = bide(capsys, console.url, *args, "--value", "1")
    assert code == EXIT_REFUSED and "HTTP 409" in err and "unknown-invocation" in err
    code, _, err = bide(capsys, console.url, "resolve", "no-such", "p", "1")
    assert code == EXIT_REFUSED and "HTTP 404" in err
    with pytest.raises(SystemExit) as exited:
        main(["--url", console.url, "events", sid, "--wait", "99"])
    assert exited.value.code == EXIT_USAGE


def test_progress_and_a_question_stream_and_the_cli_answers_it(console, capsys) -> None:
    sid, _ = started(console, "Please deploy api")
    [(_, kind, progress), (cursor, asked, opened)] = sse(console.url, f"/sessions/{sid}/events", 2)
    assert kind == "progress" and progress["tool"] == "deploy"
    assert progress["value"] == {"stage": "waiting for approval", "plan": "3 pods, 1 migration"}
    assert asked == "ask_opened" and opened["prompt"].startswith("Deploy api?")
    # The CLI's line says how to answer it.
    code, out, _ = bide(capsys, console.url, "events", sid)
    line = out.splitlines()[1]
    assert line.startswith("#2 ask_opened ")
    assert line.endswith(
        f"(answer: bide answer {sid} {opened['ask']} TEXT --option approve|cancel)"
    )
    code, out, _ = bide(capsys, console.url, "answer", sid, opened["ask"], "--option", "approve")
    assert code == 0 and out.startswith("delivered")
    assert console.settle(10)
    rest = sse(console.url, f"/sessions/{sid}/events", 2, {"Last-Event-ID": cursor})
    assert [m[1] for m in rest] == ["ask_answered", "run_ended"]
    assert rest[0][2]["answer"] == {"option_id": "approve", "text": None}
    code, out, _ = bide(capsys, console.url, "events", sid, "--cursor", cursor)
    assert [line.split(" ")[1] for line in out.splitlines()] == ["ask_answered", "run_ended"]
