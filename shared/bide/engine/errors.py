"""Bide's errors.

One root, :class:`BideError`. Each error says whether trying again can help
(:attr:`BideError.retryable`) and its message says what happens next.

Control flow that ends an invocation (a commit refused because the task was
aborted, the invocation was superseded, or the harness closed) derives from
:class:`BaseException` through :class:`InvocationEnded`, so a phase's
``except Exception`` cannot swallow it.
"""

from __future__ import annotations

from typing import Any


class BideError(Exception):
    """Root of every error Bide raises on purpose."""

    retryable: bool = False


class ConflictError(BideError):
    """A commit was based on a stale view of the session: another writer got there first.

    Nothing was written. Reload the session and decide again; never resend the same writes.
    """

    retryable = True

    def __init__(self, session_id: str, expected_seq: int, actual_seq: int | None) -> None:
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"session {session_id!r} moved on (expected seq {expected_seq}, found {actual_seq}); "
            "nothing was written: reload and decide again"
        )


class StoreUnavailable(BideError):
    """The store could not be reached or throttled us past the retry budget. Try again later."""

    retryable = True


class CommitTooLarge(BideError):
    """A commit exceeds what the store can write atomically. Nothing was written."""


class DocumentExists(BideError):
    """A commit required documents to be absent (``absent`` of
    :meth:`~bide.engine.store.Store.commit`) and some exist. Nothing was written.

    :attr:`found` maps each existing key the store named (at least one) to its body as it
    stands. Deciding again knowing those documents gives the caller the answer a read
    beforehand would have given it."""

    def __init__(self, session_id: str, found: dict[str, Any]) -> None:
        self.session_id = session_id
        self.found = found
        super().__init__(
            f"session {session_id!r}: the commit required documents {sorted(found)!r} to be "
            "absent and they exist; nothing was written: decide again knowing them"
        )


class InvalidTransition(BideError):
    """A phase asked for a state change the task model does not allow. The commit was refused."""


class InvalidPark(InvalidTransition):
    """A sleep or wait that cannot be honoured (no deadline and no keys, a consumed or expired
    key, a wait on itself, its owner, a missing task or a cycle). The commit was refused."""

    code = "invalid_park"


class InvalidWait(InvalidPark):
    """A wait on tasks that can never end it. The commit was refused."""


class UnknownTaskKind(BideError):
    """No task definition is registered under that name and version."""


class DefinitionError(BideError):
    """A task, signal or tool definition is malformed. Fix the definition; nothing ran."""


class KeyReuseError(BideError):
    """A creation key already names a different task kind or input. Use a new key."""


class HarnessClosed(BideError):
    """The harness was closed; open a new one to continue. Nothing was lost."""


class StoreFailedMidRun(BaseException):
    """A transient store error (:class:`StoreUnavailable`, or a session too busy to commit)
    inside a running invocation. It is a ``BaseException`` so that no phase or tool
    ``except Exception`` turns it into a fault or a tool error: the run stops like a crash,
    and :meth:`~bide.engine.harness.Harness.run_until_parked` re-raises :attr:`error`."""

    def __init__(self, error: BideError) -> None:
        self.error = error
        super().__init__(f"the store failed while a task ran: {error}")


class InvocationEnded(BaseException):
    """This invocation may not commit any more: the task parked or ended, was abort-marked,
    or another worker took it over. The harness handles it; phases should let it propagate."""

    def __init__(self, task_id: str, why: str) -> None:
        self.task_id = task_id
        self.why = why
        super().__init__(f"invocation of task {task_id!r} ended: {why}")
