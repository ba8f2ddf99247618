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

A task with sealed memo pages (a long workflow body) replays from them. A signal's wake
carries the page count the delivery read (a :data:`PageHint`), so the same read also fetches
the pages the process's page cache lacks (:func:`~bide.engine.memo_pages.pages_to_read`, at
most :data:`~bide.engine.memo_pages.AT_HEAD_PAGES`) and they enter that cache as pages read
from the store: a cold worker replays the body with no listing of its pages. The hint only
chooses what to read: pages are counted by the record read, so a page the hint did not name
(a stale count) is read as ever, by the replay.
"""

from __future__ import annotations

from . import memo_pages
from .records import TaskRecord
from .rules import cascade_pending
from .store.base import Store

PageHint = tuple[int, float]
"""``(sealed memo pages, created_at)`` of a task as a reader of its record saw them."""

Focus = tuple[str, str | None] | tuple[str, str | None, PageHint | None]
"""What a targeted run reads: ``(task id, its owner's id or None)``, and optionally the
task's :data:`PageHint`."""


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
    store: Store,
    session_id: str,
    task_id: str,
    owner_id: str | None,
    pages: PageHint | None = None,
) -> tuple[int, TaskRecord] | None:
    """The head's seq and the task, read with its owner at that seq, when the task may run
    on a view holding it alone; None when the run must load the whole session. With
    ``pages``, the task's sealed pages the process's page cache lacks are read in the same
    read and put in it (under ``store`` and the session, as a harness on them reads them)."""
    scope = memo_pages.session_scope(store, session_id)
    keys = memo_pages.pages_to_read(scope, task_id, pages)
    seq, found, docs = store.tasks_at_head(
        session_id, [task_id] if owner_id is None else [task_id, owner_id], keys
    )
    record = found.get(task_id)
    if record is not None and scope is not None:
        memo_pages.keep_read(scope, record, docs)
    owner = found.get(owner_id) if owner_id is not None else None
    if record is None or not runs_alone(record, owner):
        return None
    return seq, record
