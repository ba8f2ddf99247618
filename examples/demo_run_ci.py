"""The run_ci story on the local stack, end to end over HTTP (``make demo``).

It starts ``python -m bide dev`` on a free port with a temporary SQLite file, creates a
session and asks the agent (examples/agent_app.py, scripted model) to "Fix the flaky test and
verify it". The agent calls ``run_ci``; the tool mints a webhook, hands it to a fake CI and
parks for up to two hours. The worker exits: nothing runs, one local alarm waits for the
deadline. The fake CI then POSTs its result to the webhook URL over HTTP; the session resumes
and the model receives the result. Every step is printed; the exit code is 0 when the story
ran as told.

Run it directly with ``PYTHONPATH=shared .venv/bin/python examples/demo_run_ci.py``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from bide import SQLiteStore  # noqa: E402  (after the path setup above)
from bide.local.client import ApiClient  # noqa: E402
from bide.local.render import relative, when  # noqa: E402
from examples.agent_app import CI_INBOX  # noqa: E402

TIMEOUT = 20.0  # seconds any one step may take before the demo gives up
CI_RESULT = {"status": "passed", "log_url": "https://ci.example/builds/7"}


def say(text: str = "") -> None:
    print(text, flush=True)


def step(number: int, title: str) -> None:
    say()
    say(f"{number}. {title}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(probe: Any, what: str) -> Any:
    give_up = time.monotonic() + TIMEOUT
    while time.monotonic() < give_up:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"demo: timed out waiting for {what}")


def env() -> dict[str, str]:
    paths = [str(ROOT / "shared"), str(ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class DevServer:
    """``python -m bide dev`` in a subprocess; its log goes to a file."""

    def __init__(self, port: int, db: str, log: Path) -> None:
        self.log = log
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bide", "dev", "--port", str(port), "--db", db],
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self) -> str:
        try:
            return self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            raise SystemExit(f"demo: bide dev said nothing; its log:\n{self.log_tail()}") from None

    def log_records(self, message: str) -> list[dict[str, Any]]:
        """The server's JSON log lines with this message."""
        found = []
        for line in self.log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("message") == message:
                found.append(record)
        return found

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)


