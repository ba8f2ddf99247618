"""The local alarm clock: the :class:`~bide.aws.ports.Alarms` port on a SQLite table.

It stands in for EventBridge Scheduler: one alarm per session (arming replaces it), and when
an alarm is due it sends the same wake the Scheduler would send to the FIFO queue
(``{"session_id": ..., "reason": "alarm"}``) and deletes itself, like a one-time schedule with
``ActionAfterCompletion=DELETE``. Alarms live in the store's file, so a restart keeps them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..aws.ports import WakeQueue
from ..engine.clock import Clock
from .db import LocalDb, sleep_until_poked

log = logging.getLogger("bide.local.alarms")

# How long the loop sleeps at most between checks. A bound (rather than sleeping until the
# next alarm) tolerates wall-clock jumps, e.g. a laptop waking up from suspend.
MAX_SLEEP_SECONDS = 30.0


@dataclass(frozen=True)
class Alarm:
    """A session's alarm."""

    session_id: str
    at: float


class LocalAlarms:
    """One alarm per session in the ``local_alarms`` table; :meth:`run` fires them."""

    def __init__(self, db: LocalDb, queue: WakeQueue, clock: Clock) -> None:
        self.db = db
        self.queue = queue
        self.clock = clock
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self, session_id: str, at: float) -> None:
        """Make sure the session is woken at ``at`` (replacing its previous alarm)."""
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO local_alarms (session_id, at) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET at = excluded.at",
                (session_id, at),
            )
        self._poke()

    def disarm(self, session_id: str) -> None:
        """Remove the session's alarm, if any."""
        with self.db.transaction() as db:
            db.execute("DELETE FROM local_alarms WHERE session_id = ?", (session_id,))
        self._poke()

    def armed_at(self, session_id: str) -> float | None:
        """When the session's alarm fires, or None when it has none."""
        with self.db.transaction() as db:
            row = db.execute(
                "SELECT at FROM local_alarms WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else float(row[0])

    def alarms(self) -> list[Alarm]:
        """Every armed alarm, soonest first."""
        with self.db.transaction() as db:
            rows = db.execute("SELECT session_id, at FROM local_alarms ORDER BY at").fetchall()
        return [Alarm(str(sid), float(at)) for sid, at in rows]

    def fire_due(self) -> list[str]:
        """Send a wake for every alarm that is due and delete it; the sessions woken.

        The wake is sent before the alarm is deleted, so a crash in between wakes the session
        twice (harmless) rather than never. The delete is conditioned on the time fired, so an
        alarm a worker re-armed meanwhile stays.
        """
        now = self.clock.now()
        with self.db.transaction() as db:
            due = db.execute(
                "SELECT session_id, at FROM local_alarms WHERE at <= ? ORDER BY at", (now,)
            ).fetchall()
        fired: list[str] = []
        for session_id, at in due:
            self.queue.wake(session_id, "alarm")
            with self.db.transaction() as db:
                db.execute(
                    "DELETE FROM local_alarms WHERE session_id = ? AND at = ?", (session_id, at)
                )
            fired.append(session_id)
            log.info("alarm fired for session %s", session_id)
        return fired

    def _next_at(self) -> float | None:
        with self.db.transaction() as db:
            row = db.execute("SELECT MIN(at) FROM local_alarms").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def _poke(self) -> None:
        # arm/disarm may be called from any thread; the loop sleeps on an asyncio.Event.
        if self._loop is not None and self._changed is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def run(self) -> None:
        """Fire alarms as they fall due, until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        while True:
            self._changed.clear()
            self.fire_due()
            next_at = self._next_at()
            delay = MAX_SLEEP_SECONDS
            if next_at is not None:
                delay = min(delay, max(0.0, next_at - self.clock.now()))
            await sleep_until_poked(self._changed, delay)
