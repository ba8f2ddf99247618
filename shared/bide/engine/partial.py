"""Partial views: a run over one task of a session, not all of its live tasks.

A run owed to one task alone (the worker answering a signal's wake: every other due thing in
the session has a wake of its own coming) need not read every live task. :func:`read_focus`
reads the session's head, the task and its owner in one consistent read
(:meth:`~bide.engine.store.base.Store.tasks_at_head`), and the harness adopts the task alone
when :func:`runs_alone` says every rule decides it the same on that view.

What keeps the view exact while the run goes on (``Harness.focus``):

* the scheduler's reservations and recoveries decide each task on itself and its owner
  (:meth:`~bide.engine.kernel.Draft.loaded`), which the view holds or ``runs_alone`` checked;
* every other reader of the session's live tasks (:meth:`~bide.engine.kernel.Draft.live`:
  an end reaching owned work, an abort's cascade, a wait's checks) and any look-up of a task
  the view does not hold (:meth:`~bide.engine.kernel.Draft.get`: a task created, signalled
  or aborted by the run) loads the whole session first; so does a commit conflict. The run
  goes on over the whole session, as a full run; a change being decided when the session
  turns out to have moved on is decided again (:class:`~bide.engine.kernel.ViewMoved`);
* what stays partial is the run's ``wake()``: it speaks for the task alone. The worker acts on
  it only when it cannot touch the session's alarm (``bide.service.worker``).
"""

from __future__ import annotations

from .records import TaskRecord
from .rules import cascade_pending
from .store.base import Store


def runs_alone(record: TaskRecord | None, owner: TaskRecord | None) -> bool:
    """Whether a run may load ``record`` and its ``owner`` (None: not loaded) and no other
    task of the session, and decide for ``record`` as a run over every live task would: the
    task is live, carries no abort mark and is not completing (those reach its owned work,
    which is not loaded), and no abort mark or owner's end is on its way to it
    (:func:`cascade_pending`, the one rule that reads another task to run it)."""
    if record is None or not record.live or record.abort_marked:
        return False
    if record.state.status == "completing":
        return False
    if record.owner is None:
        return True
    if owner is None or owner.id != record.owner:
        return False
    return not cascade_pending(record, {owner.id: owner})


def read_focus(
    store: Store, session_id: str, task_id: str, owner_id: str | None
) -> tuple[int, TaskRecord] | None:
    """The head's seq and the task, read with its owner at that seq, when the task may run
    on a view holding it alone; None when the run must load the whole session."""
    seq, found = store.tasks_at_head(
        session_id, [task_id] if owner_id is None else [task_id, owner_id]
    )
    record = found.get(task_id)
    owner = found.get(owner_id) if owner_id is not None else None
    if record is None or not runs_alone(record, owner):
        return None
    return seq, record
