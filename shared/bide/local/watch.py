"""Following a session over the sessions API, for ``bide watch``: read, compare, say what changed.

:func:`read_snapshot` reads what a person follows (``GET /sessions/{id}`` completed with the
pages it continues on, the transcript entries added since the last snapshot by cursor, and,
when the server has it, ``GET /sessions/{id}/workflow``); :func:`changes` compares two
snapshots and returns one line per change (tasks that appeared, changed what they wait for
or ended; new transcript entries; questions, approvals and sign-ins that opened or closed;
webhooks; the session's ``wake()``; submissions); :func:`idle` says when nothing is left to
follow: no live task and no generation running. :func:`follow` runs the loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..engine.clock import Clock
from ..engine.errors import BideError
from .client import (
    ApiClient,
    ApiResponse,
    PageRefused,
    follow_list,
    path_of,
    session_view,
    workflow_view,
)
from .render import ask_line, call_text, entry_line, task_line, when

# What a task line is drawn from: a change to any of these is a change worth a line.
_TASK_FIELDS = (
    *("status", "phase", "until", "keys", "beat_by", "slots"),
    *("policy", "on", "abort_marked"),
)


class WatchRefused(BideError):
    """The server refused to show the session (no such session, no permission...)."""

    def __init__(self, response: ApiResponse, path: str) -> None:
        super().__init__(f"GET {path} -> HTTP {response.status}: {response.message}")
        self.response = response


@dataclass
class Snapshot:
    """What a person follows of a session at one moment."""

    view: dict[str, Any]
    workflow: dict[str, Any] = field(default_factory=dict)
    #: Transcript entries added since the previous snapshot (the first: the last few).
    new_entries: list[Any] = field(default_factory=list)
    #: Where the transcript was read up to (an API cursor).
    cursor: str | None = None

    @property
    def session_id(self) -> str:
        """The session's id."""
        return str(self.view.get("session_id", "?"))


def read_snapshot(
    client: ApiClient, session_id: str, previous: Snapshot | None = None, *, first: int = 3
) -> Snapshot:
    """The session view, its workflow view (empty when the server has no such route) and the
    transcript entries since ``previous`` (without one: the last ``first``). Each read costs
    what changed, not the session's length."""
    path = path_of("sessions", session_id)
    try:
        view = session_view(client, session_id, tail=0)
        if previous is None:
            start = max(1, int(view.get("entries_total") or 0) - first + 1)
            entries, cursor = follow_list(client, path + "/transcript", None, from_entry=start)
        else:
            entries, cursor = follow_list(client, path + "/transcript", previous.cursor)
        found = workflow_view(client, session_id)
    except PageRefused as exc:
        raise WatchRefused(exc.response, exc.path) from None
    return Snapshot(view, found, entries, cursor)


def idle(snapshot: Snapshot) -> bool:
    """Nothing left to follow: no live task, no generation running."""
    return not snapshot.view.get("tasks") and not snapshot.view.get("running")


def _by(items: Any, key: str) -> dict[str, Mapping[str, Any]]:
    return {
        str(item.get(key)): item
        for item in items or []
        if isinstance(item, Mapping) and item.get(key) is not None
    }


def _what(task: Mapping[str, Any]) -> str:
    tool = task.get("tool")
    return f"tool {call_text(tool)}" if isinstance(tool, Mapping) else str(task.get("kind", "?"))


def _approval_line(approval: Mapping[str, Any]) -> str:
    arguments = json.dumps(approval.get("arguments"), sort_keys=True)
    return f"{approval.get('id')}: {approval.get('tool')} {approval.get('subject')}  {arguments}"


def _opened_closed(
    old: dict[str, Mapping[str, Any]],
    new: dict[str, Mapping[str, Any]],
    opened: Callable[[Mapping[str, Any]], str],
    closed: Callable[[str], str],
) -> list[str]:
    lines = [opened(item) for key, item in new.items() if key not in old]
    return lines + [closed(key) for key in old if key not in new]


