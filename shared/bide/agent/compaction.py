"""Compaction: fold old turns into one summary entry so the model reads a bounded window.

An agent opts in with a hook, ``GenerationHooks("compaction", compact=Compaction(...))``.
Before a model request, when the window (:mod:`.window`) holds more than ``threshold``
entries, the generation asks the summariser for a summary of the previous summary and the
oldest entries, keeping at least ``keep`` recent entries verbatim, and commits in one commit
the summary entry (appended to the transcript, so history keeps it) and the head's
``compacted`` pointer. From then on the model reads the summary and the entries after it;
the session views still read every entry.

The boundary never splits a round: the first kept entry is a user input or an assistant
answer, and every kept tool result belongs to a kept assistant entry, so the model never
sees a result without its call.

The summariser is ``async (previous, entries, rt) -> str``: a model call or any function.
The default, :func:`plain_summary`, is deterministic and bounded (for tests and as a floor).
A summariser that raises leaves the conversation uncompacted for this request (the request
goes on with the full window) and is asked again before the next one.

A crash before the commit leaves nothing written (the next attempt summarises again); a
crash after it leaves the summary in place (the next attempt reads the compacted window).
The commit checks the head, so a retried or repeated compaction never folds twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .conversation import Compacted, append_entry, read_head, write_head
from .limits import usage
from .window import SUMMARY, Window

__all__ = ["MAX_PLAIN_SUMMARY_CHARS", "Compaction", "Summariser", "compact", "plain_summary"]

_log = logging.getLogger(__name__)

Entry = dict[str, Any]
Summariser = Callable[[str | None, list[Entry], Any], Awaitable[str]]
"""``(previous summary text or None, the entries to fold in, the runtime) -> summary``."""

MAX_PLAIN_SUMMARY_CHARS = 4000
_LINE_CHARS = 160


async def plain_summary(previous: str | None, entries: list[Entry], rt: Any) -> str:
    """A deterministic summary: one short line per folded entry after the previous summary,
    keeping the last :data:`MAX_PLAIN_SUMMARY_CHARS` characters (so it stays bounded)."""
    lines = [previous] if previous else []
    for entry in entries:
        kind = entry.get("type")
        if kind == "assistant" and entry.get("tool_calls"):
            names = ", ".join(c.get("name", "?") for c in entry["tool_calls"])
            text = f"{entry.get('text', '')} [called {names}]".strip()
        else:
            text = str(entry.get("text", ""))
        lines.append(f"#{entry.get('i')} {kind}: {' '.join(text.split())[:_LINE_CHARS]}")
    return "\n".join(lines)[-MAX_PLAIN_SUMMARY_CHARS:]


@dataclass(frozen=True)
class Compaction:
    """Compact when the model would read more than ``threshold`` entries, keeping at least
    the ``keep`` most recent ones verbatim (``keep < threshold``)."""

    threshold: int = 200
    keep: int = 40
    summarise: Summariser = plain_summary

    def __post_init__(self) -> None:
        for name in ("threshold", "keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Compaction.{name} must be a positive integer, not {value!r}")
        if self.keep >= self.threshold:
            raise ValueError(
                f"Compaction.keep ({self.keep}) must be less than threshold ({self.threshold})"
            )


def boundary(entries: Sequence[Entry], keep: int) -> int | None:
    """The position in ``entries`` of the first entry to keep (at least ``keep`` kept, at
    least one folded), or None when no position keeps whole rounds."""
    for position in range(len(entries) - keep, 0, -1):
        if entries[position].get("type") in ("user", "assistant") and _whole(entries[position:]):
            return position
    return None


def _whole(kept: Sequence[Entry]) -> bool:
    """Whether every tool result in ``kept`` answers a call of an assistant entry in it."""
    calls = {
        c.get("id") for e in kept if e.get("type") == "assistant" for c in e.get("tool_calls", ())
    }
    return all(e.get("call_id") in calls for e in kept if e.get("type") == "tool_result")


async def compact(compaction: Compaction, rt: Any, cid: str, run: str, window: Window) -> Window:
    """Compact ``window`` when it is over the threshold; the window the model reads now."""
    if len(window.entries) <= compaction.threshold:
        return window
    position = boundary(window.entries, compaction.keep)
    if position is None:
        return window
    folded, kept = window.entries[:position], window.entries[position:]
    previous = window.summary
    try:
        text = await compaction.summarise(previous.get("text") if previous else None, folded, rt)
    except Exception:  # a failed summary costs a larger request, never the run
        _log.warning("summarising conversation %s failed; not compacted this time", cid)
        return window
    if not isinstance(text, str) or not text:
        raise TypeError(f"a Compaction summariser must return a non-empty str, not {text!r}")
    through = int(kept[0]["i"]) - 1
    carried = (previous or {}).get("usage") if (previous or {}).get("run") == run else None
    used = usage(folded, run)
    summary: Entry = {
        "type": SUMMARY,
        "text": text,
        "through": through,
        "run": run,
        # What the run had used in the folded entries, so its limits still count them.
        "usage": {
            "model_rounds": used.model_rounds + int((carried or {}).get("model_rounds", 0)),
            "tool_calls": used.tool_calls + int((carried or {}).get("tool_calls", 0)),
            "tokens": used.tokens + int((carried or {}).get("tokens", 0)),
        },
    }

    def write(tx: Any) -> Entry | None:
        head = read_head(tx, cid)
        if head.compacted is not None and head.compacted.through >= through:
            return None  # compacted already (a retried commit): never fold twice
        index = append_entry(tx, cid, summary)
        head = read_head(tx, cid)
        write_head(
            tx, head.model_copy(update={"compacted": Compacted(summary=index, through=through)})
        )
        return {**summary, "i": index}

    written = await rt.write(write)
    if written is None:
        return window
    return Window(written, through, kept)
