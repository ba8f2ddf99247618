"""Time as a port. The engine reads time only through a :class:`Clock`.

Times are seconds since the Unix epoch as ``float`` (the same scale as ``time.time()``).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine gets the current time."""

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> float:
        """Seconds since the Unix epoch, from the operating system."""
        return time.time()


class ManualClock:
    """A clock that moves only when told to; a 7-day sleep tests in microseconds."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)

    def now(self) -> float:
        """The time the clock was last set or advanced to."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never backward) and return the new time."""
        if seconds < 0:
            raise ValueError("a ManualClock never moves backward")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        """Jump to ``when`` (must not be earlier than now)."""
        if when < self._now:
            raise ValueError("a ManualClock never moves backward")
        self._now = float(when)


MINUTE = 60.0
HOUR = 60 * MINUTE
DAY = 24 * HOUR
