"""Local stack webhook throughput and latency on 127.0.0.1, against a trivial stdlib server.

``python -m bide dev`` (the local stack: HTTP server -> API Gateway v2 events -> the signal
handler; the worker and alarm clock in the same process; one SQLite file) serves this module's
small app. Before it starts, this script fills its SQLite file with parked tool calls, one per
session, each holding a capability webhook it minted. The load: ``POST /hooks/{token}`` with a
JSON body, every request to a different webhook (so each one stores a signal value and queues
a wake; the in-process worker then resumes that call and ends it), with 1 and then 8
requests in flight (an asyncio client in this process), one connection per request (the local
server closes every connection).

The baseline: a trivial ``http.server.ThreadingHTTPServer`` on 127.0.0.1 in its own process
that reads the body and answers 202 with a small JSON body, loaded the same way in the same
run. Requests are bounded in number (REQUESTS per phase) and time (DEADLINE_S per phase);
nothing leaves 127.0.0.1.

Run from the repository root:  PYTHONPATH=shared python bench/bench_local_webhooks.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import timed_run
from pydantic import BaseModel

from bide import Harness, SignalValue, SQLiteStore, define_signal
from bide.app import App
from bide.local.webhook_keys import local_keys
from bide.service.webhooks import mint_webhook
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool
from bide.tools.webhook_keys import WEBHOOK_KEYS_SERVICE

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
REQUESTS = 300  # per server and in-flight level
CHUNK = 30  # requests sent to one server before switching to the other
WARMUP = 10
CONCURRENCY = (1, 8)  # requests in flight at a time: one phase each
DEADLINE_S = 60.0  # a phase stops issuing requests after this
REQUEST_TIMEOUT_S = 10.0
SETTLE_S = 30.0  # how long the worker may take to finish the calls a chunk resumed

# --- the app the local stack serves (``--app bench_local_webhooks:app``) -------------------------


class Done(BaseModel):
    n: int


DONE = define_signal("bench.done", 1, Done)


class NoArgs(BaseModel):
    pass


MINTED: list[str] = []  # tokens minted in this process (before the server starts)


async def await_hook(args: NoArgs, api: Any) -> Any:
    """Mint a webhook and park on it; return what it delivers."""
    state = await api.read_signal(DONE, "done")
    if isinstance(state, SignalValue):
        return ToolResult.of_text(f"done {state.value.n}")
    hook = await mint_webhook(api, DONE, "done")
    MINTED.append(hook.token)
    return Sleep(signals=[DONE.key("done")])


TOOLS = ToolRegistry([define_tool("await_hook", "Wait for a webhook", NoArgs, await_hook)])
app = App(signals=[DONE], tools=TOOLS)

# --- set-up -------------------------------------------------------------------------------------


async def park_calls(db: str, count: int) -> list[tuple[str, str]]:
    """``count`` sessions with one parked call each; (session id, task id) pairs. Their
    webhooks are minted under the key the local stack on ``db`` verifies them with (its key
    file, made here if it does not exist yet), not this process's own."""
    store = SQLiteStore(db)
    services = {"webhook_base_url": "x", WEBHOOK_KEYS_SERVICE: local_keys(db)}
    calls = []
    try:
        for i in range(count):
            session = f"hooks-{i}"
            h = Harness(store, session, app.task_kinds(), services=services)
            await h.open()
            task = await h.create_task(TOOLS.task, TOOLS.call("await_hook", {}))
            await h.run_until_parked()
            await h.close()
            calls.append((session, task))
    finally:
        store.close()
    return calls


def ended(db: str, calls: list[tuple[str, str]]) -> int:
    """How many of ``calls`` are terminal (read from the file while the server runs)."""
    store = SQLiteStore(db)
    try:
        return sum(
            1
            for session, task in calls
            if (record := store.get_task(session, task)) is not None and not record.live
        )
    finally:
        store.close()


BASELINE_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = json.dumps({"result": "delivered", "errors": []}).encode()

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default (5) drops connects under load: 1 s SYN retries

server = Server(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


@contextlib.contextmanager
def server(command: list[str], env: dict[str, str]) -> Iterator[int]:
    """Start a server process, wait (bounded) for its "listening on <url>" line; its port.
    Stops it with SIGINT (then SIGKILL) on the way out."""
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    found: list[int] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "listening on" in line and not found:
                url = line.split("listening on", 1)[1].split()[0]
                found.append(int(url.rsplit(":", 1)[1].rstrip("/")))
                ready.set()
        ready.set()  # the process ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(60) or not found:
            raise RuntimeError(f"{command[:4]} did not start (exit code {proc.poll()})")
        yield found[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        reader.join(timeout=5)


# --- load ---------------------------------------------------------------------------------------


async def post(port: int, path: str, body: bytes) -> tuple[int, float]:
    """One request on its own connection (asyncio streams: a light client, so the load
    generator is not what limits the figures); its status and seconds."""
    began = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), REQUEST_TIMEOUT_S)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), REQUEST_TIMEOUT_S)  # until the server closes
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else 0
    return status, time.perf_counter() - began


