"""Task states, wake reasons and outcomes, as data.

Every value here is frozen (keyword arguments only, slots; :mod:`bide.engine.values` says why
these are not ``@dataclass`` classes, which they behave as): equal when its fields
are, hashable when they are, immutable. Its stored JSON form is :meth:`to_dict`; the
``*_from_dict`` functions of :mod:`bide.engine.state_forms` read one back strictly
(:class:`~bide.engine.forms.FormError` for an unknown field, a missing one or a wrong type,
naming it). A state a phase builds is checked the
same way when it is built. Allowed transitions are a table (:data:`PHASE_TRANSITIONS`), checked
in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from . import forms
from .forms import FormError
from .signals import SignalKey
from .values import FrozenValue, frozen_value

JsonValue = Any
Checkpoint = dict[str, Any]


_set = object.__setattr__  # a frozen value's own normalizing, at build


class _Value(FrozenValue):
    """What every state, wake reason and outcome shares: its repr names its tag first, as
    the models of earlier versions printed it (``WakeExpired(reason='expired')``,
    ``Completed(status='completed', result=1)``), so logs and printed values read the same."""

    __slots__ = ()

    def __repr__(self) -> str:
        cls = type(self)
        tag = "status" if isinstance(getattr(cls, "status", None), str) else "reason"
        parts = [f"{tag}={getattr(cls, tag)!r}"]
        parts += [f"{name}={getattr(self, name)!r}" for name in self._names]
        return f"{cls.__name__}({', '.join(parts)})"


# --- why parked work runs again -------------------------------------------------------------


@frozen_value
class WakeTime(_Value):
    """``until`` was reached by a sleep that listed no signals, or by one with
    ``expire_on_deadline=False`` (its keys stay open)."""

    __slots__ = ()
    reason: ClassVar[Literal["time"]] = "time"

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "time"}


@frozen_value
class WakeExpired(_Value):
    """``until`` was reached before any listed signal arrived; the open keys are now expired."""

    __slots__ = ()
    reason: ClassVar[Literal["expired"]] = "expired"

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "expired"}


@frozen_value
class WakeHeartbeat(_Value):
    """A sleep with a ``heartbeat`` got no beat by ``missed_at`` (its ``beat_by``), before
    ``until`` and before any listed signal: the open keys are now expired, as for
    :class:`WakeExpired`."""

    __slots__ = ("missed_at",)
    reason: ClassVar[Literal["heartbeat"]] = "heartbeat"
    missed_at: float

    def __init__(self, *, missed_at: float) -> None:
        _set(self, "missed_at", forms.number(missed_at, "missed_at"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "heartbeat", "missed_at": self.missed_at}


@frozen_value
class WakeSignal(_Value):
    """The named key holds a value (read it with ``read_signal``); the key is now consumed."""

    __slots__ = ("key", "signal")
    reason: ClassVar[Literal["signal"]] = "signal"
    signal: str
    key: str

    def __init__(self, *, signal: str, key: str) -> None:
        _set(self, "signal", forms.text(signal, "signal"))
        _set(self, "key", forms.text(key, "key"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "signal", "signal": self.signal, "key": self.key}


@frozen_value
class WakeTasks(_Value):
    """Tasks waited on ended; ``ended`` lists every member that is terminal at the wake."""

    __slots__ = ("ended",)
    reason: ClassVar[Literal["tasks"]] = "tasks"
    ended: tuple[str, ...]

    def __init__(self, *, ended: Sequence[str]) -> None:
        _set(self, "ended", forms.names(ended, "ended"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "tasks", "ended": list(self.ended)}


WakeReason = WakeTime | WakeExpired | WakeHeartbeat | WakeSignal | WakeTasks


# --- outcomes --------------------------------------------------------------------------------


@frozen_value
class Completed(_Value):
    """The task finished with a result."""

    __slots__ = ("result",)
    status: ClassVar[Literal["completed"]] = "completed"
    result: JsonValue

    def __init__(self, *, result: JsonValue = None) -> None:
        _set(self, "result", result)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "completed", "result": self.result}


@frozen_value
class Failed(_Value):
    """The task's own logic decided it failed."""

    __slots__ = ("error",)
    status: ClassVar[Literal["failed"]] = "failed"
    error: JsonValue

    def __init__(self, *, error: JsonValue = None) -> None:
        _set(self, "error", error)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "failed", "error": self.error}


@frozen_value
class Aborted(_Value):
    """The task was aborted and its abort handler ended it (``result``: what it reported)."""

    __slots__ = ("reason", "result")
    status: ClassVar[Literal["aborted"]] = "aborted"
    reason: str | None
    result: JsonValue

    def __init__(self, *, reason: str | None = None, result: JsonValue = None) -> None:
        _set(self, "reason", forms.maybe_text(reason, "reason"))
        _set(self, "result", result)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "aborted", "reason": self.reason, "result": self.result}


