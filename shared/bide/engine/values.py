"""A cheap base for small immutable values (the task states, wake reasons and outcomes).

They behave as ``@dataclass(frozen=True, slots=True, kw_only=True)`` classes did: equal when
of the same class with equal fields, hashed by their fields, assignment and deletion raise
:class:`dataclasses.FrozenInstanceError`, and :func:`dataclasses.fields` /
:func:`dataclasses.replace` still work on them. Why not ``@dataclass``: it compiles generated
source for each class when the module is imported (about half a millisecond per frozen class),
and these classes sit on every Lambda function's cold import path. Here the methods are
written once, generically over ``__slots__``; each class writes its own
``__init__`` (setting fields with ``object.__setattr__``) and is decorated with
:func:`frozen_value`, which records the field table from ``__slots__`` and the ``__init__``
defaults.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar, TypeVar

_V = TypeVar("_V", bound="FrozenValue")

# dataclasses.fields() and replace() keep only entries marked with this (private, but the
# same object since Python 3.7); without it they would see no fields at all.
_FIELD_MARK = getattr(dataclasses, "_FIELD")  # noqa: B009 - a private name, read on purpose


class FrozenValue:
    """Equality, hash, immutability, pickling and a dataclass's repr over the class's
    fields (its ``__slots__``)."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]] = {}
    _names: ClassVar[tuple[str, ...]] = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = self._names
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in self._names))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> list[Any]:
        return [getattr(self, n) for n in self._names]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(self._names, state, strict=True):
            object.__setattr__(self, name, value)


def frozen_value(cls: type[_V]) -> type[_V]:
    """Record ``cls``'s fields where the base class and :mod:`dataclasses` read them: its
    annotated attributes other than ``ClassVar``, in the order written (as a dataclass's
    are: the repr and :func:`dataclasses.fields` follow it), with the defaults of its
    ``__init__`` (positional fields are also its ``__match_args__``). They must be exactly
    the class's own ``__slots__``."""
    annotations = inspect.get_annotations(cls)
    names = tuple(n for n, t in annotations.items() if not _is_class_var(t))
    if set(names) != set(cls.__dict__["__slots__"]):
        raise TypeError(f"{cls.__name__}.__slots__ must list its fields {names}")
    init = cls.__init__
    code = getattr(init, "__code__", None)  # None: object's own, for a class without fields
    positional = () if code is None else code.co_varnames[1 : code.co_argcount]
    given = getattr(init, "__defaults__", None) or ()
    defaults = dict(zip(positional[len(positional) - len(given) :], given, strict=True))
    defaults.update(getattr(init, "__kwdefaults__", None) or {})
    table: dict[str, dataclasses.Field[Any]] = {}
    for name in names:
        field: dataclasses.Field[Any] = dataclasses.field(
            default=defaults.get(name, dataclasses.MISSING), kw_only=name not in positional
        )
        field.name, field.type = name, annotations[name]
        field._field_type = _FIELD_MARK  # type: ignore[attr-defined]
        table[name] = field
    cls.__dataclass_fields__ = table
    cls._names = names
    # As a dataclass's: the positional fields, for `case Cls(a, b)`.
    cls.__match_args__ = tuple(n for n in positional if n in table)  # type: ignore[attr-defined,misc]
    return cls


def _is_class_var(annotation: Any) -> bool:
    # Annotations are strings under ``from __future__ import annotations``.
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar[", "typing.ClassVar["))
    return getattr(annotation, "__origin__", annotation) is ClassVar
