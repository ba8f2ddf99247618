"""Text views of what the sessions API returns, for the CLI and the demo.

:func:`render_session` draws a session view (``GET /sessions/{id}``) as a tree of tasks by
owner, each with its status, ``until`` (UTC and relative to now), the signal keys it sleeps
on, its wait policy; then live tool slots, pending asks, approvals and sign-ins (when the
server reports any), live webhook URLs and the tail of the transcript. Unknown fields are
ignored, so newer servers still render.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

TEXT_WIDTH = 100


def when(at: float | None, now: float) -> str:
    """``2026-01-01 02:00:00 UTC (in 1h 59m)``, or ``never`` for None."""
    if at is None:
        return "never"
    moment = datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{moment} ({relative(at - now)})"


def relative(seconds: float) -> str:
    """``in 1h 59m`` / ``3m 10s ago`` / ``now``."""
    if abs(seconds) < 0.5:
        return "now"
    span = _span(abs(seconds))
    return f"in {span}" if seconds > 0 else f"{span} ago"


def _span(seconds: float) -> str:
    if seconds >= 3600:  # to the minute: "2h 0m", not "1h 59m" for 1h 59m 59.9s
        hours, minutes = divmod(round(seconds / 60), 60)
        days, hours = divmod(hours, 24)
        return f"{days}d {hours}h" if days else f"{hours}h {minutes}m"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _clip(text: str, width: int = TEXT_WIDTH) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def call_text(tool: Mapping[str, Any]) -> str:
    """``run_ci(ref='main')``."""
    arguments = tool.get("arguments") or {}
    if isinstance(arguments, Mapping):
        args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    else:
        args = repr(arguments)
    return f"{tool.get('name', '?')}({args})"


def task_line(node: Mapping[str, Any], now: float) -> str:
    """One task: id, what it is, status and what it waits for."""
    parts = [str(node.get("id", "?"))]
    if isinstance(node.get("tool"), Mapping):
        parts.append(f"tool {call_text(node['tool'])}")
    else:
        parts.append(str(node.get("kind", "?")))
    status = str(node.get("status", "?"))
    if node.get("abort_marked"):
        status += " (abort-marked)"
    parts.append(status)
    if node.get("phase"):
        parts.append(f"phase={node['phase']}")
    # A sleep without a deadline waits for its signals however long it takes: say so.
    if node.get("until") is not None or node.get("status") == "sleeping":
        parts.append(f"until {when(node.get('until'), now)}")
    keys = node.get("keys") or []
    if keys:
        parts.append("on " + ", ".join(f"{k.get('signal')}/{k.get('key')}" for k in keys))
    if node.get("beat_by") is not None:  # a missed beat is noticed then, before until
        parts.append(f"beat by {when(node['beat_by'], now)} (every {node.get('heartbeat')}s)")
    for slot in node.get("slots") or []:
        parts.append(slot_text(slot))
    if node.get("policy"):
        on = node.get("on") or []
        parts.append(f"policy={node['policy']} on {len(on)} task{'s' if len(on) != 1 else ''}")
    return "  ".join(parts)


def slot_text(slot: Mapping[str, Any]) -> str:
    """A key holding something: ``holds failure on app.ci/done: BuildFailed: 3 failed``."""
    where = f"{slot.get('signal')}/{slot.get('key')}"
    failure = slot.get("failure")
    if slot.get("holds") == "failure" and isinstance(failure, Mapping):
        return f"holds failure on {where}: {failure.get('type')}: {failure.get('message')}"
    return f"holds {slot.get('holds')} on {where}"


def task_tree(tasks: Sequence[Mapping[str, Any]], now: float) -> list[str]:
    """The tasks as a tree by owner (tasks whose owner is not live are roots)."""
    ids = {t.get("id") for t in tasks}
    children: dict[Any, list[Mapping[str, Any]]] = {}
    for task in tasks:
        owner = task.get("owner") if task.get("owner") in ids else None
        children.setdefault(owner, []).append(task)
    lines: list[str] = []

    def walk(owner: Any, prefix: str) -> None:
        kids = children.get(owner, [])
        for index, node in enumerate(kids):
            last = index == len(kids) - 1
            lines.append(prefix + ("└─ " if last else "├─ ") + task_line(node, now))
            walk(node.get("id"), prefix + ("   " if last else "│  "))

    walk(None, "")
    return lines


def entry_line(entry: Mapping[str, Any]) -> str:
    """One transcript entry."""
    kind = str(entry.get("type", "?"))
    text = str(entry.get("text") or "")
    if kind == "assistant":
        calls = entry.get("tool_calls") or []
        if calls:
            text = (text + " " if text else "") + " ".join(
                "-> " + call_text(c) for c in calls if isinstance(c, Mapping)
            )
    elif kind == "tool_result":
        kind = "tool"
        name = entry.get("name")
        text = (f"{name}: " if name else "") + text + ("  [error]" if entry.get("is_error") else "")
    return f"{kind:<10} {_clip(text)}"


def render_session(view: Mapping[str, Any], now: float, *, tail: int = 6) -> str:
    """The session view as text (see the module docstring)."""
    lines = [f"session {view.get('session_id', '?')}"]
    running = view.get("running")
    if running is not None:
        lines.append(f"conversation: {'running' if running else 'idle'}")
    wake = view.get("wake")
    if isinstance(wake, Mapping):
        lines.append(f"wake(): active={wake.get('active')}  at={when(wake.get('at'), now)}")
    tasks = [t for t in view.get("tasks") or [] if isinstance(t, Mapping)]
    lines.append("tasks:" if tasks else "tasks: none live")
    lines += ["  " + line for line in task_tree(tasks, now)]
    slots = view.get("slots")
    if slots is None:
        slots = [t for t in tasks if isinstance(t.get("tool"), Mapping)]
    if slots:
        lines.append("live tool slots:")
        for slot in slots:
            tool = slot.get("tool") if isinstance(slot.get("tool"), Mapping) else slot
            lines.append(f"  {call_text(tool)}  {slot.get('status', '?')}  task {slot.get('id')}")
    asks = view.get("asks") or view.get("pending_asks") or []
    if asks:
        lines.append("pending asks:")
        for ask in asks:
            lines.append("  " + ask_line(ask))
    approvals = [a for a in view.get("approvals") or [] if isinstance(a, Mapping)]
    if approvals:
        lines.append("pending approvals:")
        for approval in approvals:
            arguments = _clip(json.dumps(approval.get("arguments"), sort_keys=True), 60)
            lines.append(
                f"  {approval.get('id', '?')}: {approval.get('tool', '?')} "
                f"{approval.get('subject', '')}  {arguments}  call {approval.get('call_task')}"
            )
    sign_ins = [a for a in view.get("authorizations") or [] if isinstance(a, Mapping)]
    if sign_ins:
        lines.append("pending sign-ins:")
        for auth in sign_ins:
            lines.append(
                f"  {auth.get('id', '?')}: {auth.get('provider', '?')}  task {auth.get('task_id')}"
            )
    hooks = [h for h in view.get("webhooks") or [] if isinstance(h, Mapping)]
    if hooks:
        lines.append("webhooks (live):")
        lines += ["  " + hook_line(h) for h in hooks]
    entries = [e for e in view.get("entries") or [] if isinstance(e, Mapping)]
    if entries:
        shown = entries[-tail:] if tail > 0 else []
        total = view.get("entries_total") or len(entries)  # a paged view holds its tail
        lines.append(f"transcript (last {len(shown)} of {total}):")
        lines += ["  " + entry_line(e) for e in shown]
    return "\n".join(lines)


def hook_line(hook: Mapping[str, Any]) -> str:
    """A live webhook: its URL, then the task and the signal key its requests go to."""
    tool = f" ({hook['tool']})" if hook.get("tool") else ""
    signed = "  signed" if hook.get("signed") else ""
    return (
        f"{hook.get('url')}\n    task {hook.get('task_id')}{tool} -> "
        f"{hook.get('signal')}/{hook.get('key')}  received {hook.get('received', 0)}{signed}"
    )


def ask_line(ask: Any) -> str:
    """One pending question: its id, prompt, options and task."""
    if not isinstance(ask, Mapping):
        return _clip(json.dumps(ask))
    ident = ask.get("id") or ask.get("ask_id") or "?"
    prompt = ask.get("prompt") or ask.get("question") or ""
    options = ask.get("options") or []
    labels = [
        str(o.get("id", o.get("label", "?"))) if isinstance(o, Mapping) else str(o) for o in options
    ]
    suffix = f"  options: {', '.join(labels)}" if labels else ""
    task = f"  task {ask['task_id']}" if ask.get("task_id") else ""
    return f"{ident}: {_clip(str(prompt), 60)}{suffix}{task}"


# Why a signal, an answer or a decision was not taken, by command and the result answered.
_NOT_TAKEN = {
    "signal": {
        "duplicate": "not stored: the key already holds a value (the first one stands)",
        "closed": "not stored: the task ended, or the wait on that key is over",
        "invalid": "not stored: the value does not fit",
        "not_found": "not stored: no such task in this session",
    },
    "fail": {
        "duplicate": "not stored: the key already holds a value or a failure (the first stands)",
        "closed": "not stored: the task ended, or the wait on that key is over",
        "invalid": "not stored: the failure is malformed (type, message or data)",
        "not_found": "not stored: no such task in this session",
    },
    "beat": {
        "duplicate": "the key already holds a value or a failure: the wait is over",
        "closed": "the task ended, or the wait on that key is over (a deadline passed)",
        "not_found": "no such task in this session",
    },
    "answer": {
        "duplicate": "the question was answered before; the first answer stands",
        "closed": "the question is closed: its run ended and withdrew it",
        "invalid": "the answer does not fit the question (not one of its options, or free "
        "text it does not take)",
        "not_found": "no such question in this session (see bide show)",
    },
    "approve": {
        "already_decided": "the approval was decided before; the first decision stands",
        "closed": "the approval is closed (cancelled, past its deadline, or the call stopped "
        "waiting)",
        "not_found": "no such approval in this session (see bide show)",
    },
}


def not_taken(command: str, result: Any) -> str:
    """Why ``command``'s request was not taken, from the ``result`` the server answered."""
    return _NOT_TAKEN.get(command, {}).get(str(result), f"not taken: {result}")
