"""The ports a host needs to keep sessions moving: alarms and the wake queue.

The worker acts on ``wake()`` through them: ``active`` -> :meth:`WakeQueue.wake` at once;
``at`` -> :meth:`Alarms.arm`; neither -> :meth:`Alarms.disarm` (a session parked only on
signals has no alarm at all).
"""

from __future__ import annotations

from typing import Protocol


class Alarms(Protocol):
    """One alarm per session: arming replaces the previous one."""

    def arm(self, session_id: str, at: float) -> bool | None:
        """Make sure the session is woken at ``at`` (seconds since the epoch). False when the
        session had no alarm (a new one was made), True when its alarm was replaced, None
        when the implementation cannot tell (taken as True)."""
        ...

    def disarm(self, session_id: str) -> None:
        """Remove the session's alarm, if any."""
        ...


class WakeQueue(Protocol):
    """Wakes a session as soon as possible, one worker per session at a time."""

    def wake(self, session_id: str, reason: str) -> None:
        """Ask for a worker run of the session."""
        ...


class DeadLetters(Protocol):
    """Where a wake that keeps failing is set aside, with why, for an operator (``bide
    redrive``) to send back once the cause is fixed."""

    def dead_letter(self, session_id: str, wake: str, reason: dict[str, object]) -> None:
        """Set the wake (its message body) aside with ``reason`` (error, attempts, time)."""
        ...
