"""The local alarm clock: the :class:`~bide.aws.ports.Alarms` port on a SQLite table.

It stands in for EventBridge Scheduler: one alarm per session (arming replaces it), and when
an alarm is due it sends the same wake the Scheduler would send to the FIFO queue (the
session, ``"reason": "alarm"``, the deadline and an arming id; no deduplication id) and
deletes itself, like a one-time schedule with ``ActionAfterCompletion=DELETE``. Alarms live in
the store's file, so a restart keeps them.

By default it fires as the Scheduler does: "with 60 second precision ... if you set your
schedule to run at 1:00, it will invoke the target API between 1:00:00 and 1:00:59"
(https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html), in the minute
the worker's ``at()`` expression names (:func:`bide.aws.scheduler.alarm_minute`), at a
moment drawn from a seeded RNG, and now and then twice (delivery is at least once; the wake
queue drops the copy). ``exact=True`` fires at the deadline itself, once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from dataclasses import dataclass
from typing import Protocol

from ..aws.scheduler import alarm_body, alarm_minute
from ..constants import SCHEDULER_PRECISION_SECONDS
from ..engine.clock import Clock
from ..engine.ids import IdSource, RandomIds
from .db import LocalDb, sleep_until_poked

log = logging.getLogger("bide.local.alarms")

# How long the loop sleeps at most between checks. A bound (rather than sleeping until the
# next alarm) tolerates wall-clock jumps, e.g. a laptop waking up from suspend.
MAX_SLEEP_SECONDS = 30.0
# How often an AWS-like alarm fires twice (at-least-once delivery).
DUPLICATE_PROBABILITY = 0.05


class AlarmTarget(Protocol):
    """Where a due alarm sends its wake: the body the Scheduler would send to the FIFO queue
    (:class:`~bide.local.queue.LocalWakeQueue` is one)."""

    def send(self, session_id: str, body: str, dedup_id: str | None = None) -> bool:
        """Queue ``body`` for the session; False when deduplication dropped it."""
        ...


@dataclass(frozen=True)
class Alarm:
    """A session's alarm."""

    session_id: str
    at: float


class LocalAlarms:
    """One alarm per session in the ``local_alarms`` table; :meth:`run` fires them."""

    def __init__(
        self,
        db: LocalDb,
        queue: AlarmTarget,
        clock: Clock,
        *,
        exact: bool = False,
        seed: int | None = None,
        ids: IdSource | None = None,
        duplicate_probability: float = DUPLICATE_PROBABILITY,
    ) -> None:
        self.db = db
        self.queue = queue
        self.clock = clock
        self.exact = exact
        self.seed = secrets.randbits(64) if seed is None else seed
        self.ids: IdSource = ids or RandomIds()
        self.duplicate_probability = duplicate_probability
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self, session_id: str, at: float) -> bool:
        """Make sure the session is woken at ``at`` (replacing its previous alarm: True)."""
        with self.db.transaction() as db:
            replaced = (
                db.execute(
                    "SELECT 1 FROM local_alarms WHERE session_id = ?", (session_id,)
                ).fetchone()
                is not None
            )
            db.execute(
                "INSERT INTO local_alarms (session_id, at) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET at = excluded.at",
                (session_id, at),
            )
        self._poke()
        return replaced

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

    def _draw(self, session_id: str, at: float) -> random.Random:
        # One RNG per alarm, seeded from the clock's seed: an alarm's moment is decided once
        # (asking again gives the same answer), and a test's seed replays a run.
        return random.Random(f"{self.seed}:{session_id}:{at!r}")

    def fires_at(self, alarm: Alarm) -> float:
        """When the alarm fires: its deadline (exact), else a moment of the minute its
        ``at()`` expression names (never before the deadline)."""
        if self.exact:
            return alarm.at
        offset = self._draw(alarm.session_id, alarm.at).uniform(0, SCHEDULER_PRECISION_SECONDS)
        return alarm_minute(alarm.at) + min(offset, SCHEDULER_PRECISION_SECONDS - 0.001)

    def _copies(self, alarm: Alarm) -> int:
        if self.exact:
            return 1
        rng = self._draw(alarm.session_id, alarm.at)
        rng.random()  # the draw fires_at used
        return 2 if rng.random() < self.duplicate_probability else 1

    def fire_due(self) -> list[str]:
        """Send a wake for every alarm that is due and delete it; the sessions woken.

        The wake is sent before the alarm is deleted, so a crash in between wakes the session
        twice (harmless) rather than never. The delete is conditioned on the time fired, so an
        alarm a worker re-armed meanwhile stays.
        """
        now = self.clock.now()
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT session_id, at FROM local_alarms WHERE at <= ? ORDER BY at", (now,)
            ).fetchall()
        due = [a for a in (Alarm(str(s), float(at)) for s, at in rows) if self.fires_at(a) <= now]
        fired: list[str] = []
        for alarm in due:
            session_id, at = alarm.session_id, alarm.at
            body = alarm_body(session_id, at, self.ids.new_id("arm-"))
            for _ in range(self._copies(alarm)):
                # No deduplication id, as Scheduler sends: the queue deduplicates by content.
                self.queue.send(session_id, body)
            with self.db.transaction() as db:
                db.execute(
                    "DELETE FROM local_alarms WHERE session_id = ? AND at = ?", (session_id, at)
                )
            fired.append(session_id)
            log.info("alarm fired for session %s", session_id)
        return fired

    def _next_at(self) -> float | None:
        fires = [self.fires_at(alarm) for alarm in self.alarms()]
        return min(fires) if fires else None

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
