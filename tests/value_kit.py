"""What the value-class tests share (``test_value_classes``, ``test_frozen_values``): the
checks that a class of :mod:`bide.engine.values` behaves as the frozen dataclass it replaced,
each given one instance ``value`` and ``other``, every field's name (in the declared order)
with a second value that differs from the instance's."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from bide.engine.values import field_names


def hashable(*values: Any) -> bool:
    """True when every one of ``values`` hashes."""
    try:
        for value in values:
            hash(value)
    except TypeError:
        return False
    return True


def check_equal_and_hashed_by_every_field(value: Any, other: dict[str, Any]) -> None:
    """Equal to a copy of itself, unequal (both ways) to a copy with any one field changed
    (which keeps the rest), never equal to another type or to its fields' tuple; hashable
    exactly when every field is, as a frozen dataclass (its hash is theirs), and then hashed
    by every field."""
    twin = value.replace()
    assert twin == value and twin is not value and not twin != value  # noqa: SIM202 - __ne__ too
    assert hashable(value) is hashable(*(getattr(value, n) for n in other))
    if hashable(value):
        assert hash(twin) == hash(value)
    for name, changed in other.items():
        different = value.replace(**{name: changed})
        assert getattr(different, name) == changed
        assert all(getattr(different, n) == getattr(value, n) for n in other if n != name)
        assert different != value and value != different, name
        if hashable(value, different):
            assert hash(different) != hash(value), name
    assert value != object() and value != tuple(getattr(value, n) for n in field_names(value))


def check_frozen_and_slotted(value: Any, other: dict[str, Any]) -> None:
    """No ``__dict__``; setting or deleting any field, or a name that is none, raises
    ``FrozenInstanceError`` as a frozen dataclass's did."""
    assert not hasattr(value, "__dict__")
    for name in [*other, "unknown"]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(value, name)


def check_copies_and_pickles(value: Any, other: dict[str, Any]) -> None:
    """A shallow copy, a deep copy and a pickled round trip are each an equal value of the
    same class, field by field."""
    for twin in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert type(twin) is type(value) and twin == value
        assert [getattr(twin, n) for n in other] == [getattr(value, n) for n in other]
