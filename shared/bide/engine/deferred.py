"""A run that starts one task: its reservation committed with the task's first commit.

A run starts a task by committing it ``running`` under the run's invocation (the
reservation: ``scheduler.start``, with the final slots its wake leaves moved off its record),
then runs the phase, whose first commit (a tool's intent, a task's next sleep) follows at
once. When the harness is asked to (``Harness(hold_reservation=True)``) and a reservation
commit would start exactly one task and write nothing else, it is held in memory instead,
adopted into the harness's view as if committed, and written by the next commit, whatever it
is: one transaction fewer for a signal's or an alarm's wake that runs one task.

What changes and why it is safe:

* A crash before that commit leaves the task as it was (parked with its value or its
  deadline passed, or pending): the wake is delivered again and the next run starts it, as
  after a crash right before the reservation. Nothing of the phase was durable. What is not
  counted is a restart: so the worker holds only on a wake's first delivery and attempt; a
  delivery after a failed one reserves first, as every run did, and its crashes count
  (``bide.service.worker_batch``).
* While held, the reservation is not in the store, so no lease keeps another process off the
  task. One worker runs a session at a time (the wake queue's FIFO group per session); the
  rare overlap (a redelivery while a slow run is still going) is bounded by
  ``Harness.hold_flush_seconds``: a phase that has not committed by then gets its
  reservation committed alone.
* A conflict (another writer moved the session on) reloads the view; the held reservation is
  staged again on the new view (same invocation, same checkpoint, same wake) when the task
  still stands where it was found. If not (it was aborted, signalled into another wake, or
  started elsewhere) it is dropped, and the phase's commit is refused as for any task the run
  no longer holds (``InvocationEnded``): the phase's work runs again, as after a crash.
"""

from __future__ import annotations

from . import scheduler
from .kernel import Draft, Kernel
from .state import Running


def may_hold(draft: Draft) -> bool:
    """Whether ``draft`` is a reservation of one task alone, which may be held: it writes that
    task's record (running) and the slot documents it moves, and needs no key checked absent."""
    if len(draft.writes) != 1 or draft.absent:
        return False
    (record,) = draft.writes.values()
    return isinstance(record.state, Running)


def restage(h: Kernel, held: Draft) -> Draft | None:
    """``held``'s reservation staged again on the harness's current view (after a reload),
    or None when the task no longer starts the same way (checkpoint, wake)."""
    ((task_id, before),) = held.writes.items()
    old = before.state
    assert isinstance(old, Running)
    record = h._live.get(task_id)
    if record is None or isinstance(record.state, Running):
        return None
    draft = Draft(h)
    now = h.clock.now()
    live = draft.loaded()
    running = scheduler.start(
        h, draft, record, now, scheduler.lease_until(h, now), live, old.invocation
    )
    if running is None or (running.checkpoint, running.wake) != (old.checkpoint, old.wake):
        return None
    return draft


def merged(held: Draft, draft: Draft) -> Draft:
    """One commit of ``held`` (a reservation) and ``draft`` (the change that follows it):
    the change's records and documents replace the reservation's."""
    out = Draft(draft.harness)
    out.writes = {**held.writes, **draft.writes}
    out.docs = {**held.docs, **draft.docs}
    out.absent = held.absent | draft.absent
    return out
