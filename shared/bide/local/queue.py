"""The local wake queue: the :class:`~bide.aws.ports.WakeQueue` port, run in-process.

It stands in for the SQS FIFO queue with the session id as message group: :meth:`wake` queues
a message; :meth:`LocalWakeQueue.run` hands queued messages to the worker handler as SQS batch
events, **never two batches of one session at a time** (one worker per session), several
sessions side by side. Messages are rows in the store's SQLite file and are deleted only once
the handler took them (partial batch failures are retried with backoff, then dead-lettered),
so a wake queued when the process died still runs after a restart.

Like the deployed queue (content-based deduplication, deduplication scope per message group)
it drops a message sent without a deduplication id (an alarm's, as Scheduler sends them)
whose body equals one sent to the same session in the last 5 minutes: "any messages sent with
the same MessageDeduplicationId are accepted successfully but aren't delivered during the
5-minute deduplication interval"
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html).
The window is kept in memory (a restart forgets it). ``exact=True`` deduplicates nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..aws.sqs import wake_body
from ..constants import FIFO_DEDUPLICATION_SECONDS, WORKER_TIMEOUT_SECONDS
from ..engine.clock import Clock
from ..engine.partial import PageHint
from .db import LocalDb, sleep_until_poked
from .events import WakeMessage, sqs_event

log = logging.getLogger("bide.local.queue")

WorkerHandler = Callable[[dict[str, Any]], Awaitable[Any]]
"""Takes an SQS batch event; may return ``{"batchItemFailures": [{"itemIdentifier": id}]}``."""

MAX_BATCH = 10  # SQS delivers at most 10 messages per batch
MAX_RECEIVES = 5  # then the message goes to the dead-letter table (the DLQ's maxReceiveCount)
RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 60.0
MAX_SLEEP_SECONDS = 30.0


@dataclass(frozen=True)
class QueuedWake:
    """A queued wake, for status displays."""

    session_id: str
    reason: str
    visible_at: float
    receive_count: int


class LocalWakeQueue:
    """Wakes in the ``local_wakes`` table, handed to a worker handler by :meth:`run`."""

    def __init__(
        self,
        db: LocalDb,
        clock: Clock,
        *,
        concurrency: int = 8,
        max_receives: int = MAX_RECEIVES,
        retry_base_seconds: float = RETRY_BASE_SECONDS,
        exact: bool = False,
    ) -> None:
        self.db = db
        self.exact = exact
        # (session, deduplication id) -> when sent, for content-deduplicated messages.
        self._deduplication: dict[tuple[str, str], float] = {}
        self._deduplication_lock = threading.Lock()  # send() may be called from any thread
        self.duplicates_dropped = 0
        self.clock = clock
        self.concurrency = concurrency
        self.max_receives = max_receives
        self.retry_base_seconds = retry_base_seconds
        # Batches taken but not finished, by session: the FIFO message-group lock.
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches_run = 0
        self._draining = False

    # --- the port --------------------------------------------------------------------------

    def wake(
        self,
        session_id: str,
        reason: str,
        *,
        task: str | None = None,
        owner: str | None = None,
        pages: PageHint | None = None,
    ) -> None:
        """Queue a wake (the body :func:`~bide.aws.sqs.wake_body` makes, as on SQS). Every
        wake is its own message (never merged away, as a fresh deduplication id makes it on
        SQS): a duplicate run of a session is harmless, a lost one is not."""
        self._insert(session_id, wake_body(session_id, reason, task=task, owner=owner, pages=pages))

    def send(self, session_id: str, body: str, dedup_id: str | None = None) -> bool:
        """Queue ``body`` in the session's group; without ``dedup_id`` it is deduplicated by
        content (SHA-256 of the body) over 5 minutes. False: accepted and dropped."""
        if not self.exact:
            key = (session_id, dedup_id or hashlib.sha256(body.encode()).hexdigest())
            now = self.clock.now()
            with self._deduplication_lock:
                for old, sent in list(self._deduplication.items()):
                    if now - sent >= FIFO_DEDUPLICATION_SECONDS:
                        del self._deduplication[old]
                if key in self._deduplication:
                    self.duplicates_dropped += 1
                    log.info("duplicate wake of session %s dropped", session_id)
                    return False
                self._deduplication[key] = now
        self._insert(session_id, body)
        return True

    def _insert(self, session_id: str, body: str) -> None:
        now = self.clock.now()
        with self.db.transaction() as db:
            db.execute(
                "INSERT INTO local_wakes (session_id, body, sent_at, visible_at) "
                "VALUES (?, ?, ?, ?)",
                (session_id, body, now, now),
            )
        self._poke()

    # --- inspection --------------------------------------------------------------------------

    def queued(self) -> list[QueuedWake]:
        """Messages not yet handled (waiting, in flight or waiting for a retry)."""
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT session_id, body, visible_at, receive_count FROM local_wakes ORDER BY id"
            ).fetchall()
        return [
            QueuedWake(str(sid), str(json.loads(body).get("reason", "")), float(vis), int(count))
            for sid, body, vis, count in rows
        ]

    def running(self) -> list[str]:
        """Sessions a worker is running right now."""
        return sorted(self._in_flight)

    def dead_letters(self) -> int:
        """How many wakes failed too often and were set aside."""
        with self.db.transaction() as db:
            (count,) = db.execute("SELECT COUNT(*) FROM local_dead_wakes").fetchone()
        return int(count)

    async def drained(self, timeout: float) -> bool:
        """Wait until no worker runs and no wake is ready to run; False on timeout."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        while loop.time() < give_up:
            now = self.clock.now()
            if not self._in_flight and not any(q.visible_at <= now for q in self.queued()):
                return True
            await asyncio.sleep(0.01)
        return False

    # --- the runner ----------------------------------------------------------------------------

    def release_abandoned(self) -> int:
        """Make wakes taken by a process that died visible again at once (on AWS the
        visibility timeout does this); how many. Call before :meth:`run`, only when no other
        process serves this file."""
        with self.db.transaction() as db:
            cursor = db.execute(
                "UPDATE local_wakes SET visible_at = ? WHERE visible_at > ?",
                (self.clock.now(), self.clock.now()),
            )
        return int(cursor.rowcount)

    async def run(self, handler: WorkerHandler) -> None:
        """Hand queued wakes to ``handler`` until cancelled (then cancels running batches;
        their messages stay queued for the next start)."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        try:
            while True:
                self._changed.clear()
                if not self._draining:
                    self._start_ready(handler)
                await sleep_until_poked(self._changed, self._next_delay())
        finally:
            tasks = list(self._in_flight.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def finish_running(self, grace_seconds: float) -> bool:
        """Start no new batch and give running ones up to ``grace_seconds`` to end (so a
        clean shutdown does not cut a worker off mid-run); whether all ended in time."""
        self._draining = True
        running = list(self._in_flight.values())
        if not running:
            return True
        _, pending = await asyncio.wait(running, timeout=grace_seconds)
        return not pending

    def _poke(self) -> None:
        # wake() may be called from any thread; the runner sleeps on an asyncio.Event.
        if self._loop is not None and self._changed is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._changed.set)

    def _next_delay(self) -> float:
        if self._draining or len(self._in_flight) >= self.concurrency:
            return MAX_SLEEP_SECONDS  # nothing can start now; a finishing batch pokes us
        busy = set(self._in_flight)
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT session_id, MIN(visible_at) FROM local_wakes GROUP BY session_id"
            ).fetchall()
        pending = [float(at) for sid, at in rows if sid not in busy]
        if not pending:
            return MAX_SLEEP_SECONDS
        return min(MAX_SLEEP_SECONDS, max(0.0, min(pending) - self.clock.now()))

    def _start_ready(self, handler: WorkerHandler) -> None:
        now = self.clock.now()
        with self.db.transaction() as db:
            ready = db.execute(
                "SELECT session_id FROM local_wakes WHERE visible_at <= ? "
                "GROUP BY session_id ORDER BY MIN(id)",
                (now,),
            ).fetchall()
        for (session_id,) in ready:
            if len(self._in_flight) >= self.concurrency:
                return
            if session_id in self._in_flight:
                continue  # one worker per session: the rest waits for this batch
            batch = self._take(session_id, now)
            if batch:
                task = asyncio.ensure_future(self._run_batch(handler, session_id, batch))
                self._in_flight[session_id] = task

    def _take(self, session_id: str, now: float) -> list[WakeMessage]:
        """Take up to a batch of the session's visible messages, hiding them meanwhile."""
        hidden_until = now + WORKER_TIMEOUT_SECONDS + 30
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT id, body, sent_at, receive_count FROM local_wakes "
                "WHERE session_id = ? AND visible_at <= ? ORDER BY id LIMIT ?",
                (session_id, now, MAX_BATCH),
            ).fetchall()
            db.executemany(
                "UPDATE local_wakes SET visible_at = ?, receive_count = receive_count + 1 "
                "WHERE id = ?",
                [(hidden_until, row[0]) for row in rows],
            )
        return [
            WakeMessage(str(mid), session_id, str(body), float(sent), int(count) + 1)
            for mid, body, sent, count in rows
        ]

    async def _run_batch(
        self, handler: WorkerHandler, session_id: str, batch: list[WakeMessage]
    ) -> None:
        failed: set[str] = set()
        error: str | None = None
        try:
            response = await handler(sqs_event(batch, self.clock.now()))
            failed = _failed_ids(response)
        except asyncio.CancelledError:
            raise  # shutting down: the messages stay queued (hidden until restart)
        except Exception as exc:  # a handler error fails the whole batch, as on Lambda
            log.exception("worker failed for session %s", session_id)
            failed = {m.message_id for m in batch}
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self._in_flight.pop(session_id, None)
            self._poke()
        self.batches_run += 1
        self._settle(batch, failed, error)

    def _settle(self, batch: list[WakeMessage], failed: set[str], error: str | None) -> None:
        now = self.clock.now()
        with self.db.transaction() as db:
            for message in batch:
                if message.message_id not in failed:
                    db.execute("DELETE FROM local_wakes WHERE id = ?", (message.message_id,))
                elif message.receive_count >= self.max_receives:
                    log.error(
                        "wake of session %s failed %d times: dead-lettered",
                        message.session_id,
                        message.receive_count,
                    )
                    db.execute(
                        "INSERT INTO local_dead_wakes "
                        "(id, session_id, body, sent_at, receive_count, error) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            message.message_id,
                            message.session_id,
                            message.body,
                            message.sent_at,
                            message.receive_count,
                            error,
                        ),
                    )
                    db.execute("DELETE FROM local_wakes WHERE id = ?", (message.message_id,))
                else:
                    backoff = self.retry_base_seconds * 2 ** (message.receive_count - 1)
                    db.execute(
                        "UPDATE local_wakes SET visible_at = ? WHERE id = ?",
                        (now + min(RETRY_CAP_SECONDS, backoff), message.message_id),
                    )


def _failed_ids(response: Any) -> set[str]:
    """The message ids a partial batch response reports as failed."""
    if not isinstance(response, dict):
        return set()
    failures = response.get("batchItemFailures") or []
    return {str(f.get("itemIdentifier")) for f in failures if isinstance(f, dict)}
