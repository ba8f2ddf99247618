"""Dead-lettered wakes of the local stack, and the ``bide redrive`` command.

Locally the dead-letter queue is the ``local_dead_wakes`` table of the stack's SQLite file:
the worker sets a wake aside there on its last attempt with the reason
(:class:`LocalDeadLetters`), and the local queue moves a wake whose batch kept failing (its
backstop, like SQS's redrive policy). ``bide redrive`` lists them and sends them back to the
``local_wakes`` table; against AWS (``--dlq-url``) it does the same on the SQS dead-letter
queue (:mod:`bide.service.redrive`).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..aws.sqs import whole_session
from ..constants import ENV_DEAD_LETTER_URL, ENV_QUEUE_URL
from ..engine.clock import Clock, SystemClock
from ..engine.errors import BideError
from ..service.redrive import DeadWake, dead_wake, sqs_redrive
from .db import LocalDb


class RedriveError(BideError):
    """``bide redrive`` was asked for something it cannot do (bad arguments, no file)."""


class LocalDeadLetters:
    """:class:`~bide.aws.ports.DeadLetters` on the ``local_dead_wakes`` table."""

    def __init__(self, db: LocalDb, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def dead_letter(self, session_id: str, wake: str, reason: dict[str, object]) -> None:
        """Set the wake aside with its reason (keyed by its message id when it has one, so
        the queue's own backstop never records it twice)."""
        message_id = str(reason.get("message_id") or "")
        with self.db.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO local_dead_wakes "
                "(id, session_id, body, sent_at, receive_count, error) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    int(message_id) if message_id.isdigit() else None,
                    session_id,
                    wake,
                    self.clock.now(),
                    int(str(reason.get("receives", 0))),
                    json.dumps(reason),
                ),
            )


def _reason(error: str | None, receives: int) -> dict[str, Any] | None:
    if not error:
        return None
    try:
        data = json.loads(error)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return data
    # The queue's backstop records "Type: message" of a handler that raised.
    kind, _, text = error.partition(": ")
    return {"error_type": kind, "error": text, "receives": receives}


class LocalRedrive:
    """``local_dead_wakes`` read and redriven into ``local_wakes``. A running ``bide dev``
    picks redriven wakes up within its queue's poll interval."""

    def __init__(self, db: LocalDb, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()

    def letters(self) -> list[DeadWake]:
        """Every dead-lettered wake, oldest first."""
        with self.db.transaction() as db:
            rows = db.execute(
                "SELECT id, session_id, body, receive_count, error FROM local_dead_wakes "
                "ORDER BY sent_at, id"
            ).fetchall()
        return [
            DeadWake(str(i), str(sid), str(body), _reason(error, int(count)))
            for i, sid, body, count, error in rows
        ]

    def redrive(self, select: Callable[[DeadWake], bool]) -> list[DeadWake]:
        """Queue each selected wake again and delete its letter, in one transaction."""
        chosen = [letter for letter in self.letters() if select(letter)]
        now = self.clock.now()
        with self.db.transaction() as db:
            for letter in chosen:
                db.execute(
                    "INSERT INTO local_wakes (session_id, body, sent_at, visible_at) "
                    "VALUES (?, ?, ?, ?)",
                    (letter.session_id, whole_session(letter.wake), now, now),
                )
                db.execute("DELETE FROM local_dead_wakes WHERE id = ?", (int(letter.letter_id),))
        return chosen


def add_redrive_parser(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """``bide redrive [SESSION | --all]`` (``command`` makes a subcommand parser)."""
    parser = command(
        "redrive",
        "list dead-lettered wakes with their reasons; send back one session's (or --all)",
    )
    parser.add_argument("session", nargs="?", help="send back this session's wakes")
    parser.add_argument("--all", action="store_true", help="send back every dead-lettered wake")
    parser.add_argument(
        "--dlq-url",
        default=os.environ.get(ENV_DEAD_LETTER_URL),
        help=f"the SQS dead-letter queue (default: ${ENV_DEAD_LETTER_URL}); without it, the "
        "local stack's file",
    )
    parser.add_argument(
        "--queue-url",
        default=os.environ.get(ENV_QUEUE_URL),
        help=f"the SQS wake queue to send back to (default: ${ENV_QUEUE_URL})",
    )
    parser.add_argument("--db", default=".bide/dev.sqlite", help="the local stack's file")


def run_redrive(args: argparse.Namespace) -> str:
    """Run ``bide redrive``; what to print. Raises :class:`RedriveError` on bad usage."""
    if args.all and args.session:
        raise RedriveError("give a session id or --all, not both")
    source: Any
    db: LocalDb | None = None
    if args.dlq_url:
        if not args.queue_url:
            raise RedriveError(f"--dlq-url needs --queue-url (or ${ENV_QUEUE_URL})")
        source = sqs_redrive(args.dlq_url, args.queue_url)
    else:
        if not Path(args.db).is_file():
            raise RedriveError(f"no local stack file at {args.db} (pass --db, or --dlq-url)")
        db = LocalDb(args.db)
        source = LocalRedrive(db)
    try:
        if args.all or args.session:
            letters = source.redrive(lambda d: args.all or d.session_id == args.session)
            verb = "sent back"
        else:
            letters = source.letters()
            verb = "dead-lettered"
    finally:
        if db is not None:
            db.close()
    if getattr(args, "json", False):
        return json.dumps([letter.as_json() for letter in letters], indent=2)
    lines = [letter.describe() for letter in letters]
    lines.append(f"{len(letters)} wake(s) {verb}")
    return "\n".join(lines)


__all__ = [
    "LocalDeadLetters",
    "LocalRedrive",
    "RedriveError",
    "add_redrive_parser",
    "dead_wake",
    "run_redrive",
]
