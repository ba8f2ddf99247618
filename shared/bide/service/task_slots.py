"""What a task's open signal slots look like in the session view: which keys hold a value, a
failure or expired, not consumed yet. A failure is shown as a failure (its type and the start
of its message), never as a value; values themselves stay out of the view."""

from __future__ import annotations

from typing import Any

from ..engine.records import TaskRecord

#: The view shows at most this many characters of a failure's message.
VIEW_MESSAGE_CHARS = 256


def slot_views(record: TaskRecord) -> list[dict[str, Any]]:
    """The task's slots not consumed yet, in key order (``[]`` when none)."""
    views: list[dict[str, Any]] = []
    for name in sorted(record.signals):
        slot = record.signals[name]
        if slot.consumed:
            continue
        signal, _, key = name.partition("/")
        view: dict[str, Any] = {"signal": signal, "key": key}
        if slot.failure is not None:
            message = str(slot.failure.get("message", ""))
            view["holds"] = "failure"
            view["failure"] = {
                "type": str(slot.failure.get("type", "")),
                "message": message[:VIEW_MESSAGE_CHARS],
            }
        elif slot.has_value:
            view["holds"] = "value"
        elif slot.expired:
            view["holds"] = "expired"
        else:
            continue  # nothing held (a key a wake is about to settle)
        views.append(view)
    return views
