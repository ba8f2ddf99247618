"""What the rules of :mod:`bide.engine.rules` decide, as values: a signal delivery's
:class:`SignalDecision`, a parked task's :class:`Wakeup` and a session's :class:`Wake`
(import them from :mod:`bide.engine.rules`, where they are decided)."""

from __future__ import annotations

from collections.abc import Mapping

from .records import SignalSlot, TaskRecord
from .signals import SignalResult
from .state import WakeReason
from .values import FrozenValue, value_class

_set = object.__setattr__  # a frozen value's fields, at build


@value_class
class SignalDecision(FrozenValue):
    """What a delivery does: the result, the record to write (delivered only), and for
    ``invalid`` which fields failed and why."""

    __slots__ = ("errors", "record", "result")
    result: SignalResult
    record: TaskRecord | None
    errors: tuple[dict[str, str], ...]

    def __init__(
        self,
        result: SignalResult,
        record: TaskRecord | None = None,
        errors: tuple[dict[str, str], ...] = (),
    ) -> None:
        _set(self, "result", result)
        _set(self, "record", record)
        _set(self, "errors", errors)


@value_class
class Wakeup(FrozenValue):
    """A parked task that may run again: why, and its slots with the ones the wake consumes
    or expires marked so (the reservation moves final slots off the record)."""

    __slots__ = ("signals", "wake")
    wake: WakeReason
    signals: Mapping[str, SignalSlot]

    def __init__(self, wake: WakeReason, signals: Mapping[str, SignalSlot]) -> None:
        _set(self, "wake", wake)
        _set(self, "signals", signals)


@value_class
class Wake(FrozenValue):
    """Whether the session must keep running now, and when it must run next otherwise.

    ``active``: something is runnable (or running). ``at``: the earliest deadline of a
    sleep, or None. A session parked only on signals is neither active nor has an ``at``.
    """

    __slots__ = ("active", "at")
    active: bool
    at: float | None

    def __init__(self, active: bool, at: float | None) -> None:
        _set(self, "active", active)
        _set(self, "at", at)
