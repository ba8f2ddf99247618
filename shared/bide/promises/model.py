"""Durable promises as data: the ``promise/<id>`` document and the signals that carry it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..engine.errors import BideError
from ..engine.signals import SignalToken, define_signal

DEFAULT_REJECTION = "Rejected"
"""The type of a rejection whose rejecter named none (callers from before types existed)."""

PromiseStatus = Literal["open", "resolved", "rejected", "cancelled", "expired"]
TerminalStatus = Literal["resolved", "rejected", "cancelled", "expired"]
TERMINAL: tuple[str, ...] = ("resolved", "rejected", "cancelled", "expired")


class PromiseError(BideError):
    """A promise operation that cannot be done (unknown promise, a deadline in the past)."""


class Waiter(BaseModel):
    """One open await: the task and the key its resolution is delivered to."""

    model_config = ConfigDict(extra="forbid")

    task: str
    key: str


class NoticeRoute(BaseModel):
    """Where a cancellation (or expiry) notice for this promise goes, best effort.

    ``mailbox`` set: an envelope is posted to that mailbox and ``task`` pinged (a receiver
    serving many callers). Otherwise :data:`PROMISE_CANCELLED` is signalled to ``task`` under
    ``key`` (a started execution, one key per completion key).
    """

    model_config = ConfigDict(extra="forbid")

    task: str
    key: str | None = None
    mailbox: str | None = None


class PromiseDoc(BaseModel):
    """The document ``promise/<id>``: an outstanding result and, once known, its outcome.

    ``owner`` is the task that created it; ``scope`` the task whose end cancels it (None: the
    session); ``producer`` and ``correlation`` are what a reply must carry; ``group`` lists the
    promises that end together (one invocation's keyed promises) and ``close_task`` is aborted
    once all of them are terminal; ``deadline`` is the hard deadline (a clock time) that the
    ``keeper`` task enforces; ``waiters`` are the open await keys.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    owner: str | None = None
    scope: str | None = None
    label: str | None = None
    producer: str | None = None
    correlation: str | None = None
    key: str = "result"
    invocation: str | None = None
    group: list[str] = Field(default_factory=list)
    close_task: str | None = None
    notice: NoticeRoute | None = None
    deadline: float | None = None
    keeper: str | None = None
    status: PromiseStatus = "open"
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    """A rejection's type (``Rejected`` when the rejecter named none); None otherwise."""
    error_data: Any = None
    """A rejection's optional JSON details."""
    waiters: list[Waiter] = Field(default_factory=list)
    created_at: float = 0.0
    settled_at: float | None = None
    settled_by: str | None = None

    @property
    def terminal(self) -> bool:
        """True once the promise holds its outcome."""
        return self.status in TERMINAL


class PromiseSettled(BaseModel):
    """The value of :data:`PROMISE`: a promise's terminal outcome."""

    promise_id: str
    status: TerminalStatus
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    error_data: Any = None

    @classmethod
    def of(cls, doc: PromiseDoc) -> PromiseSettled:
        """The outcome recorded in a terminal promise document."""
        assert doc.terminal, "only a terminal promise has an outcome"
        return cls(
            promise_id=doc.id,
            status=doc.status,
            value=doc.value,
            error=doc.error,
            error_type=doc.error_type,
            error_data=doc.error_data,
        )


class CancelNotice(BaseModel):
    """The value of :data:`PROMISE_CANCELLED`: the caller no longer needs this result."""

    promise_id: str
    key: str
    status: Literal["cancelled", "expired"]
    reason: str | None = None
    invocation: str | None = None
    correlation: str | None = None


# envelope=1: the outcome wraps a value resolve_promise already checked against the limits.
PROMISE: SignalToken[PromiseSettled] = define_signal("bide.promise", 1, PromiseSettled, envelope=1)
"""Delivered to every open await key (and the promise's keeper) when the promise ends."""

PROMISE_CANCELLED: SignalToken[CancelNotice] = define_signal(
    "bide.promise-cancelled", 1, CancelNotice
)
"""A per-key cancellation notice to a producer task."""
