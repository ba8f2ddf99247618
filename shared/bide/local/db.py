"""The local stack's own tables, kept in the store's SQLite file so they survive a restart."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_SCHEMA = """
-- One alarm per session (EventBridge Scheduler keeps one schedule per session).
CREATE TABLE IF NOT EXISTS local_alarms (
    session_id TEXT PRIMARY KEY,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS local_alarms_at ON local_alarms (at);
-- Queued wakes (the SQS FIFO queue): a row lives until a worker run handled it, so a wake
-- queued when the process died is delivered after the restart.
CREATE TABLE IF NOT EXISTS local_wakes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    body TEXT NOT NULL,
    sent_at REAL NOT NULL,
    visible_at REAL NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS local_wakes_visible ON local_wakes (visible_at);
-- Wakes that failed too often (the dead-letter queue), kept for inspection.
CREATE TABLE IF NOT EXISTS local_dead_wakes (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    body TEXT NOT NULL,
    sent_at REAL NOT NULL,
    receive_count INTEGER NOT NULL,
    error TEXT
);
"""


class LocalDb:
    """One connection to the stack's SQLite file, shared by the alarm clock and the queue.

    Every statement runs under a lock in autocommit mode or inside :meth:`transaction`; the
    store uses its own connection to the same file (WAL mode lets them work side by side).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL, not FULL: in WAL mode a commit then survives a killed process (the WAL is
            # in the OS cache), and on power loss only a suffix of commits can be lost, in
            # order (a lost wake takes the later alarm delete with it, so the alarm fires
            # again). An fsync per queue row would cost more than the worker's own commits.
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on error), holding the lock."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


async def sleep_until_poked(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` pass.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11, ``wait_for`` can
    swallow a cancellation that arrives as the event is set, and a loop around it then never
    stops (seen as ``bide dev`` hanging on SIGTERM).
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
