"""Reading the stored forms of task states, wake reasons and outcomes
(:mod:`bide.engine.state`), strictly: an unknown field, a missing one or a value of the wrong
type is a :class:`~bide.engine.forms.FormError` naming it. Writing is each value's own
``to_dict``."""

from __future__ import annotations

from typing import Any

from . import forms
from .forms import FormError
from .signals import SignalKey
from .state import (
    Outcome,
    Outcomes,
    Sleeping,
    TaskState,
    TaskStates,
    WakeReason,
    WakeReasons,
)
from .values import field_defaults, field_names

_FIELDS: dict[type, frozenset[str]] = {
    cls: frozenset(("reason" if cls in WakeReasons else "status", *field_names(cls)))
    for cls in (*WakeReasons, *Outcomes, *TaskStates)
}
_REQUIRED: dict[type, tuple[str, ...]] = {
    cls: tuple(n for n in field_names(cls) if n not in field_defaults(cls)) for cls in _FIELDS
}
_REQUIRED_SETS = {cls: frozenset(names) for cls, names in _REQUIRED.items()}
_WAKES: dict[str, type[WakeReason]] = {cls.reason: cls for cls in WakeReasons}
_OUTCOMES: dict[str, type[Outcome]] = {cls.status: cls for cls in Outcomes}
_STATES: dict[str, type[TaskState]] = {cls.status: cls for cls in TaskStates}


def _read(data: Any, tag: str, kinds: dict[str, Any], what: str) -> tuple[type, dict[str, Any]]:
    if type(data) is not dict:
        raise FormError(what, f"must be an object, got {type(data).__name__}")
    name = data.get(tag)
    cls = kinds.get(name) if isinstance(name, str) else None
    if cls is None:
        raise FormError(tag, f"must be one of {', '.join(kinds)}, got {name!r}")
    if not data.keys() <= _FIELDS[cls] or not _REQUIRED_SETS[cls] <= data.keys():
        forms.shape(data, f"a {name} {what}", _FIELDS[cls], _REQUIRED[cls])
    fields = dict(data)
    del fields[tag]
    return cls, fields


def wake_from_dict(data: Any) -> WakeReason:
    """Read a wake reason's stored form (:class:`FormError` if it is not one)."""
    cls, fields = _read(data, "reason", _WAKES, "wake reason")
    return cls(**fields)  # type: ignore[no-any-return]


def outcome_from_dict(data: Any) -> Outcome:
    """Read an outcome's stored form (:class:`FormError` if it is not one)."""
    cls, fields = _read(data, "status", _OUTCOMES, "outcome")
    return cls(**fields)  # type: ignore[no-any-return]


def state_from_dict(data: Any) -> TaskState:
    """Read a task state's stored form (:class:`FormError`, naming the field, if it is not
    one)."""
    cls, fields = _read(data, "status", _STATES, "state")
    if fields.get("wake") is not None:
        fields["wake"] = _nested(wake_from_dict, fields["wake"], "wake")
    if "outcome" in fields:
        fields["outcome"] = _nested(outcome_from_dict, fields["outcome"], "outcome")
    if cls is Sleeping and "signals" in fields:
        fields["signals"] = _keys_from(fields["signals"])
    return cls(**fields)  # type: ignore[no-any-return]


def _nested(read: Any, data: Any, name: str) -> Any:
    try:
        return read(data)
    except FormError as exc:
        raise exc.within(name) from None


_KEY_FIELDS = frozenset(("signal", "key"))


def _keys_from(data: Any) -> Any:
    if not isinstance(data, list):
        return data  # the state's own check names it
    keys: list[Any] = []
    for i, item in enumerate(data):
        if type(item) is not dict or item.keys() != _KEY_FIELDS:
            try:
                forms.shape(item, "a signal key", _KEY_FIELDS, ("signal", "key"))
            except FormError as exc:
                raise exc.within(f"signals.{i}") from None
        signal, key = item["signal"], item["key"]
        if type(signal) is not str or type(key) is not str:
            field = "signal" if type(signal) is not str else "key"
            raise FormError(
                f"signals.{i}.{field}", f"must be a string, got {type(item[field]).__name__}"
            )
        keys.append(SignalKey(signal, key))
    return tuple(keys)
