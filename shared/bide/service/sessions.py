"""The sessions API as a service: create, submit, view, stop, cancel, and the live webhook
URLs. Every command is one commit on the session followed by a wake, so the worker picks the
change up."""

from __future__ import annotations

from typing import Any

from ..agent.agent import Conversations
from ..agent.conversation import ConversationError, Submission, WhenBusy
from ..engine.errors import BideError
from ..engine.harness import Harness
from ..engine.state import Sleeping, Waiting
from .deps import Deps
from .hooks import live_webhooks

MAIN = "main"


class SessionNotFound(BideError):
    """No session with that id exists."""


async def _attach(deps: Deps, session_id: str) -> tuple[Harness, Conversations]:
    if deps.app.agent is None:
        raise BideError("this app has no agent: sessions need App(agent=...)")
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        services=deps.harness_services(),
    )
    await harness.attach()
    return harness, Conversations(harness, deps.app.agent)


async def create_session(deps: Deps, session_id: str | None = None) -> str:
    """Create a session with its main conversation; idempotent by id."""
    sid = session_id or deps.ids.new_id("s-")
    _, conversations = await _attach(deps, sid)
    await conversations.create(MAIN)
    return sid


async def submit(
    deps: Deps,
    session_id: str,
    content: str,
    *,
    request_id: str,
    when_busy: WhenBusy = "follow_up",
) -> Submission:
    """Submit input to the session's main conversation (idempotent by request id)."""
    _, conversations = await _attach(deps, session_id)
    # Arm before the write (a crash in between never strands the input), and again after
    # it, since the first wake may already have found nothing to do.
    deps.queue.wake(session_id, "submit")
    try:
        submission = await conversations.submit(
            MAIN, content, request_id=request_id, when_busy=when_busy
        )
    except ConversationError as exc:
        raise SessionNotFound(f"no session {session_id!r}") from exc
    deps.queue.wake(session_id, "submitted")
    return submission


async def stop(deps: Deps, session_id: str) -> bool:
    """Stop the running generation (and with it tool calls and subagents)."""
    _, conversations = await _attach(deps, session_id)
    deps.queue.wake(session_id, "stop")
    try:
        stopped = await conversations.stop(MAIN, "stopped by the user")
    except ConversationError as exc:
        raise SessionNotFound(f"no session {session_id!r}") from exc
    deps.queue.wake(session_id, "stopped")
    return stopped


async def cancel_task(deps: Deps, session_id: str, task_id: str) -> bool:
    """Abort one task (and its owned work)."""
    harness, _ = await _attach(deps, session_id)
    deps.queue.wake(session_id, "cancel")
    cancelled = await harness.abort(task_id, "cancelled")
    deps.queue.wake(session_id, "cancelled")
    return cancelled


async def view(deps: Deps, session_id: str) -> dict[str, Any]:
    """The session as a UI shows it: the live task graph (status, until, keys, policy), live
    tool slots, the transcript, the submissions and the live webhook URLs."""
    harness, conversations = await _attach(deps, session_id)
    try:
        head = conversations.head(MAIN)
    except ConversationError as exc:
        raise SessionNotFound(f"no session {session_id!r}") from exc
    tasks = []
    for record in sorted(harness.live_tasks.values(), key=lambda r: r.created_at):
        state = record.state
        node: dict[str, Any] = {
            "id": record.id,
            "kind": record.kind,
            "owner": record.owner,
            "status": state.status,
            "abort_marked": record.abort_marked,
        }
        if isinstance(state, Sleeping):
            node["until"] = state.until
            node["keys"] = [{"signal": k.signal, "key": k.key} for k in state.signals]
        if isinstance(state, Waiting):
            node["policy"] = state.policy
            node["on"] = list(state.on)
        if hasattr(state, "checkpoint"):
            node["phase"] = state.checkpoint.get("phase")
        if record.kind == "bide.tool":
            node["tool"] = {"name": record.input["name"], "arguments": record.input["arguments"]}
        tasks.append(node)
    submissions = [doc.body for doc in harness.list_docs(f"conv/{MAIN}/s/")]
    wake = harness.wake()
    return {
        "session_id": session_id,
        "running": head.run is not None,
        "wake": {"active": wake.active, "at": wake.at},
        "tasks": tasks,
        "entries": conversations.entries(MAIN),
        "submissions": submissions,
        "webhooks": live_webhooks(harness, deps.webhook_base_url),
    }


async def hooks(deps: Deps, session_id: str) -> list[dict[str, Any]]:
    """The webhook URLs the session's live tasks listen on (see :mod:`bide.service.hooks`)."""
    harness, _ = await _attach(deps, session_id)
    return live_webhooks(harness, deps.webhook_base_url)
