"""The dev console: a web page the local stack serves, and the local-only JSON it reads.

* ``GET /_console``: the page (``assets/console.html``, ``console.js`` and ``console.css``,
  package data of :mod:`bide.local`; no build step, nothing fetched from elsewhere);
* ``GET /_local/sessions``: every session in the stack's SQLite file, newest first, with what
  it is doing (a worker runs it, a wake is queued, an alarm is armed, questions wait);
* ``GET /_local/sessions/{id}``: one session's worker, alarm, queued wakes and the last
  progress each of its tasks reported (``ctx.progress``, as this process heard it:
  :class:`ProgressLog`; the event stream has it too, coalesced).

Everything else the page shows comes from the sessions API (``GET /sessions/{id}``, its
``/workflow`` and ``/hooks``) and every action goes through it (inputs, answers, approvals),
exactly as a deployed UI would call it. None of this is deployed.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..approvals import approval_doc_key
from ..service.owners import INDEX_PARTITION_PREFIX
from ..workflow.requests import pending_asks
from .server import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from .stack import LocalStack

CONSOLE_PATH = "/_console"
SESSIONS_PATH = "/_local/sessions"
MAX_SESSIONS = 200  # the list shows the newest ones; a dev file rarely holds more
MAX_PROGRESS_TASKS = 1000  # tasks whose last progress is kept in memory
ASSETS = {
    "console.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# The page may load only what this server serves, and nothing may frame it.
_PAGE_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]
_SESSION_PATH = re.compile(r"^/_local/sessions/([^/]+)/?$")


def asset(name: str) -> bytes:
    """A console file from the package data (raises KeyError for anything else)."""
    if name not in ASSETS:
        raise KeyError(name)
    return resources.files("bide.local").joinpath("assets", name).read_bytes()


@dataclass(frozen=True)
class Progress:
    """A task's last progress value and when it came."""

    task_id: str
    value: Any
    at: float
    count: int


class ProgressLog:
    """The ``workflow_progress`` sink of the local stack's harnesses: keeps each task's last
    progress value (last write wins, as the stream promises), for the newest
    :data:`MAX_PROGRESS_TASKS` tasks."""

    def __init__(self, clock: Any, limit: int = MAX_PROGRESS_TASKS) -> None:
        self._clock = clock
        self._limit = limit
        self._last: OrderedDict[str, Progress] = OrderedDict()

    def __call__(self, task_id: str, value: Any) -> None:
        previous = self._last.pop(task_id, None)
        count = 1 if previous is None else previous.count + 1
        self._last[task_id] = Progress(task_id, _jsonable(value), self._clock.now(), count)
        while len(self._last) > self._limit:
            self._last.popitem(last=False)

    def of(self, task_ids: set[str]) -> list[Progress]:
        """The last progress of each of ``task_ids`` that reported any, oldest report first."""
        return sorted((p for t, p in self._last.items() if t in task_ids), key=lambda p: p.at)


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return repr(value)


def _state(running: bool, queued: bool, waiting_for_people: bool, live: bool) -> str:
    """What a session is doing, in a word, the most pressing first."""
    if running:
        return "running"
    if queued:
        return "queued"
    if waiting_for_people:
        return "needs you"
    return "parked" if live else "idle"


