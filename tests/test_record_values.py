"""The task record and its signal slot were ``@dataclass(slots=True, kw_only=True)`` classes;
they are classes of :mod:`bide.engine.values` now (no generated methods compiled on a function's
cold import, tests/test_cold_imports.py): each must still behave as that dataclass did."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from bide.engine.records import SignalSlot, TaskRecord
from bide.engine.state import Pending, Running
from bide.engine.values import field_names

RECORD_FIELDS = (
    "id",
    "session_id",
    "kind",
    "version",
    "input",
    "owner",
    "background",
    "key",
    "abort_marked",
    "abort_reason",
    "memos",
    "memo_pages",
    "signals",
    "streams",
    "state",
    "created_at",
    "restarts",
    "rev",
)
SLOT_FIELDS = ("version", "value", "has_value", "expired", "consumed", "failure")


def _record(**changes: Any) -> TaskRecord:
    given: dict[str, Any] = {
        "id": "t",
        "session_id": "s",
        "kind": "k",
        "version": 1,
        "state": Pending(checkpoint={"phase": "a"}),
        "created_at": 1.0,
    }
    return TaskRecord(**{**given, **changes})


# For each field, a value other than _record()'s (or SignalSlot()'s).
RECORD_OTHER: dict[str, Any] = {
    "id": "u",
    "session_id": "z",
    "kind": "j",
    "version": 2,
    "input": {"a": 1},
    "owner": "o",
    "background": True,
    "key": "x",
    "abort_marked": True,
    "abort_reason": "r",
    "memos": {"m": 1},
    "memo_pages": 3,
    "signals": {"s/k": SignalSlot(version=1)},
    "streams": {"s/p": 4},
    "state": Running(checkpoint={"phase": "b"}),
    "created_at": 2.0,
    "restarts": 5,
    "rev": 6,
}
SLOT_OTHER: dict[str, Any] = {
    "version": 1,
    "value": "v",
    "has_value": True,
    "expired": True,
    "consumed": True,
    "failure": {"type": "t", "message": "m"},
}
SAMPLES = [(_record(), RECORD_OTHER), (SignalSlot(), SLOT_OTHER)]


def test_fields_in_order_keyword_only_with_the_dataclass_defaults() -> None:
    assert field_names(TaskRecord) == RECORD_FIELDS
    assert field_names(SignalSlot) == SLOT_FIELDS
    # dataclasses.fields() reads the same fields (code written for the dataclass may use it).
    assert tuple(f.name for f in dataclasses.fields(TaskRecord)) == RECORD_FIELDS
    assert TaskRecord.__match_args__ == () and SignalSlot.__match_args__ == ()  # kw_only
    with pytest.raises(TypeError):
        TaskRecord("t", "s", "k", 1, Pending(checkpoint={"phase": "a"}), 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        SignalSlot(1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        TaskRecord(id="t", session_id="s", kind="k", version=1, created_at=1.0)  # type: ignore[call-arg]
    record, other = _record(), _record()
    assert (record.input, record.owner, record.key, record.abort_reason) == (None,) * 4
    assert (record.background, record.abort_marked) == (False, False)
    assert (record.memo_pages, record.restarts, record.rev) == (0, 0, 0)
    # A fresh dict each, as the dataclass's default factories gave.
    for name in ("memos", "signals", "streams"):
        assert getattr(record, name) == {} and getattr(record, name) is not getattr(other, name)
    assert SignalSlot() == SignalSlot(
        version=None, value=None, has_value=False, expired=False, consumed=False, failure=None
    )


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=["TaskRecord", "SignalSlot"])
def test_equal_by_every_field_unhashable_printed_and_copied(
    value: Any, other: dict[str, Any]
) -> None:
    twin = value.replace()
    assert twin == value and twin is not value and not twin != value  # noqa: SIM202 - __ne__ too
    for name, changed in other.items():
        different = value.replace(**{name: changed})
        assert getattr(different, name) == changed
        assert different != value and value != different, name
        assert dataclasses.replace(value, **{name: changed}) == different
    with pytest.raises(TypeError, match="'nope'"):
        value.replace(nope=1)
    with pytest.raises(TypeError):
        hash(value)  # as a dataclass with eq and not frozen
    assert not hasattr(value, "__dict__")
    with pytest.raises(AttributeError):
        value.unknown = 1
    shown = ", ".join(f"{n}={getattr(value, n)!r}" for n in other)
    assert repr(value) == f"{type(value).__qualname__}({shown})"  # as the dataclass printed it
    for copied in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert type(copied) is type(value) and copied == value


def test_a_record_round_trips_its_stored_form() -> None:
    record = _record(**RECORD_OTHER)
    again = TaskRecord.from_json(record.to_json())
    assert again == record and again.to_json() == record.to_json()
    assert dataclasses.asdict(record)["signals"] == {
        "s/k": dataclasses.asdict(SignalSlot(version=1))
    }