@dataclass
class Phase:
    """What one server answered in one phase: latencies, statuses, time spent loading it."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        ms = sorted(x * 1000 for x in self.latencies)
        cuts = statistics.quantiles(ms, n=100)
        return {
            "rps": len(ms) / self.seconds,
            "p50": cuts[49],
            "p90": cuts[89],
            "p99": cuts[98],
            "statuses": dict(sorted(self.statuses.items())),
        }


async def chunk(port: int, paths: list[str], clients: int, into: Phase | None) -> None:
    """POST once to each path, ``clients`` requests in flight at a time."""
    queue = list(enumerate(paths))
    queue.reverse()
    stop_at = time.perf_counter() + DEADLINE_S

    async def client() -> None:
        while queue and time.perf_counter() < stop_at:
            n, path = queue.pop()
            status, seconds = await post(port, path, json.dumps({"n": n}).encode())
            if into is not None:
                into.latencies.append(seconds)
                into.statuses[status] = into.statuses.get(status, 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    if into is not None:
        into.seconds += time.perf_counter() - began


def settle(db: str, calls: list[tuple[str, str]]) -> float:
    """Wait (bounded) until the local stack's worker ended every call in ``calls``; seconds."""
    began = time.perf_counter()
    while ended(db, calls) < len(calls) and time.perf_counter() - began < SETTLE_S:
        time.sleep(0.01)
    return time.perf_counter() - began


def run_phases(
    base_port: int, dev_port: int, db: str, calls: list[tuple[str, str]], tokens: list[str]
) -> tuple[dict[str, dict[int, Phase]], float]:
    """For each in-flight level: warm-up, then chunks alternating between the two servers.
    After each chunk sent to the local stack its worker is left to finish the resumed calls
    before the baseline's next chunk, so neither server's chunk shares the machine with the
    other's work. Returns the phases and the longest such settle."""
    results: dict[str, dict[int, Phase]] = {"baseline": {}, "bide dev": {}}
    by_token = dict(zip(tokens, calls, strict=True))
    used = 0
    longest = 0.0

    def take(count: int) -> list[str]:
        nonlocal used
        used += count
        return tokens[used - count : used]

    for clients in CONCURRENCY:
        base, dev = results["baseline"][clients], results["bide dev"][clients] = Phase(), Phase()
        for size, record in [(WARMUP, False)] + [(CHUNK, True)] * (REQUESTS // CHUNK):
            paths = [f"/hooks/t{i}" for i in range(size)]
            asyncio.run(chunk(base_port, paths, clients, base if record else None))
            mine = take(size)
            asyncio.run(
                chunk(dev_port, [f"/hooks/{t}" for t in mine], clients, dev if record else None)
            )
            longest = max(longest, settle(db, [by_token[t] for t in mine]))
    return results, longest


def main() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT / "bench")]),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    total = (WARMUP + REQUESTS) * len(CONCURRENCY)
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.sqlite")
        calls = asyncio.run(park_calls(db, total))
        tokens = list(MINTED)
        assert len(tokens) == total, (len(tokens), total)
        dev = [sys.executable, "-m", "bide", "dev", "--port", "0", "--db", db, "--quiet"]
        dev += ["--app", "bench_local_webhooks:app"]
        baseline = [sys.executable, "-c", BASELINE_SERVER]
        with server(baseline, env) as base_port, server(dev, env) as dev_port:
            phases, longest = run_phases(base_port, dev_port, db, calls, tokens)
        done = ended(db, calls)

    print("Local stack webhooks on 127.0.0.1: POST /hooks/{token}, each request to a different")
    print("parked call's webhook, one connection per request, vs a trivial stdlib")
    print("ThreadingHTTPServer answering 202, in the same run: chunks of")
    print(f"{CHUNK} requests alternate between the two; {REQUESTS} requests per server and")
    print(f"in-flight level after {WARMUP} warm-up requests.")
    print()
    head = f"{'server':<10}{'inflight':>9}{'req/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
    print(f"    {head}  statuses")
    summaries = {
        name: {clients: phase.summary() for clients, phase in by.items()}
        for name, by in phases.items()
    }
    for name, by_clients in summaries.items():
        for clients, r in by_clients.items():
            cells = f"{r['rps']:>9.0f}{r['p50']:>9.2f}{r['p90']:>9.2f}{r['p99']:>9.2f}"
            print(f"    {name:<10}{clients:>9}{cells}  {r['statuses']}")
    print()
    for clients in CONCURRENCY:
        b, d = summaries["baseline"][clients], summaries["bide dev"][clients]
        print(
            f"    {clients} in flight: bide dev / baseline:  req/s {d['rps'] / b['rps']:.3f}"
            f"   p50 {d['p50'] / b['p50']:.1f}x   p99 {d['p99'] / b['p99']:.1f}x"
        )
    print(
        f"    the in-process worker ended {done} of {total} resumed calls; after a chunk it "
        f"needed at most {longest:.2f} s more"
    )


if __name__ == "__main__":
    with timed_run():
        main()
