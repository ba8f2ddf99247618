"""The promise rules, as pure functions of a document, a write and the time."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .model import TERMINAL, PromiseDoc


class ResolveResult(enum.StrEnum):
    """What a terminal write did.

    ``settled``: this write ended the promise. ``ignored``: it had already ended; the first
    terminal write is kept (a late success never revives a cancelled promise). ``expired``: the
    hard deadline had passed, so the promise ended ``expired`` instead of taking this write.
    ``not_found``: no such promise.
    """

    SETTLED = "settled"
    IGNORED = "ignored"
    EXPIRED = "expired"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class ResolveDecision:
    """The result, and the document to write (None when nothing changes)."""

    result: ResolveResult
    doc: PromiseDoc | None = None


def decide_resolution(
    doc: PromiseDoc | None,
    status: str,
    value: Any,
    error: str | None,
    now: float,
    by: str,
) -> ResolveDecision:
    """Apply one terminal write to a promise.

    The first terminal write wins and nothing ever changes a terminal promise again. A write
    arriving at or after the hard deadline ends the promise ``expired`` whatever it carried:
    the deadline is part of the promise, so the outcome does not depend on whether the keeper
    task or the late write reached the store first (the same race rule as a signal's deadline).
    """
    if status not in TERMINAL:
        raise ValueError(f"a terminal write needs one of {TERMINAL}, not {status!r}")
    if doc is None:
        return ResolveDecision(ResolveResult.NOT_FOUND)
    if doc.terminal:
        return ResolveDecision(ResolveResult.IGNORED)
    if doc.deadline is not None and now >= doc.deadline and status != "expired":
        why = f"the hard deadline passed before this {status} write arrived"
        return ResolveDecision(ResolveResult.EXPIRED, _settle(doc, "expired", None, why, now, by))
    return ResolveDecision(ResolveResult.SETTLED, _settle(doc, status, value, error, now, by))


def _settle(
    doc: PromiseDoc, status: str, value: Any, error: str | None, now: float, by: str
) -> PromiseDoc:
    return doc.model_copy(
        update={
            "status": status,
            "value": value,
            "error": error,
            "settled_at": now,
            "settled_by": by,
        }
    )


def await_key(promise_id: str, interval: int) -> str:
    """The signal key of one await interval on a promise.

    An interval that timed out leaves its key expired, and an expired key can never be slept on
    again; so every interval of the same task gets its own key (``<id>#0``, ``<id>#1``, ...).
    """
    if interval < 0:
        raise ValueError("an await interval is a number >= 0")
    return f"{promise_id}#{interval}"


def group_terminal(docs: Iterable[PromiseDoc | None]) -> bool:
    """True when every promise of a group exists and is terminal."""
    return all(d is not None and d.terminal for d in docs)