class Console:
    """Answers the console's page and its ``/_local/sessions`` routes for ``stack``."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    @staticmethod
    def takes(path: str) -> bool:
        """Whether ``path`` is one of the console's."""
        return any(path == p or path.startswith(p + "/") for p in (CONSOLE_PATH, SESSIONS_PATH))

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """The response to a request :meth:`takes`."""
        path = request.path
        if request.method != "GET":
            return HttpResponse.json(405, {"message": f"use GET for {path}"})
        if path in (CONSOLE_PATH, CONSOLE_PATH + "/"):
            return self._file("console.html")
        if path.startswith(CONSOLE_PATH + "/"):
            name = path[len(CONSOLE_PATH) + 1 :]
            if name in ASSETS and name != "console.html":
                return self._file(name)
            return HttpResponse.json(404, {"message": f"no console file {name[:80]!r}"})
        if path.rstrip("/") == SESSIONS_PATH:
            return HttpResponse.json(200, {"sessions": self.sessions()})
        match = _SESSION_PATH.match(path)
        if match is None:
            return HttpResponse.json(404, {"message": "Not Found"})
        session_id = unquote(match.group(1))
        found = self.session(session_id)
        if found is None:
            return HttpResponse.json(404, {"error": f"no session {session_id!r}"})
        return HttpResponse.json(200, found)

    def _file(self, name: str) -> HttpResponse:
        headers = [("Content-Type", ASSETS[name]), *_PAGE_HEADERS]
        return HttpResponse(200, asset(name), headers)

    # --- the JSON ----------------------------------------------------------------------------

    def sessions(self) -> list[dict[str, Any]]:
        """Every session (the newest :data:`MAX_SESSIONS`), newest first: its sequence number,
        live tasks, open questions and approvals, alarm, queued wakes and whether a worker
        runs it; ``state`` sums that up for a list."""
        stack = self.stack
        with stack.queue.db.transaction() as db:
            # The store's own tables share the stack's file. Newest first: a heads row is
            # inserted when the session is created and updated in place after that, so its
            # rowid orders sessions by creation.
            rows = db.execute(
                "SELECT h.session_id, h.seq, (SELECT COUNT(*) FROM tasks t "
                "WHERE t.session_id = h.session_id AND t.live = 1) "
                "FROM heads h WHERE substr(h.session_id, 1, ?) != ? "
                "ORDER BY h.rowid DESC LIMIT ?",
                # Not the owners' session indexes (bide.service.owners): they are no sessions.
                (len(INDEX_PARTITION_PREFIX), INDEX_PARTITION_PREFIX, MAX_SESSIONS),
            ).fetchall()
        running = set(stack.queue.running())
        queued: dict[str, int] = {}
        for wake in stack.queue.queued():
            queued[wake.session_id] = queued.get(wake.session_id, 0) + 1
        alarms = {a.session_id: a.at for a in stack.alarms.alarms()}
        found = []
        for session_id, seq, live in rows:
            sid = str(session_id)
            asks = len(pending_asks(stack.deps.store, sid))
            approvals = self._pending_approvals(sid)
            state = _state(sid in running, sid in queued, bool(asks or approvals), bool(live))
            found.append(
                {
                    "session_id": sid,
                    "seq": int(seq),
                    "live_tasks": int(live),
                    "asks": asks,
                    "approvals": approvals,
                    "worker_running": sid in running,
                    "wakes_queued": queued.get(sid, 0),
                    "alarm_at": alarms.get(sid),
                    "state": state,
                }
            )
        return found

    def _pending_approvals(self, session_id: str) -> int:
        store = self.stack.deps.store
        count = 0
        for doc in store.list_docs(session_id, approval_doc_key("")):
            body = doc.body if isinstance(doc.body, dict) else {}
            if body.get("status") != "pending":
                continue
            call = store.get_task(session_id, str(body.get("call_task")))
            count += call is not None and call.live
        return count

    def session(self, session_id: str) -> dict[str, Any] | None:
        """One session's local facts (None when no such session): ``worker_running``,
        ``alarm_at``, ``wakes_queued``, and ``progress`` of its live tasks."""
        stack = self.stack
        snapshot = stack.deps.store.load(session_id)
        if snapshot.seq == 0:
            return None
        now = stack.clock.now()
        alarm = [a.at for a in stack.alarms.alarms() if a.session_id == session_id]
        return {
            "session_id": session_id,
            "now": now,
            "seq": snapshot.seq,
            "worker_running": session_id in stack.queue.running(),
            "alarm_at": alarm[0] if alarm else None,
            "wakes_queued": [
                {
                    "reason": q.reason,
                    "visible_in_seconds": round(max(0.0, q.visible_at - now), 3),
                    "receive_count": q.receive_count,
                }
                for q in stack.queue.queued()
                if q.session_id == session_id
            ],
            "progress": [
                {"task_id": p.task_id, "value": p.value, "at": p.at, "count": p.count}
                for p in stack.progress.of(set(snapshot.tasks))
            ],
        }
