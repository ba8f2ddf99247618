"""Errors of workflow bodies, and the control flow a body never catches.

Two kinds of exception leave a durable operation:

* errors the body may handle (they derive from :class:`~bide.engine.errors.BideError`):
  :class:`StepFailed`, :class:`WaitTimeout`, :class:`SubagentFailed`, :class:`WorkflowError`,
  :class:`NonDeterminism` and :class:`FailureReceived` (a wait got a failure instead of a
  value: ``ctx.wait_for``, ``hook.next()``; uncaught, the call ends failed with it);
* control flow that must unwind the body (they derive from :class:`BaseException`, so an
  ``except Exception`` never swallows them): :class:`Cancelled`, raised at the operation a
  cancelled body was parked at, and the internal suspension that turns an unsatisfied wait
  into a park. ``finally`` blocks run for both; check ``ctx.cancelled`` to clean up only when
  the run is being cancelled.
"""

from __future__ import annotations

from typing import Any

from ..engine.errors import BideError
from ..engine.failures import FailureReceived as FailureReceived  # re-exported


class WorkflowError(BideError):
    """A workflow operation used where it cannot work: a durable operation inside a step,
    ``get_token`` in the body, a wait on a key that expired at an earlier deadline, a reused
    subagent key. Fix the body; retrying cannot help."""


class FatalError(BideError):
    """Raise it in a step to fail the step at once: it is not retried."""


class StepFailed(BideError):
    """A step failed for good: its retries ran out, or it raised :class:`FatalError`.

    The same error is raised on every replay (it is recorded): ``step`` names the step,
    ``error_type`` and ``message`` describe the last failure, ``attempts`` counts them."""

    def __init__(
        self, step: str, error_type: str, message: str, *, fatal: bool, attempts: int
    ) -> None:
        self.step = step
        self.error_type = error_type
        self.message = message
        self.fatal = fatal
        self.attempts = attempts
        why = "failed (not retried)" if fatal else f"failed after {attempts} attempt(s)"
        super().__init__(f"step {step!r} {why}: {error_type}: {message}")

    @classmethod
    def from_record(cls, step: str, error: dict[str, Any]) -> StepFailed:
        """The error a recorded failure stands for."""
        return cls(
            step,
            str(error.get("type", "Error")),
            str(error.get("message", "")),
            fatal=bool(error.get("fatal", False)),
            attempts=int(error.get("attempts", 1)),
        )


class WaitTimeout(BideError, TimeoutError):
    """A wait with ``timeout=`` reached its deadline before anything arrived."""


class HeartbeatMissed(WaitTimeout):
    """A wait with ``heartbeat=`` heard no beat on its key for that long (before its
    ``timeout``): the sender is presumed dead and the key is closed. A :class:`WaitTimeout`,
    so code that handles timeouts handles it too."""


class SubagentFailed(BideError):
    """A subagent's submission settled without an answer (``status``: ``unanswered``)."""

    def __init__(self, key: str, status: str, error: str | None) -> None:
        self.key = key
        self.status = status
        self.error = error
        super().__init__(f"subagent {key!r} ended {status}: {error}")


class NonDeterminism(BideError):
    """The body no longer replays its history: the code (or something it read outside a
    step) changed between runs. Three checks find it:

    * ``reason="operation"``: a different kind or name at a recorded position;
    * ``reason="arguments"``: the same operation with other arguments (their digest, kept
      with the record since digests exist, differs; older records are not checked);
    * ``reason="count"``: the body ended having asked for fewer operations than its history
      holds (``requested`` is then ``("end", "")``).

    The run ends failed with this error (an ``except`` in the body does not help: every later
    operation raises it again), and the host is told (see :mod:`bide.workflow.nondeterminism`)."""

    def __init__(
        self,
        position: int,
        recorded: tuple[str, str],
        requested: tuple[str, str],
        *,
        reason: str = "operation",
    ) -> None:
        self.position = position
        self.recorded = recorded
        self.requested = requested
        self.reason = reason
        if reason == "count":
            what = (
                f"the body ended after {position - 1} operation(s), but the history holds "
                f"{recorded[0]} {recorded[1]!r} at operation {position}"
            )
        elif reason == "arguments":
            what = (
                f"the history recorded {recorded[0]} {recorded[1]!r} with other arguments "
                "than the body now passes"
            )
        else:
            what = (
                f"the history recorded {recorded[0]} {recorded[1]!r}, the body now asks for "
                f"{requested[0]} {requested[1]!r}"
            )
        super().__init__(
            f"non-determinism at operation {position}: {what}; a body must replay the same "
            "operations, with the same arguments, in the same order (finish or cancel runs "
            "started by the old code before deploying a changed body)"
        )

    def describe(self) -> dict[str, object]:
        """The error as JSON (what the task's outcome and the workflow view show)."""
        return {
            "position": self.position,
            "reason": self.reason,
            "recorded": {"op": self.recorded[0], "name": self.recorded[1]},
            "requested": {"op": self.requested[0], "name": self.requested[1]},
            "message": str(self),
        }


class Cancelled(BaseException):
    """The run is cancelled: raised at the operation the body was parked at (and at every
    later wait) so its ``finally`` blocks run; steps there still run and are recorded."""


class AuthorizationRequired(BaseException):
    """Raised by ``get_token``/``require_auth`` inside a step when the provider needs the
    person to sign in: the step attempt ends, the run parks on an authorization request,
    and the step is retried once the callback completed it."""

    def __init__(self, provider: str, *, rejected: bool = False) -> None:
        self.provider = provider
        self.rejected = rejected
        why = "rejected the token" if rejected else "has no token"
        super().__init__(f"provider {provider!r} {why}: sign-in needed")


class _Suspend(BaseException):
    """An unsatisfied durable wait: the body unwinds and the run parks."""
