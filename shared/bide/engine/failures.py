"""Failures: a wait's other answer. Instead of a value, a sender may say "this failed".

A :class:`SignalFailure` (``type``, ``message``, optional ``data``) is delivered wherever a
value is (``Harness.signal``/``deliver``, ``deliver_signal``, a commit's ``tx.signal``,
webhooks, the signal route): pass the object *as the value*. It occupies the key exactly like
a value: the same check order (a malformed failure is ``invalid``, naming the field), the
first of values and failures wins, a sleep on the key wakes with ``WakeSignal``, the key is
consumed the same way. It skips the token's schema (a failure is not a value of the signal);
its ``data`` obeys the value limits of :mod:`bide.engine.limits`.

``read_signal`` returns :class:`SignalFailed` for such a key. Code that wants an exception
raises :meth:`SignalFailed.error` (:class:`FailureReceived`); the workflow waits do so for
their body, and a tool or workflow body that lets it escape ends its call *failed*.
"""

from __future__ import annotations

from typing import Any

from .errors import BideError
from .limits import MAX_JSON_DEPTH, value_depth
from .values import FrozenValue, frozen_value

MAX_FAILURE_TYPE = 128
"""Characters a failure's ``type`` may have: a short name (``"BuildFailed"``), not a text."""

MAX_FAILURE_MESSAGE = 16 * 1024
"""Characters a failure's ``message`` may have (details go in ``data``)."""

FAILURE_FIELDS = frozenset({"type", "message", "data"})

_set = object.__setattr__  # building a frozen value


@frozen_value
class SignalFailure(FrozenValue):
    """A failure delivered to a key instead of a value: pass it where a value goes.

    ``type`` is a short non-empty name (at most :data:`MAX_FAILURE_TYPE` characters),
    ``message`` a text for people (at most :data:`MAX_FAILURE_MESSAGE`), ``data`` optional
    JSON under the value limits. Building one checks nothing: delivery does (a malformed one
    is answered ``invalid`` with the field and why, nothing stored).

    Frozen, compared by its fields (a frozen dataclass's behaviour, without its import cost:
    :mod:`bide.engine.values`)."""

    __slots__ = ("data", "message", "type")
    type: str
    message: str
    data: Any

    def __init__(self, type: str, message: str, data: Any = None) -> None:
        _set(self, "type", type)
        _set(self, "message", message)
        _set(self, "data", data)

    def to_json(self) -> dict[str, Any]:
        """The stored form (``data`` left out when None)."""
        out: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


@frozen_value
class SignalFailed(FrozenValue):
    """A key's state once a failure arrived (what ``read_signal`` returns)."""

    __slots__ = ("data", "message", "type")
    type: str
    message: str
    data: Any

    def __init__(self, type: str, message: str, data: Any = None) -> None:
        _set(self, "type", type)
        _set(self, "message", message)
        _set(self, "data", data)

    def error(self) -> FailureReceived:
        """The exception that stands for this failure: ``raise state.error()``."""
        return FailureReceived(self.type, self.message, self.data)


class FailureReceived(BideError):
    """A wait got a failure instead of a value. Catch it to handle the failure; uncaught in a
    tool or workflow body, the call ends failed with it. ``type``, ``message`` and ``data``
    are the sender's."""

    def __init__(self, type: str, message: str, data: Any = None) -> None:
        self.type = type
        self.message = message
        self.data = data
        super().__init__(f"failure received: {type}: {message}")

    def to_json(self) -> dict[str, Any]:
        """The failure as JSON (``data`` left out when None)."""
        return SignalFailure(self.type, self.message, self.data).to_json()


def failure_errors(failure: Any) -> list[dict[str, str]]:
    """What is wrong with ``failure`` (a :class:`SignalFailure`), field by field; empty when
    it may be delivered. The size of ``data`` is checked with the value limits afterwards."""
    errors: list[dict[str, str]] = []
    kind, message = failure.type, failure.message
    if not isinstance(kind, str) or not kind.strip():
        errors.append({"field": "type", "message": "must be a non-empty string"})
    elif len(kind) > MAX_FAILURE_TYPE:
        errors.append({"field": "type", "message": f"is over {MAX_FAILURE_TYPE} characters"})
    if not isinstance(message, str):
        errors.append({"field": "message", "message": "must be a string"})
    elif len(message) > MAX_FAILURE_MESSAGE:
        why = f"is over {MAX_FAILURE_MESSAGE} characters"
        errors.append({"field": "message", "message": why})
    if value_depth(failure.data) > MAX_JSON_DEPTH:
        errors.append({"field": "data", "message": f"nests over {MAX_JSON_DEPTH} levels"})
    return errors


def parse_failure(body: Any) -> SignalFailure:
    """A failure from its JSON form ``{"type", "message", "data"?}``. Raises
    :class:`MalformedFailure` naming the field and why (for a 400: nothing is stored)."""
    if not isinstance(body, dict):
        raise MalformedFailure("(failure)", 'must be an object {"type", "message", "data"?}')
    unknown = sorted(set(body) - FAILURE_FIELDS)
    if unknown:
        raise MalformedFailure(unknown[0], "is not a field of a failure (type, message, data)")
    for name in ("type", "message"):
        if name not in body:
            raise MalformedFailure(name, "is required")
    failure = SignalFailure(body["type"], body["message"], body.get("data"))
    errors = failure_errors(failure)
    if errors:
        raise MalformedFailure(errors[0]["field"], errors[0]["message"])
    return failure


class MalformedFailure(ValueError):
    """A failure's JSON form is not one: ``field`` says which field, the message why."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"failure field {field!r} {why}; nothing was stored")
