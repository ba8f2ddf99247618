"""The processes of the model-based state machines (``tests/test_model_based.py`` and
``tests/test_model_based_tools.py``): each machine owns an event loop and a store, and plays
every process of its one session with a harness on that store, all on the machine's clock and
id source (ids must stay unique in the session across "processes")."""

from __future__ import annotations

import asyncio
from typing import Any

from model_kit import LEASE, RESTART_LIMIT

from bide import Harness, ManualClock, SequentialIds


class HarnessProcesses:
    """Mixin of a state machine: harnesses as the session's processes (the attributes are
    the machine's; it names the task kinds a harness runs in :meth:`harness_kinds`)."""

    session: str
    loop: asyncio.AbstractEventLoop
    store: Any
    clock: ManualClock
    ids: SequentialIds
    harness: Harness

    def harness_kinds(self) -> list[Any]:
        """The task kinds every harness of the session runs."""
        raise NotImplementedError

    def run(self, coro: Any) -> Any:
        """Run ``coro`` to its end on the machine's loop."""
        return self.loop.run_until_complete(coro)

    def new_harness(
        self, focus: tuple[str, str | None] | None = None, *, defer: bool = False
    ) -> Harness:
        """A harness (a process) for the session, not yet attached; with ``focus``, one that
        opens on that task alone when it may (a worker's targeted pass for a signal's wake);
        ``defer``: it holds that task's reservation until the task's first commit (a wake's
        first delivery: bide.engine.deferred)."""
        return Harness(
            self.store,
            self.session,
            self.harness_kinds(),
            clock=self.clock,
            ids=self.ids,
            restart_limit=RESTART_LIMIT,
            lease_seconds=LEASE,
            focus=focus,
            hold_reservation=defer,
        )

    def targeted_pass(self, task_id: str, owner: str | None, *, defer: bool = False) -> bool:
        """A worker's targeted pass for a signal's wake to ``task_id`` (``owner``: the id the
        wake names with it), in a process of its own; whether it stayed partial. ``defer``: as
        on a wake's first delivery, the task's reservation rides with its first commit."""

        async def targeted() -> bool:
            h = self.new_harness(focus=(task_id, owner), defer=defer)
            await h.open()
            await h.run_until_parked()
            partial = h.partial
            await h.close()
            return partial

        return bool(self.run(targeted()))

    def open_harness(self) -> Harness:
        """A process that opens the session (and so recovers what a dead one left)."""
        h = self.new_harness()
        self.run(h.open())
        return h

    def observer(self) -> Harness:
        """A harness attached to the store as it stands (another process's view): the
        running harness may not have seen what other processes wrote."""
        h = self.new_harness()
        self.run(h.attach())
        return h

    def teardown(self) -> None:
        """Close the running harness, then the loop and the store."""
        try:
            self.run(self.harness.close())
        finally:
            self.loop.close()
            self.store.close()
