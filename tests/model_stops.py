"""Stopping a run inside one task's phase: what the crash and race rules of the model-based
state machine (tests/test_model_based.py) share. Which task can be stopped, where in its phase,
the model's side of the run's first commit, and waiting until the run's other invocations are
parked while the victim is stopped (or the process dies under it).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from model_kit import STOPS, Model, MSlot, MTask, Trap

from bide import Harness, ManualClock


class StopsMidPhase:
    """Mixin of the state machine: the helpers of its ``crash_mid_phase`` and
    ``race_mid_run`` rules (the attributes are the machine's)."""

    model: Model
    clock: ManualClock
    trap: Trap
    harness: Harness
    run: Callable[[Any], Any]

    def runnable(self) -> list[MTask]:
        return [t for t in self.model.live() if self.model.eligible(t, self.clock.now())]

    def can_stop_a_run(self) -> bool:
        """Some runnable task, and nothing left running by a dead harness (a run would take
        that over too)."""
        running = any(t.status == "running" for t in self.model.live())
        return not running and bool(self.runnable())

    def draw_victim(self, data: st.DataObject) -> MTask:
        """The runnable task whose phase the run stops in (the others run on)."""
        runnable = self.runnable()
        event(f"runnable at the stop: {len(runnable)}")
        return data.draw(st.sampled_from(runnable))

    def draw_stop(self, data: st.DataObject, victim: MTask) -> str:
        """Where the victim's phase stops: a ``woke`` phase anywhere in ``STOPS``; a ``start``
        phase or an abort handler at its start."""
        if victim.phase != "woke" or victim.abort_marked:
            return "start"
        return data.draw(st.sampled_from(STOPS))

    def reserve_all(self, victim: MTask, now: float, stop: str) -> dict[str, MSlot] | None:
        """The run's first commit reserves every runnable task; the others then run on until
        parked (the engine runs them concurrently while the victim is stopped). A victim
        stopped after its memo write wrote it now (durable: a crash or a takeover keeps it).

        Returns the victim's slots as its phase reads them: the record it was reserved with,
        unless its memo write is still to come; that commit sees (reloads) what other
        processes wrote meanwhile, so the phase reads the slots as they are then (None)."""
        memo_to_write = victim.phase == "woke" and f"m{victim.step}" not in victim.memos
        self.model.reserve(victim, now)
        seen = copy.deepcopy(victim.slots)
        if stop != "start":
            self.model.write_memo(victim, now)
        self.model.run_until_parked(now)  # the victim's lease is live: it is left alone
        return None if stop == "start" and memo_to_write else seen

    async def others_parked(self, h: Harness, victim: str) -> None:
        """Let the run's other invocations go on until each is where the model left it
        (parked or ended): stopping one phase must not hold the others up. Everything runs
        on one event loop on an in-memory store, so a bounded number of turns gets there."""
        others = [t for t in self.model.tasks.values() if t.id != victim]

        def behind() -> list[str]:
            late = []
            for t in others:
                record = h.task(t.id)
                assert record is not None, f"task {t.id} lost"
                state = record.state
                done = state.status == t.status and (
                    t.status == "terminal" or state.checkpoint == t.checkpoint()
                )
                if not done:
                    late.append(f"{t.id} {state.status}")
            return late

        for _ in range(60):
            if not behind():
                return
            for _ in range(5):
                await asyncio.sleep(0)
        assert not behind(), f"while a phase is stopped: {behind()}"

    async def crash_while_running(self, victim: str, clean: bool, stop: str) -> None:
        self.trap.arm(victim, stop)
        self.trap.calls = 0
        assert self.trap.hit is not None and self.trap.hang is not None
        runner = asyncio.ensure_future(self.harness.run_until_parked())
        hit = asyncio.ensure_future(self.trap.hit.wait())
        await asyncio.wait({runner, hit}, return_when=asyncio.FIRST_COMPLETED)
        assert hit.done() and not runner.done(), "the victim's phase never started"
        await self.others_parked(self.harness, victim)
        record = self.harness.task(victim)
        assert record is not None and record.status == "running"
        if clean:
            # close() cancels the phase and puts the task back to pending (no restart counted).
            await self.harness.close()
        else:
            # The process dies: the run stops every invocation and writes nothing more.
            runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        if not self.trap.hang.done():  # nothing of the dead process may run on
            self.trap.hang.cancel()
            await asyncio.sleep(0)
