"""Progress a run reports (``api.progress`` of a tool, ``ctx.progress`` of a workflow),
carried to the session event stream as ``progress`` events at a bounded rate.

Reporting is frequent and cheap for the reporter (a synchronous call), so values are
**coalesced** per run (one invocation of one task): the latest value wins, and at most one
``progress`` event is written per :data:`PROGRESS_INTERVAL` seconds of the harness clock:

* a report made when the last event of the run is at least that old is written at once, in
  a commit of its own (side writes only: the task's state does not change);
* a report made sooner waits; it rides along with the run's next commit once the interval
  has passed, or is written by the next report after it;
* the value still waiting when the run parks or ends is always written, ``final``, **in the
  commit that parks or ends it** (so the last value a client sees is the last one reported).

Like every event, a ``progress`` event is written in a commit of the run that reported it:
a crash loses an unwritten value, never reports one that was not made. A commit that cannot
take two more items (the event and the stream's head) under the store's limit leaves the
value waiting; a final one is then written in a commit of its own right after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .events import EventTx, emit_in
from .store.base import MAX_COMMIT_ITEMS

#: Seconds between two ``progress`` events of one run (the harness clock).
PROGRESS_INTERVAL = 5.0


class ProgressStream:
    """One run's progress reports, coalesced (see the module). ``now`` is the harness clock;
    ``flush(write)`` commits ``write(tx)`` alone for the run, and may raise when the run can
    no longer commit (its invocation ended)."""

    def __init__(
        self,
        task_id: str,
        now: Callable[[], float],
        flush: Callable[[Callable[[EventTx], None]], None],
        *,
        interval: float = PROGRESS_INTERVAL,
    ) -> None:
        self._task_id = task_id
        self._now = now
        self._flush = flush
        self._interval = interval
        self._pending: dict[str, Any] | None = None
        self._staged: dict[str, Any] | None = None
        self._last: float | None = None
        self.busy = False
        """True while a commit of the run is being built (a report then waits for it)."""
        self.leftover: dict[str, Any] | None = None
        """A final value its commit had no room for (written right after it)."""

    def report(self, value: Any, *, tool: str | None = None, call_id: str | None = None) -> None:
        """Report ``value`` (JSON): written now when the interval has passed, else later."""
        self._pending = {"task_id": self._task_id, "tool": tool, "call_id": call_id, "value": value}
        if self.busy or not self._due():
            return  # a commit of the run is being built: it (or a later one) takes the value
        self.busy = True
        try:
            self._flush(lambda tx: self.stage(tx, final=False))
        finally:
            self.busy = False
        self.committed()

    def _due(self) -> bool:
        return self._last is None or self._now() - self._last >= self._interval

    def stage(self, tx: EventTx, *, final: bool, items: int = 0) -> None:
        """Inside a commit builder of the run (which may run more than once): add the waiting
        value to ``tx`` when due, or always when ``final`` (the commit parks or ends the run).
        ``items``: what the commit already holds, records and documents."""
        self._staged = None
        self.leftover = None
        if self._pending is None or not (final or self._due()):
            return
        if items + 2 > MAX_COMMIT_ITEMS:  # the event and the stream's head
            if final:
                self.leftover = self._pending
            return
        emit_in(tx, "progress", {**_plain(self._pending), "final": final})
        self._staged = self._pending

    def committed(self) -> None:
        """The commit whose builder ran last is durable: what it staged was written."""
        if self._staged is not None and self._staged is self._pending:
            self._pending = None
        if self._staged is not None:
            self._last = self._now()
        self._staged = None

    def write_leftover(self, tx: EventTx) -> None:
        """Write the final value its commit had no room for (a commit of its own)."""
        if self.leftover is not None:
            emit_in(tx, "progress", {**_plain(self.leftover), "final": True})


def _plain(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its value as plain JSON (a value JSON cannot hold becomes its text,
    as the in-memory log has always shown it)."""
    try:
        value = json.loads(json.dumps(report["value"], allow_nan=False, default=str))
    except ValueError:
        value = str(report["value"])
    return {**report, "value": value}
