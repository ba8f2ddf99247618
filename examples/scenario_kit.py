"""What the runnable examples share: a World that outlives processes, and a crash-resilient
runner.

A scenario is ``async def scenario(world) -> dict``. It opens a process with
``world.process()`` and drives it with idempotent steps (tasks created by key, signals that
answer ``duplicate`` when repeated, absolute clock times), so that after a simulated crash the
runner can start it again from the top, in a new process on the same store, and it converges.
That is what the crash sweep in ``tests/test_example_sweep.py`` relies on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from bide import Harness, ManualClock, SequentialIds, SQLiteStore, Store, TaskDefinition
from bide.testing import Crash

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class World:
    """The store, the clock, ids and the outside world (fake services) that survive a crash."""

    def __init__(self, store: Store | None = None, *, quiet: bool = False) -> None:
        self.store: Store = store or SQLiteStore()
        self.clock = ManualClock(START)
        self.ids = SequentialIds()
        self.quiet = quiet
        self.flags: set[str] = set()
        self.services: dict[str, Any] = {}
        self.crashes = 0

    def say(self, *parts: object) -> None:
        """Print a step of the story (silent during sweeps)."""
        if not self.quiet:
            print(*parts)

    def once(self, flag: str) -> bool:
        """True the first time ``flag`` is asked for: for steps that must happen once only
        (like a demonstration crash), even when the scenario reruns."""
        if flag in self.flags:
            return False
        self.flags.add(flag)
        return True

    def at(self, seconds: float) -> None:
        """Move the clock to ``START + seconds`` (never backward), idempotently."""
        self.clock.set(max(self.clock.now(), START + seconds))

    async def process(self, kinds: Iterable[TaskDefinition]) -> Harness:
        """A new process: a fresh harness on the same store, opened."""
        harness = Harness(self.store, "demo", kinds, clock=self.clock, ids=self.ids)
        await harness.open()
        return harness


Scenario = Callable[[World], Awaitable[dict[str, Any]]]


async def run_resilient(scenario: Scenario, world: World, attempts: int = 100) -> dict[str, Any]:
    """Run ``scenario``; after each simulated crash, run it again from the top."""
    for _ in range(attempts):
        try:
            return await scenario(world)
        except Crash as crash:
            world.crashes += 1
            world.say(f"   ** the process died ({crash}); a new one starts **")
    raise RuntimeError(f"scenario did not converge after {attempts} attempts")


def main(scenario: Scenario) -> None:
    """Run an example's scenario on the embedded default and print its story."""
    asyncio.run(run_resilient(scenario, World()))