def changes(old: Snapshot | None, new: Snapshot, now: float) -> list[str]:
    """One line per change from ``old`` to ``new`` (everything worth saying when ``old`` is
    None), oldest kind of news first: the session, tasks, people, webhooks, transcript."""
    sid = new.session_id
    before = old.view if old is not None else {}
    after = new.view
    lines: list[str] = []
    if old is None:
        running = "running" if after.get("running") else "idle"
        lines.append(f"session {sid}: conversation {running}")
    elif bool(before.get("running")) != bool(after.get("running")):
        lines.append(f"conversation {'running' if after.get('running') else 'idle'}")
    wake = after.get("wake") or {}
    if old is None or (before.get("wake") or {}) != wake:
        lines.append(f"wake(): active={wake.get('active')}  at={when(wake.get('at'), now)}")

    old_tasks, new_tasks = _by(before.get("tasks"), "id"), _by(after.get("tasks"), "id")
    for task_id, task in new_tasks.items():
        previous = old_tasks.get(task_id)
        if previous is None:
            lines.append(f"+ task {task_line(task, now)}")
        elif any(previous.get(f) != task.get(f) for f in _TASK_FIELDS):
            lines.append(f"~ task {task_line(task, now)}")
    lines += [
        f"- task {tid}  {_what(t)}  ended" for tid, t in old_tasks.items() if tid not in new_tasks
    ]

    flow_before = old.workflow if old is not None else {}
    hint = f"(answer: bide answer {sid} ASK TEXT, or --option ID)"
    lines += _opened_closed(
        _by(flow_before.get("asks"), "id"),
        _by(new.workflow.get("asks"), "id"),
        lambda ask: f"? question {ask_line(ask)}  {hint}",
        lambda key: f"question {key} closed",
    )
    lines += _opened_closed(
        _by(flow_before.get("approvals"), "id"),
        _by(new.workflow.get("approvals"), "id"),
        lambda a: f"? approval {_approval_line(a)}  (bide approve {sid} {a.get('id')} [--deny])",
        lambda key: f"approval {key} closed",
    )
    lines += _opened_closed(
        _by(flow_before.get("authorizations"), "id"),
        _by(new.workflow.get("authorizations"), "id"),
        lambda a: f"? sign-in {a.get('id')}: {a.get('provider')}  task {a.get('task_id')}",
        lambda key: f"sign-in {key} closed",
    )
    lines += _opened_closed(
        _by(before.get("webhooks"), "url"),
        _by(after.get("webhooks"), "url"),
        lambda h: (
            f"webhook {h.get('url')}  task {h.get('task_id')} -> {h.get('signal')}/{h.get('key')}"
        ),
        lambda url: f"webhook closed: {url}",
    )

    lines += ["  " + entry_line(e) for e in new.new_entries if isinstance(e, Mapping)]
    old_subs = {k: s.get("status") for k, s in _by(before.get("submissions"), "id").items()}
    for key, submission in _by(after.get("submissions"), "id").items():
        if old is not None and old_subs.get(key) != submission.get("status"):
            lines.append(f"submission {key}: {submission.get('status')}")
    return lines


def stamp(now: float) -> str:
    """``12:03:04`` (UTC): the time a change was seen."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%H:%M:%S")


def follow(
    client: ApiClient,
    session_id: str,
    *,
    clock: Clock,
    interval: float,
    timeout: float | None,
    emit: Callable[[str], None],
    raw: Callable[[Snapshot], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Emit a line per change in the session (or, with ``raw``, hand it each snapshot that
    changed) until it is :func:`idle` (True) or ``timeout`` seconds passed (False). Raises
    :class:`WatchRefused` when the session cannot be read."""
    deadline = None if timeout is None else clock.now() + timeout
    previous: Snapshot | None = None
    while True:
        current = read_snapshot(client, session_id, previous)
        now = clock.now()
        lines = changes(previous, current, now)
        if raw is not None and lines:
            raw(current)
        for line in lines if raw is None else ():
            emit(f"[{stamp(now)}] {line}")
        previous = current
        if idle(current):
            return True
        if deadline is not None and now >= deadline:
            return False
        sleep(interval if deadline is None else max(0.0, min(interval, deadline - now)))
