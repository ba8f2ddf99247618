"""How one run of a workflow body stands when :func:`~bide.workflow.context.run_body`
returns: finished, errored, parked, or (a cancelled body) unwound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.failures import FailureReceived
from ..tools.results import Sleep


@dataclass(frozen=True)
class Finished:
    """The body returned ``value`` (the run's result)."""

    value: Any


@dataclass(frozen=True)
class Errored:
    """The body raised; the run fails with ``error``. ``nondeterminism``: the body no
    longer replays its history (:meth:`NonDeterminism.describe`), already reported."""

    error: str
    nondeterminism: dict[str, Any] | None = None
    failure: FailureReceived | None = None
    """Set when the body let a received failure escape: the call ends failed with it."""


@dataclass(frozen=True)
class Parked:
    """The body waits: park the task as ``park`` says; on wake, run it again."""

    park: Sleep


@dataclass(frozen=True)
class Unwound:
    """A cancelled body finished unwinding (``error``: what escaped its cleanup, if any)."""

    error: str | None


RunOutcome = Finished | Errored | Parked | Unwound