@frozen_value
class Orphaned(_Value):
    """No definition could run the task (unknown kind or version)."""

    __slots__ = ("reason",)
    status: ClassVar[Literal["orphaned"]] = "orphaned"
    reason: str

    def __init__(self, *, reason: str) -> None:
        _set(self, "reason", forms.text(reason, "reason"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "orphaned", "reason": self.reason}


@frozen_value
class Faulted(_Value):
    """The engine ended the task: an uncaught error, no durable progress, or a restart limit."""

    __slots__ = ("error",)
    status: ClassVar[Literal["faulted"]] = "faulted"
    error: str

    def __init__(self, *, error: str) -> None:
        _set(self, "error", forms.text(error, "error"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "faulted", "error": self.error}


Outcome = Completed | Failed | Aborted | Orphaned | Faulted


# --- states ----------------------------------------------------------------------------------


def _checkpoint(value: Any) -> Checkpoint:
    # A phase name is short for {"phase": name}; a dict is copied, so the caller's own dict
    # changing later does not change the state.
    if type(value) is dict and type(value.get("phase")) is str:
        return dict(value)  # a stored one (keys are strings: JSON's are)
    if isinstance(value, str):
        return {"phase": forms.text(value, "checkpoint")}
    if type(value) is not dict or not isinstance(value.get("phase"), str):
        raise FormError(
            "checkpoint", "a checkpoint is a phase name or a dict with a string 'phase'"
        )
    return dict(forms.mapping(value, "checkpoint"))


def _wake(value: Any) -> WakeReason | None:
    if value is None or isinstance(value, WakeReasons):
        return value
    raise FormError("wake", f"must be a wake reason or None, got {type(value).__name__}")


@frozen_value
class Pending(_Value):
    """Runnable: the scheduler will run the checkpoint's phase."""

    __slots__ = ("checkpoint", "wake")
    status: ClassVar[Literal["pending"]] = "pending"
    checkpoint: Checkpoint
    wake: WakeReason | None

    def __init__(self, *, checkpoint: Checkpoint | str, wake: WakeReason | None = None) -> None:
        _set(self, "checkpoint", _checkpoint(checkpoint))
        _set(self, "wake", _wake(wake))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        wake = None if self.wake is None else self.wake.to_dict()
        return {"status": "pending", "checkpoint": self.checkpoint, "wake": wake}


@frozen_value
class Running(_Value):
    """An invocation holds the task. ``invocation`` names the holder (set by the engine);
    ``lease_until`` (a clock time, or None without a lease) is when another harness may
    take the task over as abandoned: until then it is presumed running elsewhere."""

    __slots__ = ("checkpoint", "invocation", "lease_until", "wake")
    status: ClassVar[Literal["running"]] = "running"
    checkpoint: Checkpoint
    wake: WakeReason | None
    invocation: str | None
    lease_until: float | None

    def __init__(
        self,
        *,
        checkpoint: Checkpoint | str,
        wake: WakeReason | None = None,
        invocation: str | None = None,
        lease_until: float | None = None,
    ) -> None:
        _set(self, "checkpoint", _checkpoint(checkpoint))
        _set(self, "wake", _wake(wake))
        _set(self, "invocation", forms.maybe_text(invocation, "invocation"))
        _set(self, "lease_until", forms.maybe_number(lease_until, "lease_until"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "status": "running",
            "checkpoint": self.checkpoint,
            "wake": None if self.wake is None else self.wake.to_dict(),
            "invocation": self.invocation,
            "lease_until": self.lease_until,
        }


_POLICIES = ("fail_fast", "all_settled", "any")


@frozen_value
class Waiting(_Value):
    """Parked until tasks end: all of them (``all_settled``), all or the first failure
    (``fail_fast``), or the first of them (``any``)."""

    __slots__ = ("checkpoint", "on", "policy")
    status: ClassVar[Literal["waiting"]] = "waiting"
    checkpoint: Checkpoint
    on: tuple[str, ...]
    policy: Literal["fail_fast", "all_settled", "any"]

    def __init__(
        self,
        *,
        checkpoint: Checkpoint | str,
        on: Sequence[str],
        policy: Literal["fail_fast", "all_settled", "any"] = "all_settled",
    ) -> None:
        _set(self, "checkpoint", _checkpoint(checkpoint))
        _set(self, "on", forms.names(on, "on"))
        if not isinstance(policy, str) or policy not in _POLICIES:
            raise FormError("policy", f"must be one of {', '.join(_POLICIES)}, got {policy!r}")
        _set(self, "policy", forms.text(policy, "policy"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "status": "waiting",
            "checkpoint": self.checkpoint,
            "on": list(self.on),
            "policy": self.policy,
        }


def _signal_keys(value: Any) -> tuple[SignalKey[Any], ...]:
    if type(value) is tuple and all(type(k) is SignalKey for k in value):
        return value  # already checked: built by this module's reader, or copied from a state
    if not isinstance(value, list | tuple):
        raise FormError("signals", f"must be a list of signal keys, got {type(value).__name__}")
    for i, key in enumerate(value):
        if not isinstance(key, SignalKey):
            raise FormError(f"signals.{i}", f"must be a signal key, got {type(key).__name__}")
        if type(key.signal) is not str or type(key.key) is not str:
            raise FormError(f"signals.{i}", "a signal key's signal and key are strings")
    return tuple(value)


@frozen_value
class Sleeping(_Value):
    """Parked until a time, the first listed key that holds a value, or whichever comes first.

    ``heartbeat`` (seconds, with at least one listed key): the sender must beat at least that
    often (:mod:`bide.engine.heartbeats`); ``beat_by`` is when the next beat is due, set by
    the engine when the sleep parks and moved by each beat (a phase's own value is ignored).
    A missed beat wakes the task with :class:`WakeHeartbeat`; ``until`` stays the hard
    deadline (:class:`WakeExpired`).

    ``expire_on_deadline=False`` (no heartbeat): the deadline wakes the task with
    :class:`WakeTime` and leaves the listed keys open, so a value that comes later is still
    delivered (and read by a later wait on the key); used by workflow races, whose losers stay
    usable."""

    __slots__ = ("beat_by", "checkpoint", "expire_on_deadline", "heartbeat", "signals", "until")
    status: ClassVar[Literal["sleeping"]] = "sleeping"
    checkpoint: Checkpoint
    until: float | None
    signals: tuple[SignalKey[Any], ...]
    heartbeat: float | None
    beat_by: float | None
    expire_on_deadline: bool

    def __init__(
        self,
        *,
        checkpoint: Checkpoint | str,
        until: float | None = None,
        signals: Sequence[SignalKey[Any]] = (),
        heartbeat: float | None = None,
        beat_by: float | None = None,
        expire_on_deadline: bool = True,
    ) -> None:
        _set(self, "checkpoint", _checkpoint(checkpoint))
        if until is not None and type(until) is not float:
            until = forms.number(until, "until")
        _set(self, "until", until)
        _set(self, "signals", _signal_keys(signals) if signals else ())
        if heartbeat is not None:
            heartbeat = forms.number(heartbeat, "heartbeat")
            if not 0 < heartbeat < float("inf"):
                why = f"must be a finite number of seconds > 0, got {heartbeat}"
                raise FormError("heartbeat", why)
        _set(self, "heartbeat", heartbeat)
        _set(self, "beat_by", forms.maybe_number(beat_by, "beat_by"))
        _set(self, "expire_on_deadline", forms.flag(expire_on_deadline, "expire_on_deadline"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form. The heartbeat and race fields are written only when set: a sleep
        without them is stored exactly as before they existed, so a process of an earlier
        version (which refuses unknown fields) still reads it during a rolling deploy."""
        out: dict[str, Any] = {
            "status": "sleeping",
            "checkpoint": self.checkpoint,
            "until": self.until,
            "signals": [{"signal": k.signal, "key": k.key} for k in self.signals],
        }
        if self.heartbeat is not None:
            out["heartbeat"] = self.heartbeat
        if self.beat_by is not None:
            out["beat_by"] = self.beat_by
        if not self.expire_on_deadline:
            out["expire_on_deadline"] = False
        return out

    @property
    def deadline(self) -> float | None:
        """The earliest time this sleep wakes without a value: ``until`` or ``beat_by``."""
        # Read for every parked task each time the scheduler looks for work: no list built.
        until, beat_by = self.until, self.beat_by
        if beat_by is None:
            return until
        return beat_by if until is None or beat_by < until else until


def _outcome(value: Any) -> None:
    if not isinstance(value, Outcomes):
        raise FormError("outcome", f"must be an outcome, got {type(value).__name__}")


@frozen_value
class Completing(_Value):
    """Finished, holding its outcome, while work it owns is still live."""

    __slots__ = ("outcome",)
    status: ClassVar[Literal["completing"]] = "completing"
    outcome: Outcome

    def __init__(self, *, outcome: Outcome) -> None:
        _outcome(outcome)
        _set(self, "outcome", outcome)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "completing", "outcome": self.outcome.to_dict()}


@frozen_value
class Terminal(_Value):
    """Ended for good."""

    __slots__ = ("outcome",)
    status: ClassVar[Literal["terminal"]] = "terminal"
    outcome: Outcome

    def __init__(self, *, outcome: Outcome) -> None:
        _outcome(outcome)
        _set(self, "outcome", outcome)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "terminal", "outcome": self.outcome.to_dict()}


TaskState = Pending | Running | Waiting | Sleeping | Completing | Terminal

WakeReasons = (WakeTime, WakeExpired, WakeHeartbeat, WakeSignal, WakeTasks)
"""The wake reason classes (for ``isinstance``)."""
Outcomes = (Completed, Failed, Aborted, Orphaned, Faulted)
"""The outcome classes (for ``isinstance``)."""
TaskStates = (Pending, Running, Waiting, Sleeping, Completing, Terminal)
"""The state classes (for ``isinstance``)."""

PARKED = ("waiting", "sleeping")
ENDED = ("terminal",)
HOLDS_OUTCOME = ("completing", "terminal")

# What a phase (or an abort handler) may commit from ``running``. The scheduler's own moves
# (reserve, restart, settle completing) are in :mod:`bide.engine.rules` and not open to phases.
PHASE_TRANSITIONS: dict[str, frozenset[str]] = {
    "running": frozenset({"pending", "running", "waiting", "sleeping", "terminal"}),
}
