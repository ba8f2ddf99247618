"""Bounds on what Bide stores, so every stored value reads back and no task record grows
without end. This module is the one place the limits are defined.

Why: every JSON reader of the stored forms stops at some depth: pydantic's, which earlier
versions read records with (and a process of an earlier version still does during a rolling
deploy), at about 200 levels while its writer went a little further; Python's own (which reads
them now, :mod:`bide.engine.forms`) at the interpreter's recursion limit. A value nested
deeper than a reader goes is written and can never be loaded again, and with it the whole
session. And a task record is rewritten
on every commit of its task: values piling up on it under distinct keys or stream slots make
every later commit slower and larger.

The limits:

* :data:`MAX_JSON_DEPTH`: how deep one value from a caller may nest (a signal value, a
  promise's value, a task's input, result, error, checkpoint or memo, a request body).
* :data:`MAX_VALUE_BYTES`: the size of one such value as stored (compact UTF-8 JSON), for
  values that arrive from outside or are rewritten with every commit of their task.
* :data:`MAX_TASK_SIGNAL_BYTES` and :data:`MAX_TASK_PENDING_SIGNALS`: the per-task budget. A
  task's record keeps the signal values delivered to it until a wake consumes them (then they
  move to documents, :mod:`bide.engine.slots`); together they may take at most
  :data:`MAX_TASK_SIGNAL_BYTES`, and at most
  :data:`MAX_TASK_PENDING_SIGNALS` of them may be waiting, delivered but not yet consumed
  (the slots of a stream nobody reads fill up here).
* :data:`MAX_WRITTEN_ONCE_BYTES`: the size of a value written once, not with every commit of
  its task: a task's result or error, a document (documents nest at most
  ``MAX_JSON_DEPTH + ENVELOPE_DEPTH`` levels: they wrap caller values).
* :data:`ENVELOPE_DEPTH` and :data:`ENVELOPE_BYTES`: what Bide's own wrapping may add around a
  caller's value (a promise's outcome, a conversation entry), allowed on top of the value
  limits for documents and for signals whose token declares an envelope.

Where they are checked (the choke points): every signal delivery decides in
:func:`~bide.engine.rules.decide_signal`, which calls :func:`check_signal_value` and
:func:`~bide.engine.budgets.check_signal_budget` before it builds a record; every commit of a
harness passes :func:`~bide.engine.budgets.check_commit` before the store is touched, which
checks the values a commit changes (inputs, memos, checkpoints, outcomes, signal slots,
documents). A refusal raises a
:class:`ValueRefused` and nothing of that commit is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from .errors import BideError

MAX_JSON_DEPTH = 64
"""Levels of arrays and objects one value may nest (``[]`` is 1, a scalar 0). Far under the
readers' ~200, leaving room for the record around the value."""

MAX_VALUE_BYTES = 256 * 1024
"""One value's stored JSON, in bytes; the same as a webhook body's limit."""

MAX_TASK_SIGNAL_BYTES = 1024 * 1024
"""All signal values held on one task record, in bytes (four values at the size limit)."""

MAX_TASK_PENDING_SIGNALS = 256
"""Signal values held on one task and not yet consumed by a wake."""

MAX_WRITTEN_ONCE_BYTES = 4 * 1024 * 1024
"""A value written once rather than with every commit of its task: a task's result or error
(the record is terminal, or completing, from then on) and a document. Stores offload large
ones (the DynamoDB store to S3), so a tool's 1 MB result is fine; this bound only keeps one
value from growing without end."""

ENVELOPE_DEPTH = 16
"""Extra levels allowed for what Bide writes around a caller's value."""

ENVELOPE_BYTES = 64 * 1024
"""Extra bytes allowed for what Bide writes around a caller's value."""


class ValueRefused(BideError):
    """A value Bide would not store (too deep, too large, not JSON, or over a task's budget).

    Nothing was written. ``field`` names the value, ``limit`` the bound it broke and
    ``status`` the HTTP status a route answers with (400 malformed or too deep, 413 too
    large or over budget). Sending the same value again gets the same answer.
    """

    status = 400

    def __init__(self, field: str, why: str, limit: int | None = None) -> None:
        self.field = field
        self.limit = limit
        super().__init__(f"{field} {why}; nothing was stored")


class ValueTooDeep(ValueRefused):
    """A value nests deeper than :data:`MAX_JSON_DEPTH`. Flatten it."""


class ValueTooLarge(ValueRefused):
    """A value's JSON is larger than :data:`MAX_VALUE_BYTES`. Store it elsewhere (e.g. S3)
    and pass a reference."""

    status = 413


class TaskBudgetExceeded(ValueRefused):
    """A task already holds as many signal values (bytes or pending count) as it may. The
    bytes budget frees only when the task ends; the pending count frees as the task consumes
    values, so a later delivery may succeed."""

    status = 413


def value_depth(value: Any) -> int:
    """How deep arrays and objects (lists, tuples, dicts) nest in ``value``. Iterative, so a
    value nested a million levels costs a loop, not a stack overflow."""
    return _scan(value)[0]


def _scan(value: Any) -> tuple[int, float | None]:
    """The depth of ``value`` and its first float JSON cannot hold (NaN, an infinity)."""
    deepest, bad = 0, None
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            if isinstance(item, float) and bad is None and not math.isfinite(item):
                bad = item
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest, bad


def value_bytes(value: Any, field: str) -> int:
    """The size of ``value`` as compact UTF-8 JSON. Raises :class:`ValueRefused` for what JSON
    cannot hold (NaN, infinities, integers past Python's digit limit, strings with a lone
    surrogate, other objects). Call
    only on values whose depth was checked (the encoder recurses)."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate: not Unicode text, no store takes it
        raise ValueRefused(field, f"is not JSON text ({exc.reason})") from None
    except (TypeError, ValueError) as exc:
        raise ValueRefused(field, f"is not JSON ({exc})") from None


def check_value(
    value: Any, field: str, *, depth: int = MAX_JSON_DEPTH, size: int = MAX_VALUE_BYTES
) -> int:
    """Refuse ``value`` unless it nests at most ``depth`` levels and its JSON takes at most
    ``size`` bytes; returns the size. ``field`` names the value in the error."""
    found = value_depth(value)
    if found > depth:
        raise ValueTooDeep(field, f"nests {found} levels; the limit is {depth}", depth)
    found_bytes = value_bytes(value, field)
    if found_bytes > size:
        raise ValueTooLarge(field, f"is {found_bytes} bytes of JSON; the limit is {size}", size)
    return found_bytes


def signal_field(signal: str, key: str) -> str:
    """How errors name a signal value."""
    return f"the value of signal {signal!r} key {key!r}"


def check_signal_depth(value: Any, signal: str, key: str, envelope: int) -> None:
    """Refuse a signal value nested deeper than the limit (plus the token's envelope levels),
    or holding NaN or an infinity (a schema would store those as null); run before the schema
    sees the value."""
    limit = MAX_JSON_DEPTH + envelope
    found, bad = _scan(value)
    field = signal_field(signal, key)
    if found > limit:
        raise ValueTooDeep(field, f"nests {found} levels; the limit is {limit}", limit)
    if bad is not None:
        raise ValueRefused(field, f"is not JSON ({bad} is not a finite number)")


def check_signal_value(stored: Any, signal: str, key: str, envelope: int) -> int:
    """Refuse a signal value (as it would be stored) over the value limits; its size."""
    return check_value(
        stored,
        signal_field(signal, key),
        depth=MAX_JSON_DEPTH + envelope,
        size=MAX_VALUE_BYTES + (ENVELOPE_BYTES if envelope else 0),
    )
