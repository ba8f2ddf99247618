"""Task states, wake reasons and outcomes, as data.

Every value here is a frozen pydantic model whose JSON form is what the store keeps.
Allowed transitions are a table (:data:`PHASE_TRANSITIONS`), checked in one place.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from .signals import SignalKey

JsonValue = Any
Checkpoint = dict[str, Any]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- why parked work runs again -------------------------------------------------------------


class WakeTime(_Frozen):
    """``until`` was reached by a sleep that listed no signals, or by one with
    ``expire_on_deadline=False`` (its keys stay open)."""

    reason: Literal["time"] = "time"


class WakeExpired(_Frozen):
    """``until`` was reached before any listed signal arrived; the open keys are now expired."""

    reason: Literal["expired"] = "expired"


class WakeHeartbeat(_Frozen):
    """A sleep with a ``heartbeat`` got no beat by ``missed_at`` (its ``beat_by``), before
    ``until`` and before any listed signal: the open keys are now expired, as for
    :class:`WakeExpired`."""

    reason: Literal["heartbeat"] = "heartbeat"
    missed_at: float


class WakeSignal(_Frozen):
    """The named key holds a value (read it with ``read_signal``); the key is now consumed."""

    reason: Literal["signal"] = "signal"
    signal: str
    key: str


class WakeTasks(_Frozen):
    """Tasks waited on ended; ``ended`` lists every member that is terminal at the wake."""

    reason: Literal["tasks"] = "tasks"
    ended: tuple[str, ...]


WakeReason = Annotated[
    WakeTime | WakeExpired | WakeHeartbeat | WakeSignal | WakeTasks,
    Field(discriminator="reason"),
]


# --- outcomes --------------------------------------------------------------------------------


class Completed(_Frozen):
    """The task finished with a result."""

    status: Literal["completed"] = "completed"
    result: JsonValue = None


class Failed(_Frozen):
    """The task's own logic decided it failed."""

    status: Literal["failed"] = "failed"
    error: JsonValue = None


class Aborted(_Frozen):
    """The task was aborted and its abort handler ended it (``result``: what it reported)."""

    status: Literal["aborted"] = "aborted"
    reason: str | None = None
    result: JsonValue = None


class Orphaned(_Frozen):
    """No definition could run the task (unknown kind or version)."""

    status: Literal["orphaned"] = "orphaned"
    reason: str


class Faulted(_Frozen):
    """The engine ended the task: an uncaught error, no durable progress, or a restart limit."""

    status: Literal["faulted"] = "faulted"
    error: str


Outcome = Annotated[
    Completed | Failed | Aborted | Orphaned | Faulted, Field(discriminator="status")
]


# --- states ----------------------------------------------------------------------------------


def _checkpoint(value: Any) -> Checkpoint:
    if isinstance(value, str):
        return {"phase": value}
    if not isinstance(value, dict) or not isinstance(value.get("phase"), str):
        raise ValueError("a checkpoint is a phase name or a dict with a string 'phase'")
    return value


class Pending(_Frozen):
    """Runnable: the scheduler will run the checkpoint's phase."""

    status: Literal["pending"] = "pending"
    checkpoint: Checkpoint
    wake: WakeReason | None = None

    _c = field_validator("checkpoint", mode="before")(_checkpoint)


class Running(_Frozen):
    """An invocation holds the task. ``invocation`` names the holder (set by the engine);
    ``lease_until`` (a clock time, or None without a lease) is when another harness may
    take the task over as abandoned: until then it is presumed running elsewhere."""

    status: Literal["running"] = "running"
    checkpoint: Checkpoint
    wake: WakeReason | None = None
    invocation: str | None = None
    lease_until: float | None = None

    _c = field_validator("checkpoint", mode="before")(_checkpoint)


class Waiting(_Frozen):
    """Parked until tasks end: all of them (``all_settled``), all or the first failure
    (``fail_fast``), or the first of them (``any``)."""

    status: Literal["waiting"] = "waiting"
    checkpoint: Checkpoint
    on: tuple[str, ...]
    policy: Literal["fail_fast", "all_settled", "any"] = "all_settled"

    _c = field_validator("checkpoint", mode="before")(_checkpoint)


class Sleeping(_Frozen):
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

    status: Literal["sleeping"] = "sleeping"
    checkpoint: Checkpoint
    until: float | None = None
    signals: tuple[SignalKey[Any], ...] = ()
    heartbeat: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    beat_by: float | None = None
    expire_on_deadline: bool = True

    _c = field_validator("checkpoint", mode="before")(_checkpoint)

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The heartbeat and race fields are written only when set: a sleep without them is
        # stored exactly as before they existed, so a process of an earlier version (which
        # refuses unknown fields) still reads it during a rolling deploy.
        data = handler(self)
        for name, default in _SLEEP_DEFAULTS.items():
            if isinstance(data, dict) and data.get(name, default) == default:
                data.pop(name, None)
        return data

    @property
    def deadline(self) -> float | None:
        """The earliest time this sleep wakes without a value: ``until`` or ``beat_by``."""
        times = [t for t in (self.until, self.beat_by) if t is not None]
        return min(times) if times else None


_SLEEP_DEFAULTS: dict[str, Any] = {"heartbeat": None, "beat_by": None, "expire_on_deadline": True}


class Completing(_Frozen):
    """Finished, holding its outcome, while work it owns is still live."""

    status: Literal["completing"] = "completing"
    outcome: Outcome


class Terminal(_Frozen):
    """Ended for good."""

    status: Literal["terminal"] = "terminal"
    outcome: Outcome


TaskState = Annotated[
    Pending | Running | Waiting | Sleeping | Completing | Terminal, Field(discriminator="status")
]

PARKED = ("waiting", "sleeping")
ENDED = ("terminal",)
HOLDS_OUTCOME = ("completing", "terminal")

# What a phase (or an abort handler) may commit from ``running``. The scheduler's own moves
# (reserve, restart, settle completing) are in :mod:`bide.engine.rules` and not open to phases.
PHASE_TRANSITIONS: dict[str, frozenset[str]] = {
    "running": frozenset({"pending", "running", "waiting", "sleeping", "terminal"}),
}
