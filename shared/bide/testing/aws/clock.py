"""Simulated time for the AWS twin: a discrete-event clock and an asyncio loop that runs on it.

:class:`SimClock` is a :class:`~bide.engine.clock.Clock` (``now()``) that moves only when the
simulation moves it: hours pass in milliseconds and nothing ever reads the wall clock. Timers
(``call_at``) are the discrete events (a schedule firing, a message becoming visible).

:meth:`SimClock.run` runs a coroutine on an asyncio event loop whose ``time()`` *is* the
simulated clock: when every coroutine is waiting, the loop jumps straight to the next due
timer (its own or the clock's) instead of blocking. So ``asyncio.sleep``, ``asyncio.wait_for``
and :meth:`SimClock.sleep` all wait in simulated time, and a Lambda timeout cancels a handler
wherever it awaits. Work handed to threads (``asyncio.to_thread``) is not simulated: the loop
never waits for a thread, so keep simulated code on the loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z, like ManualClock


class SimulationStalled(RuntimeError):
    """Every coroutine waits for something no timer will ever bring: the simulation cannot
    advance (a deadlock of the code under test, or a missing driver)."""


@dataclass(order=True)
class Timer:
    """One scheduled event; :meth:`cancel` it to drop it."""

    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        """The event will not happen."""
        self.cancelled = True


class SimClock:
    """A discrete-event clock: ``now()`` moves only by :meth:`advance`, :meth:`run_until`
    or inside :meth:`run` when every coroutine waits. Timers fire in time order (ties in
    the order they were set), each at its own instant."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = float(start)
        self._timers: list[Timer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        """Simulated seconds since the Unix epoch."""
        return self._now

    # --- timers -------------------------------------------------------------------------------

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` at simulated time ``when`` (at once on the next step if past)."""
        timer = Timer(max(float(when), self._now), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` ``delay`` simulated seconds from now."""
        return self.call_at(self._now + max(0.0, delay), callback)

    def next_timer(self) -> float | None:
        """When the next live timer is due, or None."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0].when if self._timers else None

    def run_until(self, when: float) -> None:
        """Fire every timer due up to ``when`` in order (the clock standing at each one's
        time), then stand at ``when``. Never moves backward."""
        if when < self._now:
            raise ValueError("simulated time never moves backward")
        while (due := self.next_timer()) is not None and due <= when:
            timer = heapq.heappop(self._timers)
            self._now = max(self._now, timer.when)
            timer.callback()
        self._now = float(when)

    def advance(self, seconds: float) -> float:
        """Move forward ``seconds``, firing the timers on the way; the new time. Usable as a
        synchronous ``sleep`` (e.g. a store's retry backoff) inside a simulation too."""
        if seconds < 0:
            raise ValueError("simulated time never moves backward")
        self.run_until(self._now + seconds)
        return self._now

    # --- coroutines ---------------------------------------------------------------------------

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time (inside :meth:`run` only)."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, _SimLoop) or loop.clock is not self:
            raise RuntimeError("SimClock.sleep must run inside this clock's SimClock.run(...)")
        await asyncio.sleep(max(0.0, seconds))

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` to completion on a loop in simulated time; tasks it left running are
        cancelled afterwards. Raises :class:`SimulationStalled` on a deadlock."""
        loop = _SimLoop(self)
        try:
            return loop.run_until_complete(main)
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def _step(self, limit: float | None) -> None:
        """The loop waits at most until ``limit`` (None: forever): jump to the earlier of the
        next clock timer and ``limit``."""
        due = self.next_timer()
        if due is not None and (limit is None or due <= limit):
            self.run_until(due)
        elif limit is not None:
            self._now = max(self._now, limit)
        else:
            raise SimulationStalled(
                "every coroutine is waiting and no timer is due: the simulation cannot advance"
            )


class _SimSelector(selectors.BaseSelector):
    """Never blocks: a wait of ``timeout`` seconds is a jump of the simulated clock."""

    def __init__(self, clock: SimClock) -> None:
        self._clock = clock
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            self._clock._step(None)
        elif timeout <= 0:
            self._clock._step(self._clock.now())
        else:
            self._clock._step(self._clock.now() + timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return dict(self._keys)

    def close(self) -> None:
        self._keys.clear()


class _SimLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is the simulated clock's."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        super().__init__(_SimSelector(clock))
        # asyncio runs a timer once time() + resolution reaches it. Epoch seconds as floats
        # are spaced ~2.4e-7 apart, so "now + (when - now)" can land a hair short of "when";
        # a microsecond of resolution absorbs that rounding (else the loop would spin).
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self.clock.now()
