"""Tools for testing durability claims: a store that crashes the process at a chosen write.

:class:`FaultyStore` wraps any :class:`~bide.engine.store.Store` and raises :class:`Crash` at the
N-th commit, either before the write reaches the store or right after it did. ``Crash`` is a
``BaseException`` so no ``except Exception`` in engine or user code can swallow it: like a
real process death, it unwinds everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from .engine.records import TaskRecord
from .engine.store.base import Doc, Store
from .engine.store.wrapper import StoreWrapper


class Crash(BaseException):
    """The simulated process died here."""


class FaultyStore(StoreWrapper):
    """A Store that dies at the ``fail_at``-th commit (1-based), or at the first commit whose
    writes satisfy ``match``; ``when`` = ``before`` (nothing written) or ``after`` (written,
    then the process dies before it learns so). ``commits`` counts the commits attempted.
    Every other call passes straight through to ``inner``."""

    def __init__(
        self,
        inner: Store,
        fail_at: int | None = None,
        when: Literal["before", "after"] = "before",
        match: Callable[[Sequence[TaskRecord]], bool] | None = None,
    ) -> None:
        super().__init__(inner)
        self.fail_at = fail_at
        self.match = match
        self.when = when
        self.commits = 0
        self.crashed = False

    def disarm(self) -> None:
        """No more faults (the restarted process)."""
        self.fail_at = None
        self.match = None

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
    ) -> int:
        """Pass through, or crash at the chosen commit."""
        self.commits += 1
        hit = (self.fail_at is not None and self.commits == self.fail_at) or (
            self.match is not None and self.match(writes)
        )
        if hit:
            self.disarm()  # one death per arming
        if hit and self.when == "before":
            self.crashed = True
            raise Crash(f"crash before commit {self.commits}")
        seq = self.inner.commit(session_id, expected_seq, writes, docs)
        if hit:
            self.crashed = True
            raise Crash(f"crash after commit {self.commits}")
        return seq
