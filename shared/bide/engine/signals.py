"""Typed signals: a JSON value delivered from outside to a live task, under a key.

A :class:`SignalToken` names a kind of signal, versions it and gives it a schema (a pydantic
model or any type pydantic can validate). ``token.key("done")`` names one wait.

pydantic is imported by the functions that use a schema (:func:`define_signal`, a token's
``validate`` and ``dump``), not with this module: the engine's own modules, which import this
one, are on every Lambda function's import path, and pydantic's import is a large part of a cold
start (docs/performance.md, section d).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import DefinitionError
from .failures import SignalFailed
from .limits import ENVELOPE_DEPTH, ValueRefused
from .values import FrozenValue, value_class

if TYPE_CHECKING:
    from pydantic import TypeAdapter

T = TypeVar("T")

_set = object.__setattr__  # a frozen value's fields, at build


class SignalResult(enum.StrEnum):
    """What :meth:`Harness.signal` did with a value, checked in this order:

    ``not_found`` (no such task), ``closed`` (task ended, ending or abort-marked),
    ``invalid`` (value fails the schema, or a :class:`~bide.engine.failures.SignalFailure` is
    malformed; nothing stored), ``duplicate`` (the key already holds a value or a failure;
    the first is kept), ``closed`` (the key expired, or the deadline of a
    sleep on it passed), ``delivered`` (stored).
    """

    DELIVERED = "delivered"
    DUPLICATE = "duplicate"
    INVALID = "invalid"
    CLOSED = "closed"
    NOT_FOUND = "not_found"


@value_class
class SignalKey(FrozenValue, Generic[T]):
    """Names one wait: the signal's name and a key chosen by the waiter."""

    __slots__ = ("_slot", "key", "signal")
    signal: str
    key: str

    def __init__(self, signal: str, key: str) -> None:
        _set(self, "signal", signal)
        _set(self, "key", key)

    @property
    def slot(self) -> str:
        """The name this key is stored under on the task (computed once: the scheduler reads
        it for every parked task each time it looks for work)."""
        cached: str | None = getattr(self, "_slot", None)  # a private slot: not a field
        if cached is None:
            cached = slot_name(self.signal, self.key)
            _set(self, "_slot", cached)
        return cached


@value_class
class SignalValue(FrozenValue, Generic[T]):
    """A key's state once a value arrived."""

    __slots__ = ("value",)
    value: T

    def __init__(self, value: T) -> None:
        _set(self, "value", value)


@value_class
class SignalExpired(FrozenValue):
    """A key's state once a sleep's deadline passed before any value arrived."""

    __slots__ = ("expired",)
    expired: bool

    def __init__(self, expired: bool = True) -> None:
        _set(self, "expired", expired)


SignalState = SignalValue[T] | SignalFailed | SignalExpired
"""What ``read_signal`` returns for a key that holds something (None while nothing came)."""


