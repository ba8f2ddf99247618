"""Task states, wake reasons and outcomes, as data.

Every value here is a frozen dataclass (keyword arguments only, slots): equal when its fields
are, hashable when they are, immutable. Its stored JSON form is :meth:`to_dict`; the
``*_from_dict`` functions of :mod:`bide.engine.state_forms` read one back strictly
(:class:`~bide.engine.forms.FormError` for an unknown field, a missing one or a wrong type,
naming it). A state a phase builds is checked the
same way when it is built. Allowed transitions are a table (:data:`PHASE_TRANSITIONS`), checked
in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from . import forms
from .forms import FormError
from .signals import SignalKey

JsonValue = Any
Checkpoint = dict[str, Any]


_set = object.__setattr__  # a frozen dataclass's own normalizing, at build


class _Value:
    """What every state, wake reason and outcome shares: its repr names its tag first, as
    the models of earlier versions printed it (``WakeExpired(reason='expired')``,
    ``Completed(status='completed', result=1)``), so logs and printed values read the same."""

    __slots__ = ()

    def __repr__(self) -> str:
        cls = type(self)
        tag = "status" if isinstance(getattr(cls, "status", None), str) else "reason"
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        parts = [f"{tag}={getattr(cls, tag)!r}"]
        parts += [f"{f.name}={getattr(self, f.name)!r}" for f in fields]
        return f"{cls.__name__}({', '.join(parts)})"


# --- why parked work runs again -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WakeTime(_Value):
    """``until`` was reached by a sleep that listed no signals, or by one with
    ``expire_on_deadline=False`` (its keys stay open)."""

    reason: ClassVar[Literal["time"]] = "time"

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "time"}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WakeExpired(_Value):
    """``until`` was reached before any listed signal arrived; the open keys are now expired."""

    reason: ClassVar[Literal["expired"]] = "expired"

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "expired"}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WakeHeartbeat(_Value):
    """A sleep with a ``heartbeat`` got no beat by ``missed_at`` (its ``beat_by``), before
    ``until`` and before any listed signal: the open keys are now expired, as for
    :class:`WakeExpired`."""

    reason: ClassVar[Literal["heartbeat"]] = "heartbeat"
    missed_at: float

    def __post_init__(self) -> None:
        _set(self, "missed_at", forms.number(self.missed_at, "missed_at"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "heartbeat", "missed_at": self.missed_at}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WakeSignal(_Value):
    """The named key holds a value (read it with ``read_signal``); the key is now consumed."""

    reason: ClassVar[Literal["signal"]] = "signal"
    signal: str
    key: str

    def __post_init__(self) -> None:
        _set(self, "signal", forms.text(self.signal, "signal"))
        _set(self, "key", forms.text(self.key, "key"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "signal", "signal": self.signal, "key": self.key}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WakeTasks(_Value):
    """Tasks waited on ended; ``ended`` lists every member that is terminal at the wake."""

    reason: ClassVar[Literal["tasks"]] = "tasks"
    ended: tuple[str, ...]

    def __post_init__(self) -> None:
        _set(self, "ended", forms.names(self.ended, "ended"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"reason": "tasks", "ended": list(self.ended)}


WakeReason = WakeTime | WakeExpired | WakeHeartbeat | WakeSignal | WakeTasks


# --- outcomes --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Completed(_Value):
    """The task finished with a result."""

    status: ClassVar[Literal["completed"]] = "completed"
    result: JsonValue = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "completed", "result": self.result}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Failed(_Value):
    """The task's own logic decided it failed."""

    status: ClassVar[Literal["failed"]] = "failed"
    error: JsonValue = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "failed", "error": self.error}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Aborted(_Value):
    """The task was aborted and its abort handler ended it (``result``: what it reported)."""

    status: ClassVar[Literal["aborted"]] = "aborted"
    reason: str | None = None
    result: JsonValue = None

    def __post_init__(self) -> None:
        _set(self, "reason", forms.maybe_text(self.reason, "reason"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "aborted", "reason": self.reason, "result": self.result}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Orphaned(_Value):
    """No definition could run the task (unknown kind or version)."""

    status: ClassVar[Literal["orphaned"]] = "orphaned"
    reason: str

    def __post_init__(self) -> None:
        _set(self, "reason", forms.text(self.reason, "reason"))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "orphaned", "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Faulted(_Value):
    """The engine ended the task: an uncaught error, no durable progress, or a restart limit."""

    status: ClassVar[Literal["faulted"]] = "faulted"
    error: str

    def __post_init__(self) -> None:
        _set(self, "error", forms.text(self.error, "error"))

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


@dataclass(frozen=True, slots=True, init=False, repr=False)
class Pending(_Value):
    """Runnable: the scheduler will run the checkpoint's phase."""

    status: ClassVar[Literal["pending"]] = "pending"
    checkpoint: Checkpoint
    wake: WakeReason | None = None

    def __init__(self, *, checkpoint: Checkpoint | str, wake: WakeReason | None = None) -> None:
        _set(self, "checkpoint", _checkpoint(checkpoint))
        _set(self, "wake", _wake(wake))

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        wake = None if self.wake is None else self.wake.to_dict()
        return {"status": "pending", "checkpoint": self.checkpoint, "wake": wake}


@dataclass(frozen=True, slots=True, init=False, repr=False)
class Running(_Value):
    """An invocation holds the task. ``invocation`` names the holder (set by the engine);
    ``lease_until`` (a clock time, or None without a lease) is when another harness may
    take the task over as abandoned: until then it is presumed running elsewhere."""

    status: ClassVar[Literal["running"]] = "running"
    checkpoint: Checkpoint
    wake: WakeReason | None = None
    invocation: str | None = None
    lease_until: float | None = None

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


@dataclass(frozen=True, slots=True, init=False, repr=False)
class Waiting(_Value):
    """Parked until tasks end: all of them (``all_settled``), all or the first failure
    (``fail_fast``), or the first of them (``any``)."""

    status: ClassVar[Literal["waiting"]] = "waiting"
    checkpoint: Checkpoint
    on: tuple[str, ...]
    policy: Literal["fail_fast", "all_settled", "any"] = "all_settled"

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


@dataclass(frozen=True, slots=True, init=False, repr=False)
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

    status: ClassVar[Literal["sleeping"]] = "sleeping"
    checkpoint: Checkpoint
    until: float | None = None
    signals: tuple[SignalKey[Any], ...] = ()
    heartbeat: float | None = None
    beat_by: float | None = None
    expire_on_deadline: bool = True

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


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Completing(_Value):
    """Finished, holding its outcome, while work it owns is still live."""

    status: ClassVar[Literal["completing"]] = "completing"
    outcome: Outcome

    def __post_init__(self) -> None:
        _outcome(self.outcome)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {"status": "completing", "outcome": self.outcome.to_dict()}


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Terminal(_Value):
    """Ended for good."""

    status: ClassVar[Literal["terminal"]] = "terminal"
    outcome: Outcome

    def __post_init__(self) -> None:
        _outcome(self.outcome)

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
