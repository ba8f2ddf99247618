"""The ports a host needs to keep sessions moving: alarms and the wake queue.

The worker acts on ``wake()`` through them: ``active`` -> :meth:`WakeQueue.wake` at once;
``at`` -> :meth:`Alarms.arm`; neither -> :meth:`Alarms.disarm` (a session parked only on
signals has no alarm at all).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..engine.partial import PageHint


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

    def wake(
        self,
        session_id: str,
        reason: str,
        *,
        task: str | None = None,
        owner: str | None = None,
        pages: PageHint | None = None,
    ) -> None:
        """Ask for a worker run of the session. ``task`` (with its ``owner``, if any): the
        run is owed to that task alone (a signal delivered to it), so the worker may run it
        without loading the rest of the session (``bide.service.worker``). ``pages``: that
        task's sealed memo page count and ``created_at`` as the caller read them, so the run
        may read the pages with the task (:mod:`bide.engine.partial`); a hint only."""
        ...


class DeadLetters(Protocol):
    """Where a wake that keeps failing is set aside, with why, for an operator (``bide
    redrive``) to send back once the cause is fixed."""

    def dead_letter(self, session_id: str, wake: str, reason: dict[str, object]) -> None:
        """Set the wake (its message body) aside with ``reason`` (error, attempts, time)."""
        ...


class EndedSessions(Protocol):
    """Finishes ending sessions in a store that expires them (the DynamoDB store with a
    retention: :mod:`bide.aws.retention`): the end's commit stamps what it writes, this
    stamps what was written before."""

    def needs_stamping(self, session_id: str) -> bool:
        """Whether :meth:`stamp_ended` may have work left, from what this process last saw
        of the session (no I/O): False only for a session known not ended, kept forever or
        finished."""
        ...

    def stamp_ended(self, session_id: str, linked: Sequence[tuple[str, str]] = ()) -> int:
        """Give every item of the ended session, and each ``(partition, document key)`` of
        ``linked``, the session's expiry; idempotent. How many items it stamped."""
        ...