@value_class
class SignalToken(FrozenValue, Generic[T]):
    """A signal's name, version and schema. Build one with :func:`define_signal`. Equal
    only to itself (two definitions are two tokens)."""

    __slots__ = ("__weakref__", "_adapter", "envelope", "migrate", "name", "schema", "version")
    name: str
    version: int
    schema: Any
    migrate: Callable[[Any, int], Any] | None
    # A pydantic TypeAdapter, typed Any here: pydantic is not imported with this module, and
    # a class's annotations must resolve without it (typing.get_type_hints).
    _adapter: Any
    envelope: int
    """Levels the schema wraps around a caller's value (see :func:`define_signal`)."""

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(
        self,
        name: str,
        version: int,
        schema: Any,
        migrate: Callable[[Any, int], Any] | None = None,
        _adapter: Any = None,
        envelope: int = 0,
    ) -> None:
        _set(self, "name", name)
        _set(self, "version", version)
        _set(self, "schema", schema)
        _set(self, "migrate", migrate)
        _set(self, "_adapter", _adapter)
        _set(self, "envelope", envelope)

    def __repr__(self) -> str:  # the adapter left out, as its dataclass field was
        return (
            f"SignalToken(name={self.name!r}, version={self.version!r}, schema={self.schema!r},"
            f" migrate={self.migrate!r}, envelope={self.envelope!r})"
        )

    def key(self, key: str) -> SignalKey[T]:
        """The key of one wait for this signal."""
        if not isinstance(key, str) or not key:
            raise DefinitionError(f"signal {self.name!r}: a key must be a non-empty string")
        return SignalKey(self.name, key)

    def validate(self, value: Any) -> T:
        """Check ``value`` against the schema; raises :class:`InvalidSignalValue`."""
        from pydantic import ValidationError  # on first use (see the module's docstring)

        try:
            # The adapter's validator itself: its validate_python() only forwards the
            # defaults, and a replay validates every value it passes.
            return self._require_adapter().validator.validate_python(value)  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise InvalidSignalValue(self.name, exc) from None

    def dump(self, value: Any) -> Any:
        """The JSON form of a validated value, as stored on the task. Raises
        :class:`~bide.engine.limits.ValueRefused` for a string that is not Unicode text (a
        lone surrogate: no store can encode it)."""
        try:
            return self._require_adapter().dump_python(value, mode="json")
        except UnicodeEncodeError as exc:
            raise ValueRefused(
                f"a value of signal {self.name!r}", f"is not JSON text ({exc.reason})"
            ) from None

    def _require_adapter(self) -> TypeAdapter[Any]:
        if self._adapter is None:
            raise DefinitionError(f"signal {self.name!r}: build tokens with define_signal()")
        adapter: TypeAdapter[Any] = self._adapter
        return adapter

    def load(self, stored: Any, stored_version: int) -> T:
        """Read a stored value, migrating it from an older version when needed."""
        if stored_version != self.version:
            if self.migrate is None or stored_version > self.version:
                raise DefinitionError(
                    f"signal {self.name!r}: stored version {stored_version} cannot be read "
                    f"by version {self.version} (no migrate function)"
                )
            stored = self.migrate(stored, stored_version)
        return self.validate(stored)


class InvalidSignalValue(ValueError):
    """A signal value failed its token's schema. Says which field and why."""

    def __init__(self, signal: str, error: Any) -> None:
        # ``error``: pydantic's ValidationError (typed Any: pydantic is imported on first use).
        self.signal = signal
        self.errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "(value)", "message": e["msg"]}
            for e in error.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in self.errors)
        super().__init__(f"signal {signal!r}: invalid value ({detail})")


def define_signal(
    name: str,
    version: int,
    schema: Any,
    migrate: Callable[[Any, int], Any] | None = None,
    *,
    envelope: int = 0,
) -> SignalToken[Any]:
    """Define a signal token.

    ``name`` is unique like a task kind and has no ``/``; ``schema`` is a pydantic model or
    any type pydantic validates; ``migrate(value, from_version)`` upgrades stored values
    written by an older version.

    A value nests at most :data:`~bide.engine.limits.MAX_JSON_DEPTH` levels and takes at most
    :data:`~bide.engine.limits.MAX_VALUE_BYTES` of JSON. ``envelope`` (at most
    :data:`~bide.engine.limits.ENVELOPE_DEPTH`) is for Bide's own tokens whose schema wraps a
    value already checked against those limits (a promise's outcome wraps its value once):
    that many levels, and :data:`~bide.engine.limits.ENVELOPE_BYTES`, are allowed on top.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise DefinitionError(f"signal name {name!r} must be a non-empty string without '/'")
    if not isinstance(version, int) or version < 1:
        raise DefinitionError(f"signal {name!r}: version must be an integer >= 1")
    if not isinstance(envelope, int) or not 0 <= envelope <= ENVELOPE_DEPTH:
        raise DefinitionError(f"signal {name!r}: envelope must be 0 to {ENVELOPE_DEPTH}")
    from pydantic import TypeAdapter  # on first use (see the module's docstring)

    try:
        adapter: TypeAdapter[Any] = TypeAdapter(schema)
    except Exception as exc:  # pydantic raises several types for unusable schemas
        raise DefinitionError(f"signal {name!r}: schema is not validatable: {exc}") from exc
    return SignalToken(
        name=name,
        version=version,
        schema=schema,
        migrate=migrate,
        _adapter=adapter,
        envelope=envelope,
    )


def slot_name(signal: str, key: str) -> str:
    """Where a key lives on a task: ``<signal>/<key>`` (signal names hold no ``/``)."""
    return f"{signal}/{key}"
