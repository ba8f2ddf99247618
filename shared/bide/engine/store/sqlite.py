"""The embedded store: one SQLite file (or ``:memory:``) holding many sessions."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import CommitTooLarge, ConflictError, DocumentExists
from ..records import TaskRecord
from .base import (
    MAX_COMMIT_ITEMS,
    MAX_DOC_KEY_BYTES,
    Doc,
    SessionSnapshot,
    check_absent,
    check_at_head,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS heads (
    session_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    live INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, task_id)
);
-- Loading reads live tasks only, so resumes stay cheap however long the history.
CREATE INDEX IF NOT EXISTS tasks_live ON tasks (session_id, live);
CREATE TABLE IF NOT EXISTS docs (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
);
"""


class SQLiteStore:
    """A :class:`~bide.engine.store.Store` on SQLite. Safe to share between threads and between
    processes using the same file: each commit is one ``BEGIN IMMEDIATE`` transaction that
    checks the session's sequence number before writing."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def load(self, session_id: str) -> SessionSnapshot:
        """The session's head and live tasks, read in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                seq = self._seq(session_id)
                rows = self._db.execute(
                    "SELECT body FROM tasks WHERE session_id = ? AND live = 1", (session_id,)
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        tasks = {r.id: r for r in (TaskRecord.from_json(body) for (body,) in rows)}
        return SessionSnapshot(session_id, seq, tasks)

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """One task, live or ended."""
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM tasks WHERE session_id = ? AND task_id = ?",
                (session_id, task_id),
            ).fetchone()
        return None if row is None else TaskRecord.from_json(row[0])

    def head(self, session_id: str) -> int:
        """The session's sequence number."""
        with self._lock:
            return self._seq(session_id)

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        """The sequence number and one task, read in one transaction."""
        seq, record, _ = self._at_head(session_id, task_id, None)
        return seq, record

    def task_and_doc_at_head(
        self, session_id: str, task_id: str, key: str
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        """The sequence number, one task and one document, read in one transaction."""
        return self._at_head(session_id, task_id, key)

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        """The sequence number, those of ``task_ids`` the session has and the documents under
        ``keys`` found, read in one transaction."""
        check_at_head(task_ids, keys)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                seq = self._seq(session_id)
                rows = [
                    self._db.execute(
                        "SELECT body FROM tasks WHERE session_id = ? AND task_id = ?",
                        (session_id, task_id),
                    ).fetchone()
                    for task_id in dict.fromkeys(task_ids)
                ]
                docs = {
                    key: self._db.execute(
                        "SELECT body FROM docs WHERE session_id = ? AND key = ?", (session_id, key)
                    ).fetchone()
                    for key in dict.fromkeys(keys)
                }
            finally:
                self._db.execute("COMMIT")
        records = (TaskRecord.from_json(row[0]) for row in rows if row is not None)
        found = {key: Doc(key, json.loads(row[0])) for key, row in docs.items() if row is not None}
        return seq, {record.id: record for record in records}, found

    def _at_head(
        self, session_id: str, task_id: str, key: str | None
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                seq = self._seq(session_id)
                row = self._db.execute(
                    "SELECT body FROM tasks WHERE session_id = ? AND task_id = ?",
                    (session_id, task_id),
                ).fetchone()
                doc = None
                if key is not None:
                    doc = self._db.execute(
                        "SELECT body FROM docs WHERE session_id = ? AND key = ?", (session_id, key)
                    ).fetchone()
            finally:
                self._db.execute("COMMIT")
        record = None if row is None else TaskRecord.from_json(row[0])
        return seq, record, None if doc is None or key is None else Doc(key, json.loads(doc[0]))

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """Write ``writes`` and ``docs`` and advance the sequence, provided no document exists
        under a key of ``absent``; or raise and write nothing."""
        if len(writes) + len(docs) + len(absent) > MAX_COMMIT_ITEMS:
            raise CommitTooLarge(
                f"a commit holds at most {MAX_COMMIT_ITEMS} records, documents and absent keys, "
                f"not {len(writes) + len(docs) + len(absent)}; nothing was written"
            )
        check_absent(docs, absent)
        for doc in docs:
            if len(doc.key.encode()) > MAX_DOC_KEY_BYTES:
                raise ValueError(
                    f"document key over {MAX_DOC_KEY_BYTES} bytes: {doc.key[:40]!r}..."
                )
        rows = [(session_id, r.id, int(r.live), r.to_json()) for r in writes]
        doc_rows = [(session_id, d.key, _dumps(d.body)) for d in docs]
        for record in writes:
            if record.session_id != session_id:
                raise ValueError(f"task {record.id!r} belongs to session {record.session_id!r}")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                actual = self._seq(session_id)
                if actual != expected_seq:
                    raise ConflictError(session_id, expected_seq, actual)
                found = self._present(session_id, absent)
                if found:
                    raise DocumentExists(session_id, found)
                self._db.executemany(
                    "INSERT INTO tasks (session_id, task_id, live, body) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (session_id, task_id) DO UPDATE SET live = excluded.live, "
                    "body = excluded.body",
                    rows,
                )
                self._db.executemany(
                    "INSERT INTO docs (session_id, key, body) VALUES (?, ?, ?) "
                    "ON CONFLICT (session_id, key) DO UPDATE SET body = excluded.body",
                    doc_rows,
                )
                self._db.execute(
                    "INSERT INTO heads (session_id, seq) VALUES (?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq",
                    (session_id, expected_seq + 1),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return expected_seq + 1

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """One document, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM docs WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
        return None if row is None else Doc(key, json.loads(row[0]))

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[Doc]:
        """Documents under ``prefix`` in key order."""
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        if limit == 0:
            return []
        # A range scan rather than LIKE: keys may hold '%' or '_'.
        low = max(prefix, start_after + "\x00") if start_after is not None else prefix
        query = "SELECT key, body FROM docs WHERE session_id = ? AND key >= ? ORDER BY key"
        params: list[Any] = [session_id, low]
        rows: list[tuple[str, str]] = []
        with self._lock:
            for key, body in self._db.execute(query, params):
                if not key.startswith(prefix):
                    break
                rows.append((key, body))
                if limit is not None and len(rows) >= limit:
                    break
        return [Doc(key, json.loads(body)) for key, body in rows]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()

    def _present(self, session_id: str, keys: Sequence[str]) -> dict[str, Any]:
        """The documents under ``keys`` that exist, by key (inside the commit's transaction)."""
        found: dict[str, Any] = {}
        for key in dict.fromkeys(keys):
            row = self._db.execute(
                "SELECT body FROM docs WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
            if row is not None:
                found[key] = json.loads(row[0])
        return found

    def _seq(self, session_id: str) -> int:
        row = self._db.execute(
            "SELECT seq FROM heads WHERE session_id = ?", (session_id,)
        ).fetchone()
        return 0 if row is None else int(row[0])


def _dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
