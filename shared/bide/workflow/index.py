"""The session's index of background tasks, and cancelling them.

Every background task (:mod:`bide.workflow.background`) has an entry ``wf/task/<id>`` (a
:class:`BackgroundTaskInfo`) written in the same commits that start and end it, so a host can
list a session's tasks without loading them. ``task_cancel`` (a tool),
:func:`cancel_background_in` and :func:`end_session_in` abort working tasks through it;
ending the session also leaves a marker (``wf/session-ended``) so no new task starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..engine.store.base import MAX_COMMIT_ITEMS, Store
from ..tools.define import claim_tools, define_tool
from ..tools.results import ToolResult

if TYPE_CHECKING:
    from ..engine.harness import Draft, Harness

INDEX_PREFIX = "wf/task/"
ENDED_KEY = "wf/session-ended"
SESSION_ENDED = "session ended"
TaskStatus = Literal["working", "completed", "failed", "cancelled"]


class BackgroundTaskInfo(BaseModel):
    """An entry of the session's task index (document ``wf/task/<id>``)."""

    id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_task: str | None = None
    call_id: str | None = None
    conversation: str | None = None
    status: TaskStatus = "working"
    created_at: float = 0.0
    ended_at: float | None = None
    result: Any = None
    error: str | None = None
    nondeterminism: dict[str, Any] | None = Field(
        default=None,
        description="set when the task failed because its body no longer replays its history",
    )
    messages: int = 0


def index_key(task_id: str) -> str:
    """The task index entry of a background task."""
    return f"{INDEX_PREFIX}{task_id}"


# --- the index, cancelling, ending the session ----------------------------------------------


def background_tasks(
    source: Harness | Store, session_id: str | None = None
) -> list[BackgroundTaskInfo]:
    """The session's task index (oldest first), from a harness or from a store."""
    from ..engine.harness import Harness

    if isinstance(source, Harness):
        docs = source.list_docs(INDEX_PREFIX)
    else:
        if session_id is None:
            raise ValueError("a store needs the session id")
        docs = source.list_docs(session_id, INDEX_PREFIX)
    infos = [BackgroundTaskInfo.model_validate(d.body) for d in docs]
    return sorted(infos, key=lambda i: (i.created_at, i.id))


def _cancel(d: Draft, harness: Harness, task_id: str, reason: str) -> str:
    info = d.get_doc(index_key(task_id))
    if info is None:
        return "not_found"
    if info["status"] != "working":
        return "ended"
    return "cancelled" if harness.mark_abort(d, task_id, reason) else "ended"


async def cancel_background_in(harness: Harness, task_id: str, reason: str = "cancelled") -> str:
    """Cancel a background task of the session: ``cancelled`` (its body unwinds when the
    session runs next), ``ended`` (it already ended) or ``not_found``."""
    return harness._apply(lambda d: _cancel(d, harness, task_id, reason))


async def end_session_in(harness: Harness) -> list[str]:
    """The session ends: every working background task is cancelled (without waking the
    parent) and no new one starts. The ids cancelled.

    A session may have more background tasks than one commit holds: they are marked in
    commits of at most :data:`_END_BUDGET` writes, each safe to crash after (a task already
    marked is not marked again, and the ended mark comes first)."""
    cancelled: list[str] = []
    while True:

        def change(d: Draft) -> tuple[list[str], bool]:
            if d.get_doc(ENDED_KEY) is None:
                d.put_doc(ENDED_KEY, {"at": harness.clock.now()})
            done: list[str] = []
            for doc in harness.list_docs(INDEX_PREFIX):
                if len(d.writes) + len(d.docs) >= _END_BUDGET:
                    return done, True  # the rest in the next commit
                record = d.get(doc.body["id"])
                if record is not None and record.abort_marked:
                    continue  # marked by an earlier commit of this end (or a cancel)
                if _cancel(d, harness, doc.body["id"], SESSION_ENDED) == "cancelled":
                    done.append(doc.body["id"])
            return done, False

        done, more = harness._apply(change)
        cancelled += done
        if not more:
            return cancelled


# Writes per commit when ending a session: a store takes at most MAX_COMMIT_ITEMS; marking
# one task writes a few records, so leave room for the last one.
_END_BUDGET = MAX_COMMIT_ITEMS - 10


class TaskCancelArgs(BaseModel):
    """What the model passes to ``task_cancel``."""

    task_id: str = Field(description="The task_id a background tool's receipt named")


def task_cancel_tool(name: str = "task_cancel") -> Any:
    """A tool the model calls to cancel one of the session's background tasks."""

    async def execute(args: TaskCancelArgs, api: Any) -> ToolResult:
        info = api.get_doc(index_key(args.task_id))
        if info is None:
            return ToolResult.of_text(f"no background task {args.task_id!r}", is_error=True)
        if info["status"] != "working":
            return ToolResult.of_text(f"task {args.task_id} already ended: {info['status']}")
        await api.write(lambda tx: tx.abort(args.task_id, "cancelled by task_cancel"))
        return ToolResult.of_text(f"task {args.task_id} cancelled")

    tool = define_tool(
        name,
        "Cancel a background task started earlier in this session, by its task_id",
        TaskCancelArgs,
        execute,
        replay="safe",
    )
    claim_tools(task_cancel_tool, [tool])  # so an App sees cancellation is there, by any name
    return tool
