"""Cheap bases for small values: the task states, wake reasons and outcomes, the signal keys,
the settings, the store's snapshots, a function's deps.

* :class:`FrozenValue`: as a ``@dataclass(frozen=True, slots=True)`` class was: equal when of
  the same class with equal fields, hashed by its fields, assignment and deletion raise
  :class:`dataclasses.FrozenInstanceError`.
* :class:`Value`: as a ``@dataclass(slots=True)`` class was: equal as above, unhashable,
  fields assignable.

Both print as a dataclass does, copy and pickle to an equal value, and have
:meth:`Value.replace` (a copy with some fields changed, built through ``__init__`` so its
checks run again, as :func:`dataclasses.replace` did). Why not ``@dataclass``: it compiles
generated source for each class when the module is imported (about half a millisecond per
class), and these classes sit on every Lambda function's cold import path. Here the methods
are written once, generically over the fields; each class writes its own ``__init__`` (a
frozen one sets fields with ``object.__setattr__``) and is decorated with :func:`value_class`
(also named :func:`frozen_value`), which reads the field list from the class's annotations
and the defaults from its ``__init__``. :func:`field_names` and :func:`field_defaults` read
them back.

:func:`dataclasses.fields` and :func:`dataclasses.replace` still work on these classes (code
written for the dataclasses they were, and callers outside this package, may use them): the
table they read is built on its first use only, so importing costs nothing for it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar, TypeVar

_V = TypeVar("_V", bound="Value")
_Self = TypeVar("_Self", bound="Value")


class _DataclassFields:
    """``cls.__dataclass_fields__``, built on first read (by :func:`dataclasses.fields` or
    :func:`dataclasses.replace`) and kept on the class."""

    def __get__(self, instance: object, owner: type[Value]) -> dict[str, dataclasses.Field[Any]]:
        table = owner.__dict__.get("_dataclass_table")
        if table is None:
            table = _dataclass_table(owner)
            owner._dataclass_table = table
        return table


class Value:
    """Equality, a dataclass's repr, pickling and :meth:`replace` over the class's fields.
    Not hashable (as a dataclass with ``eq`` and not frozen): its fields may change."""

    __slots__ = ()
    __hash__: ClassVar[None] = None  # type: ignore[assignment]
    _names: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _positional: ClassVar[tuple[str, ...]] = ()
    _dataclass_table: ClassVar[dict[str, dataclasses.Field[Any]] | None] = None
    __dataclass_fields__: ClassVar[Any] = _DataclassFields()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = self._names
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names)
        return f"{type(self).__qualname__}({fields})"

    def __getstate__(self) -> list[Any]:
        return [getattr(self, n) for n in self._names]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(self._names, state, strict=True):
            object.__setattr__(self, name, value)

    def replace(self: _Self, **changes: Any) -> _Self:
        """A copy with ``changes`` to its fields, built by the class's ``__init__`` (its
        checks run on the new values). TypeError naming a field the class does not have."""
        unknown = sorted(set(changes) - set(self._names))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {unknown[0]!r}")
        given = {n: getattr(self, n) for n in self._names}
        given.update(changes)
        return type(self)(**given)


class FrozenValue(Value):
    """A :class:`Value` that is immutable and hashed by its fields."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(getattr(self, n) for n in self._names))

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def value_class(cls: type[_V]) -> type[_V]:
    """Record ``cls``'s fields where the base class reads them: its annotated attributes
    other than ``ClassVar``, in the order written (as a dataclass's are: the repr follows
    it), with the defaults of its ``__init__`` (positional fields are also its
    ``__match_args__``). Every field must be one of the class's own ``__slots__``; any other
    slot must be private (``_name``: a cache, not compared, hashed or pickled)."""
    annotations = inspect.get_annotations(cls)
    names = tuple(n for n, t in annotations.items() if not _is_class_var(t))
    slots = set(cls.__dict__["__slots__"])
    if not set(names) <= slots or any(not s.startswith("_") for s in slots - set(names)):
        raise TypeError(f"{cls.__name__}.__slots__ must list its fields {names}")
    init = cls.__init__
    code = getattr(init, "__code__", None)  # None: object's own, for a class without fields
    positional = () if code is None else code.co_varnames[1 : code.co_argcount]
    given = getattr(init, "__defaults__", None) or ()
    defaults = dict(zip(positional[len(positional) - len(given) :], given, strict=True))
    defaults.update(getattr(init, "__kwdefaults__", None) or {})
    cls._names = names
    cls._defaults = {n: defaults[n] for n in names if n in defaults}
    cls._positional = tuple(n for n in positional if n in names)
    # As a dataclass's: the positional fields, for `case Cls(a, b)`.
    cls.__match_args__ = cls._positional  # type: ignore[attr-defined,misc]
    return cls


frozen_value = value_class
"""The name the states use (the same decorator)."""


def field_names(cls: type[Value] | Value) -> tuple[str, ...]:
    """The fields of a value class (or of a value's class), in the order written."""
    return cls._names


def field_defaults(cls: type[Value] | Value) -> dict[str, Any]:
    """The fields that have a default, with it (the others are required)."""
    return dict(cls._defaults)


# dataclasses.fields() and replace() keep only entries marked with this (a private name, the
# same object since Python 3.7); read only when the table is first built.
def _dataclass_table(cls: type[Value]) -> dict[str, dataclasses.Field[Any]]:
    mark = getattr(dataclasses, "_FIELD")  # noqa: B009 - a private name, read on purpose
    annotations = inspect.get_annotations(cls)
    table: dict[str, dataclasses.Field[Any]] = {}
    for name in cls._names:
        field: dataclasses.Field[Any] = dataclasses.field(
            default=cls._defaults.get(name, dataclasses.MISSING),
            kw_only=name not in cls._positional,
        )
        field.name, field.type = name, annotations.get(name)
        field._field_type = mark  # type: ignore[attr-defined]
        table[name] = field
    return table


def _is_class_var(annotation: Any) -> bool:
    # Annotations are strings under ``from __future__ import annotations``.
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar[", "typing.ClassVar["))
    return getattr(annotation, "__origin__", annotation) is ClassVar
