"""What the model reads of a conversation: its window.

The transcript keeps every entry (``conv/<cid>/e/<n>``) for the session views. The model
reads the *window*: with no compaction, every entry; once a compaction ran
(:mod:`.compaction`), the latest summary entry followed by the entries after the last one it
stands for. Either way the window is one listing of the entries after
``head.compacted.through`` (the summary entry is among them, since it was appended after
the entries it summarises), so a model request reads the transcript once, in as many store
requests as the window's bytes need (DynamoDB pages a Query at 1 MB), and a compaction keeps
that bounded however long the conversation grows.

Entries are immutable once committed and their indices only grow, so a listing that starts
after an index never misses an entry another writer committed: it is read from the store,
never from a cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .conversation import ConversationHead, entry_key, read_head
from .limits import RunUsage, usage
from .providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "SUMMARY",
    "Window",
    "build_request",
    "entries",
    "read_window",
    "round_results",
    "window",
    "window_usage",
]

SUMMARY = "summary"
"""The ``type`` of an entry a compaction wrote (never shown to the model but as the window's
first message)."""


@dataclass(frozen=True)
class Window:
    """The entries the model reads: ``summary`` (the summary entry standing for entries
    ``1..through``, or None) and ``entries`` (those after ``through``, summaries left out)."""

    summary: dict[str, Any] | None = None
    through: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)


def entries_prefix(cid: str) -> str:
    """The key prefix of a conversation's entries."""
    return f"conv/{cid}/e/"


def read_window(rt: Any, cid: str, head: ConversationHead) -> Window:
    """The window of conversation ``cid`` as ``head`` places it: one listing."""
    compacted = head.compacted
    if compacted is not None and compacted.summary > head.entries:
        # A copy cut before its summary (a fork at an earlier entry): read it uncompacted.
        compacted = None
    after = entry_key(cid, compacted.through) if compacted is not None else None
    summary: dict[str, Any] | None = None
    kept: list[dict[str, Any]] = []
    for _key, body in rt.list_docs(entries_prefix(cid), start_after=after):
        if body.get("type") == SUMMARY:
            if compacted is not None and body.get("i") == compacted.summary:
                summary = body
            continue
        kept.append(body)
    return Window(summary, compacted.through if compacted is not None else 0, kept)


def round_results(rt: Any, cid: str, assistant: int) -> list[dict[str, Any]]:
    """The tool results written after assistant entry ``assistant`` (the round's): a listing
    that starts after that entry, so it reads the round, not the transcript."""
    found = rt.list_docs(entries_prefix(cid), start_after=entry_key(cid, assistant))
    return [body for _key, body in found if body.get("type") == "tool_result"]


def window_usage(window: Window, run: str, extra: Sequence[dict[str, Any]] = ()) -> RunUsage:
    """What run ``run`` has used: its entries in the window (and ``extra``), plus what the
    summary carries for the entries it folded (a compaction inside a run keeps its count)."""
    seen = usage([*window.entries, *extra], run)
    carried = (window.summary or {}).get("usage") or {}
    if window.summary is None or window.summary.get("run") != run:
        return seen
    return RunUsage(
        seen.model_rounds + int(carried.get("model_rounds", 0)),
        seen.tool_calls + int(carried.get("tool_calls", 0)),
        seen.tokens + int(carried.get("tokens", 0)),
    )


def entries(rt: Any, cid: str) -> list[dict[str, Any]]:
    """The whole transcript, in order (what history keeps; the model reads :func:`window`)."""
    return [body for _key, body in rt.list_docs(entries_prefix(cid))]


def window(rt: Any, cid: str) -> Window:
    """What the model reads of the conversation as it stands (:mod:`.window`)."""
    return read_window(rt, cid, read_head(rt, cid))


def build_request(agent: Agent, rt: Any, cid: str, view: Window | None = None) -> ModelRequest:
    """The model request for the conversation as it stands (``view``: its window, when the
    caller has read it already): the summary, if any, then the entries after it."""
    head = read_head(rt, cid)
    view = window(rt, cid) if view is None else view
    messages: list[Message] = []
    if view.summary is not None:
        messages.append(
            UserMessage(text=f"[Summary of the conversation so far]\n{view.summary['text']}")
        )
    for entry in view.entries:
        if entry["type"] == "user":
            messages.append(UserMessage(text=entry["text"]))
        elif entry["type"] == "assistant":
            messages.append(
                AssistantMessage(text=entry.get("text", ""), tool_calls=entry.get("tool_calls", []))
            )
        elif entry["type"] == "tool_result":
            text = entry["text"]
            if agent.admission is not None:
                text = agent.admission.render(
                    entry.get("identity"),
                    entry.get("variant"),
                    text,
                    entry["is_error"],
                    family=agent.model_family,
                )
            messages.append(
                ToolResultMessage(call_id=entry["call_id"], text=text, is_error=entry["is_error"])
            )
    offered = (
        agent.admission.catalog(agent.model_family).specs
        if agent.admission is not None
        else agent.tools.manifest()
    )
    tools = [
        ToolSpec(name=t["name"], description=t["description"], parameters=t["parameters"])
        for t in offered
    ]
    return ModelRequest(
        system=head.system or agent.system, messages=tuple(messages), tools=tuple(tools)
    )