def post_webhook(url: str, value: Any) -> tuple[int, str]:
    """What the CI does: a plain JSON POST, no AWS signature (the URL is the capability)."""
    request = urllib.request.Request(url, data=json.dumps(value).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only
    try:
        with opener.open(request, timeout=TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def show(url: str, sid: str) -> None:
    """Run ``bide show`` as a user would."""
    say(f"   $ python -m bide show {sid}")
    result = subprocess.run(
        [sys.executable, "-m", "bide", "--url", url, "show", sid],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    for line in result.stdout.splitlines():
        say("   " + line)


def short(url: str) -> str:
    """A webhook URL with its capability token shortened (it is a credential)."""
    base, _, token = url.rpartition("/")
    return f"{base}/{token[:10]}…"


def story(server: DevServer, url: str, db: str) -> None:
    api = ApiClient(url)

    def view() -> dict[str, Any]:
        found = api.request("GET", f"/sessions/{sid}")
        assert found.status == 200, found
        return dict(found.body)

    def parked_tool() -> dict[str, Any] | None:
        tools = [t for t in view()["tasks"] if t.get("tool") and t["status"] == "sleeping"]
        return tools[0] if tools else None

    step(2, "Create a session")
    created = api.request("POST", "/sessions", {})
    sid = created.body["session_id"]
    say(f"   POST /sessions -> HTTP {created.status}  session_id={sid}")

    step(3, 'Submit "Fix the flaky test and verify it"')
    body = {"content": "Fix the flaky test and verify it", "request_id": "demo-1"}
    submitted = api.request("POST", f"/sessions/{sid}/inputs", body)
    say(f"   POST /sessions/{sid}/inputs -> HTTP {submitted.status}  {submitted.body['status']}")
    say("   The API stored the input and queued a wake; the worker picked the session up.")

    step(4, "The agent calls run_ci; the tool mints a webhook, triggers CI and parks")
    tool = wait_for(parked_tool, "run_ci to park")
    now = time.time()
    keys = ", ".join(f"{k['signal']}/{k['key']}" for k in tool["keys"])
    say(f"   run_ci(ref='main') is {tool['status']} on {keys}")
    say(f"   until {when(tool['until'], now)}: the CI gets two hours")
    show(url, sid)

    step(5, "The worker exits: wake() says nothing can run, and nothing runs")
    wait_for(lambda: not api.request("GET", "/_local/status").body["workers_running"], "idle")
    for record in server.log_records("session parked"):
        say(
            f"   worker log: session parked (woken by {record.get('reason')!r}, "
            f"then {record.get('action')!r} the alarm) and the worker returned"
        )
    wake = view()["wake"]
    say(f"   wake(): active={wake['active']}, at={when(wake['at'], now)}")
    say(f"           at == run_ci's deadline: {wake['at'] == tool['until']}")
    status = api.request("GET", "/_local/status").body
    say(f"   workers running: {len(status['workers_running'])}")
    say(f"   wakes queued:    {len(status['wakes_queued'])}")
    for alarm in status["alarms"]:
        say(f"   local alarm:     {when(alarm['at'], now)} (one per session, at wake().at)")
    say("   The session now exists only as rows in the SQLite file.")

    step(6, "The fake CI runs the build and POSTs the result to the webhook over HTTP")
    store = SQLiteStore(db)  # the CI's inbox: the build request run_ci left for it
    try:
        [request] = [doc.body for doc in store.list_docs(sid, CI_INBOX)]
    finally:
        store.close()
    say(f"   CI inbox: build {request['build']} of {request['ref']!r}")
    say(f"   callback: {short(request['webhook_url'])}")
    time.sleep(0.5)  # "the build runs"
    code, answer = post_webhook(request["webhook_url"], CI_RESULT)
    say(f"   POST {short(request['webhook_url'])} {json.dumps(CI_RESULT)}")
    say(f"   -> HTTP {code} {answer}")
    if code != 202:
        raise SystemExit(f"demo: the webhook was refused: HTTP {code} {answer}")

    step(7, "The session resumes and the model receives the result")

    def answered() -> dict[str, Any] | None:
        found = view()
        last = found["entries"][-1]
        final = last["type"] == "assistant" and not last.get("tool_calls") and not found["tasks"]
        return found if final else None

    done = wait_for(answered, "the final answer")
    [result] = [e for e in done["entries"] if e["type"] == "tool_result"]
    say(f"   the tool's result, as the model received it: {result['text']!r}")
    say(f"   the final answer: {done['entries'][-1]['text']!r}")
    status = api.request("GET", "/_local/status").body
    say(
        f"   wake(): active={done['wake']['active']}, at={when(done['wake']['at'], now)}; "
        f"alarms left: {len(status['alarms'])}"
    )
    show(url, sid)

    step(8, "A replayed webhook is refused: the call it belonged to has ended")
    code, answer = post_webhook(request["webhook_url"], CI_RESULT)
    say(f"   -> HTTP {code} {answer}")
    elapsed = relative(time.time() - now).replace("in ", "")
    say(f"   (the whole story took {elapsed}; the CI could have taken up to two hours)")


def main() -> int:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="bide-demo-") as tmp:
        db = str(Path(tmp) / "dev.sqlite")
        say("The run_ci story on the local stack (SQLite file, local alarms, in-process worker)")
        step(1, "Start the local stack")
        say(f"   $ python -m bide dev --port {port} --db {db}")
        server = DevServer(port, db, Path(tmp) / "dev.log")
        try:
            first = server.next_line()
            say("   " + first)
            if "listening on" not in first:
                raise SystemExit(f"demo: bide dev did not start:\n{server.log_tail()}")
            say("   " + server.next_line())  # where the dev console is
            story(server, url, db)
        except BaseException:
            say(f"--- bide dev log (last lines) ---\n{server.log_tail()}")
            raise
        finally:
            step(9, "Stop the local stack")
            server.stop()
            say(f"   {server.next_line() if server.proc.returncode == 0 else 'killed'}")
    say()
    say("ok: run_ci parked, nothing ran while it waited, the webhook resumed the session")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
