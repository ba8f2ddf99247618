"""The sessions API as a service: create, submit, view, stop, cancel, and the live webhook
URLs. Every command is one commit on the session followed by a wake, so the worker picks the
change up.

Reading is bounded however long the session: :func:`view` is a summary with the first page of
the transcript, of the live tasks, of the submissions and of the live webhooks;
:func:`transcript_page`, :func:`tasks_page`, :func:`submissions_page` and :func:`hooks_page`
serve the rest by cursor
(:mod:`bide.service.pages`). Owners and the caller's listing: :mod:`bide.service.owners`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..agent.agent import Conversations
from ..agent.conversation import ConversationError, Submission, WhenBusy, entry_key
from ..engine.errors import BideError
from ..engine.harness import Harness
from ..engine.records import TaskRecord
from ..engine.state import Sleeping, Waiting
from . import owners
from .attach import attach
from .deps import Deps
from .hooks import Position, webhooks_after
from .pages import MAX_PAGE_BYTES, BadCursor, Page, build_page, decode_cursor
from .task_slots import slot_views

MAIN = "main"


class SessionNotFound(BideError):
    """No session with that id exists."""


async def _attach(deps: Deps, session_id: str) -> tuple[Harness, Conversations]:
    if deps.app.agent is None:
        raise BideError("this app has no agent: sessions need App(agent=...)")
    harness = await attach(deps, session_id)
    return harness, Conversations(harness, deps.app.agent)


async def create_session(
    deps: Deps, session_id: str | None = None, caller: owners.Caller | None = None
) -> str:
    """Create a session with its main conversation; idempotent by id. With ``caller``, the
    session is theirs (recorded first, so a session never exists without its owner) and
    listed under them; creating another principal's session raises
    :class:`~bide.service.owners.NotAllowed`."""
    if deps.app.agent is None:
        raise BideError("this app has no agent: sessions need App(agent=...)")
    sid = session_id or deps.ids.new_id("s-")
    if caller is not None:
        owners.claim(deps.store, sid, caller, deps.clock.now())
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


def _task_node(record: TaskRecord) -> dict[str, Any]:
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
        if state.heartbeat is not None:
            node["heartbeat"] = state.heartbeat
            node["beat_by"] = state.beat_by
    if isinstance(state, Waiting):
        node["policy"] = state.policy
        node["on"] = list(state.on)
    if hasattr(state, "checkpoint"):
        node["phase"] = state.checkpoint.get("phase")
    slots = slot_views(record)
    if slots:
        node["slots"] = slots
    if record.kind == "bide.tool":
        node["tool"] = {"name": record.input["name"], "arguments": record.input["arguments"]}
    return node


def _tasks(harness: Harness, session_id: str, cursor: str | None, limit: int, bound: int) -> Page:
    # Live tasks in creation order; the cursor holds the last one's (created_at, id), so
    # tasks created later (never earlier than now) come after it.
    after = decode_cursor(cursor, session=session_id, kind="tasks")
    if after is not None and not (
        isinstance(after, list)
        and len(after) == 2
        and isinstance(after[0], int | float)
        and isinstance(after[1], str)
    ):
        raise BadCursor("cursor", "not a position in the task list")
    ordered = sorted(harness.live_tasks.values(), key=lambda r: (r.created_at, r.id))
    start = (float(after[0]), after[1]) if after is not None else None
    chosen = [r for r in ordered if start is None or (r.created_at, r.id) > start][: limit + 1]
    return build_page(
        (([r.created_at, r.id], r) for r in chosen),
        limit=limit,
        session=session_id,
        kind="tasks",
        start=after,
        byte_bound=bound,
        shape=_task_node,
    )


#: The first ranged read of a page asks for this many documents, each next one for four
#: times more (up to what the page still needs): a page that stops at its byte bound after a
#: few large documents (each maybe an S3 read) has not read a hundred more.
FIRST_READ = 16


def _read_docs(
    deps: Deps, session_id: str, prefix: str, after: str | None, wanted: int
) -> Iterator[tuple[str, Any]]:
    """``(key, body)`` of up to ``wanted`` documents after ``after``, read lazily in growing
    ranged reads (one Query each on DynamoDB): the page stops pulling when it is full."""
    size = FIRST_READ
    while wanted > 0:
        docs = deps.store.list_docs(session_id, prefix, start_after=after, limit=min(size, wanted))
        yield from ((d.key, d.body) for d in docs)
        if len(docs) < min(size, wanted):
            return
        wanted -= len(docs)
        after = docs[-1].key
        size *= 4


def _docs(
    deps: Deps,
    session_id: str,
    kind: str,
    prefix: str,
    after: str | None,
    limit: int,
    bound: int,
) -> Page:
    if after is not None and (not isinstance(after, str) or not after.startswith(prefix)):
        raise BadCursor("cursor", f"not a position in the {kind} list")
    return build_page(
        _read_docs(deps, session_id, prefix, after, limit + 1),
        limit=limit,
        session=session_id,
        kind=kind,
        start=after,
        byte_bound=bound,
    )


async def transcript_page(
    deps: Deps,
    session_id: str,
    *,
    cursor: str | None,
    limit: int,
    from_entry: int | None = None,
    bound: int = MAX_PAGE_BYTES,
) -> Page:
    """Transcript entries in order: after ``cursor``, or from entry number ``from_entry``
    (1-based), or from the start."""
    after = decode_cursor(cursor, session=session_id, kind="transcript")
    if from_entry is not None:
        after = entry_key(MAIN, from_entry - 1) if from_entry > 1 else None
    return _docs(deps, session_id, "transcript", f"conv/{MAIN}/e/", after, limit, bound)


async def submissions_page(
    deps: Deps, session_id: str, *, cursor: str | None, limit: int, bound: int = MAX_PAGE_BYTES
) -> Page:
    """Submissions in request-id order, after ``cursor``."""
    after = decode_cursor(cursor, session=session_id, kind="submissions")
    return _docs(deps, session_id, "submissions", f"conv/{MAIN}/s/", after, limit, bound)


async def tasks_page(
    deps: Deps, session_id: str, *, cursor: str | None, limit: int, bound: int = MAX_PAGE_BYTES
) -> Page:
    """Live tasks in creation order, after ``cursor``."""
    harness, _ = await _attach(deps, session_id)
    return _tasks(harness, session_id, cursor, limit, bound)


#: How many items of each list the summary holds, and its byte bound per list.
SUMMARY_LIMIT = 50
SUMMARY_BYTES = MAX_PAGE_BYTES


async def view(deps: Deps, session_id: str) -> dict[str, Any]:
    """The session as a UI shows it, bounded: whether a run is going, its ``wake()``, how
    many transcript entries it has, the first page of its live tasks (status, until, keys,
    policy, tool calls), of its transcript and of its submissions, each with the cursor
    that continues it, and the live webhook URLs."""
    harness, conversations = await _attach(deps, session_id)
    try:
        head = conversations.head(MAIN)
    except ConversationError as exc:
        raise SessionNotFound(f"no session {session_id!r}") from exc
    tasks = _tasks(harness, session_id, None, SUMMARY_LIMIT, SUMMARY_BYTES)
    hooks = _hooks(deps, harness, session_id, None, SUMMARY_LIMIT, SUMMARY_BYTES)
    entries = _docs(
        deps, session_id, "transcript", f"conv/{MAIN}/e/", None, SUMMARY_LIMIT, SUMMARY_BYTES
    )
    submissions = _docs(
        deps, session_id, "submissions", f"conv/{MAIN}/s/", None, SUMMARY_LIMIT, SUMMARY_BYTES
    )
    wake = harness.wake()
    return {
        "session_id": session_id,
        "owner": owners.owner_of(deps.store, session_id),
        "running": head.run is not None,
        "wake": {"active": wake.active, "at": wake.at},
        "entries_total": head.entries,
        "tasks_total": len(harness.live_tasks),
        "tasks": tasks.items,
        "tasks_next": tasks.next,
        "tasks_more": tasks.more,
        "entries": entries.items,
        "entries_next": entries.next,
        "entries_more": entries.more,
        "submissions": submissions.items,
        "submissions_next": submissions.next,
        "submissions_more": submissions.more,
        "webhooks": hooks.items,
        "webhooks_next": hooks.next,
        "webhooks_more": hooks.more,
    }


def _hooks(
    deps: Deps, harness: Harness, session_id: str, cursor: str | None, limit: int, bound: int
) -> Page:
    # Webhooks in task creation order, then memo name; the cursor holds the last one's
    # (created_at, task id, memo name).
    after = decode_cursor(cursor, session=session_id, kind="hooks")
    if after is not None and not (
        isinstance(after, list)
        and len(after) == 3
        and isinstance(after[0], int | float)
        and isinstance(after[1], str)
        and isinstance(after[2], str)
    ):
        raise BadCursor("cursor", "not a position in the webhook list")
    start: Position | None = None if after is None else (float(after[0]), after[1], after[2])
    found = webhooks_after(harness, deps.webhook_base_url, deps.webhook_keys, start)
    return build_page(
        (([p[0], p[1], p[2]], hook) for p, hook in found),
        limit=limit,
        session=session_id,
        kind="hooks",
        start=after,
        byte_bound=bound,
    )


async def hooks_page(
    deps: Deps, session_id: str, *, cursor: str | None, limit: int, bound: int = MAX_PAGE_BYTES
) -> Page:
    """The webhook URLs the session's live tasks listen on (see :mod:`bide.service.hooks`),
    in task creation order, after ``cursor``."""
    harness, _ = await _attach(deps, session_id)
    return _hooks(deps, harness, session_id, cursor, limit, bound)
