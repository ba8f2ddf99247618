"""The host's commands on promises: create, resolve, reject, cancel, read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.failures import SignalFailure
from ..engine.host import host_commit
from .core import cancel_promise, create_promise, list_promises, read_promise, resolve_promise
from .model import PromiseDoc
from .rules import ResolveResult

if TYPE_CHECKING:
    from ..engine.harness import Harness


class Promises:
    """Promises of one session's harness, for hosts (a webhook route, a UI, a test).

    The harness must run :data:`~bide.promises.DEADLINE_KEEPER` (see
    :func:`~bide.promises.promise_task_kinds`; a :class:`bide.app.App` lists it).
    """

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def get(self, promise_id: str) -> PromiseDoc | None:
        """A promise, or None."""
        return read_promise(self.harness, promise_id)

    def all(self) -> list[PromiseDoc]:
        """Every promise of the session."""
        return list_promises(self.harness)

    async def create(self, promise_id: str, **options: Any) -> PromiseDoc:
        """Create an open promise (see :func:`~bide.promises.create_promise` for options)."""
        return host_commit(self.harness, lambda tx: create_promise(tx, promise_id, **options))

    async def resolve(self, promise_id: str, value: Any = None) -> ResolveResult:
        """End the promise with a value (first terminal write wins)."""
        return host_commit(
            self.harness, lambda tx: resolve_promise(tx, promise_id, "resolved", value)
        )

    async def reject(
        self, promise_id: str, error: str | SignalFailure, *, type: str | None = None
    ) -> ResolveResult:
        """End the promise with an error (first terminal write wins). The error has a type:
        pass a :class:`~bide.SignalFailure` (type, message, data), or a message and
        ``type=``; a bare message is typed ``Rejected``."""
        failure = error if isinstance(error, SignalFailure) else None
        if failure is None and type is not None:
            failure = SignalFailure(type, str(error))
        message = None if failure is not None else str(error)
        return host_commit(
            self.harness,
            lambda tx: resolve_promise(tx, promise_id, "rejected", error=message, failure=failure),
        )

    async def cancel(self, promise_id: str, reason: str | None = None) -> ResolveResult:
        """Cancel the promise: its producer gets a notice; a later success is ignored."""
        return host_commit(self.harness, lambda tx: cancel_promise(tx, promise_id, reason))
