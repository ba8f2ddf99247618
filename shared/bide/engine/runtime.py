"""The TaskRuntime a phase receives, and the Tx its commit builder receives."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from . import memo_pages, slots
from .errors import InvalidTransition, InvocationEnded
from .failures import SignalFailed
from .host import HostTx
from .ids import keyed_id
from .kernel import Draft, Kernel, require_json
from .progress import ProgressStream
from .records import TaskRecord
from .rules import bump, check_sleep, check_wait
from .signals import SignalExpired, SignalKey, SignalState, SignalToken, SignalValue, slot_name
from .state import (
    Completing,
    Faulted,
    Outcome,
    Pending,
    Running,
    Sleeping,
    TaskState,
    Terminal,
    Waiting,
)
from .store.base import MAX_COMMIT_ITEMS
from .tasks import StateOrBuilder, TaskDefinition

T = TypeVar("T")
R = TypeVar("R")
_MISSING: Any = object()


class Runtime:
    """One invocation's handle on its task. Commits are refused (with
    :class:`~bide.engine.errors.InvocationEnded`) once the task parked, ended, was abort-marked
    (except in the abort handler) or was taken over by another worker."""

    def __init__(self, harness: Kernel, record: TaskRecord, invocation: str, *, aborting: bool):
        self._h = harness
        self._task_id = record.id
        self._invocation = invocation
        self._aborting = aborting
        assert isinstance(record.state, Running)
        self._start = record.state.checkpoint
        self.progressed = False
        self._sealed = memo_pages.SealedCache(
            harness.get_doc, memo_pages.page_scope(harness), list_docs=harness.list_docs
        )
        self.progress = ProgressStream(record.id, self.now, self._flush_progress)
        """This run's progress reports, carried to the event stream (bide.engine.progress)."""
        self._staged: dict[str, Any] = {}  # memos written with the next commit of the task

    @property
    def task_id(self) -> str:
        """The running task's id."""
        return self._task_id

    @property
    def session_id(self) -> str:
        """The session the task belongs to."""
        return self._h.session_id

    @property
    def restarts(self) -> int:
        """Restarts counted since the task last moved on (a park or a new checkpoint resets
        them): above 0, an earlier run of this checkpoint was cut off."""
        record = self._h._live.get(self._task_id)
        return 0 if record is None else record.restarts

    @property
    def aborted(self) -> bool:
        """True once the task carries an abort mark."""
        record = self._h._live.get(self._task_id)
        return record is not None and record.abort_marked

    def now(self) -> float:
        """The harness clock."""
        return self._h.clock.now()

    def new_id(self, prefix: str = "") -> str:
        """A fresh id from the harness's id source (128 random bits in production)."""
        return self._h.ids.new_id(prefix)

    @property
    def services(self) -> dict[str, Any]:
        """Values the host provided (e.g. ``webhook_base_url``)."""
        return self._h.services

    async def commit(self, state: StateOrBuilder) -> None:
        """Write the task's new state atomically with what the builder adds through ``tx``."""

        def write(d: Draft) -> bool:
            self._holder(d)
            tx = _Tx(self._h, d, self._task_id, sealed=self._sealed)
            self._write_staged(tx)
            new = state(tx) if callable(state) else state
            if new is None:  # side writes only (child tasks, signals, memos); state unchanged
                self.progress.stage(tx, final=False, items=_items(d))
                return False
            moved = self._transition(d, self._holder(d), new)
            # Progress waiting when the run parks or ends is written with that commit.
            final = not isinstance(new, Running)
            self.progress.stage(tx, final=final, items=_items(d))
            return moved

        self.progress.busy = True  # a report made inside the builder waits for this commit
        try:
            progressed = self._h._apply(write)
        finally:
            self.progress.busy = False
        self._staged.clear()
        self.progress.committed()
        if self.progress.leftover is not None:  # the final commit had no room for it
            self._h._apply(lambda d: self.progress.write_leftover(HostTx(self._h, d)))
        self.progressed = self.progressed or progressed

    @property
    def abort_event(self) -> asyncio.Event:
        """Set once the task is abort-marked: long-running code can watch it to stop early."""
        return self._h.abort_event(self._task_id)

    async def wait_outcome(self, task_id: str) -> Outcome:
        """Wait in memory for another task (e.g. a nested call this one started) to end."""
        return await self._h.wait_outcome(task_id)

    def recorded(self, name: str) -> Any:
        """The memo ``name`` as recorded (on the record or sealed in a page), or None: what
        :meth:`memo` returns without a candidate, without a coroutine (a replay looks up two
        memos per operation it passes). Read it only: it may be shared with other
        invocations (copy it with :func:`~bide.engine.memo_pages.unshared` to hand it out)."""
        found = self._find(name)
        return None if found is memo_pages.MISSING else found

    def recorded_pair(self, first: str, second: str) -> tuple[Any, Any]:
        """``(recorded(first), recorded(second))`` in one look-up of the record: a replay
        reads an operation's record and its resolution for each operation it passes."""
        record = self._h._live.get(self._task_id)
        if record is None:
            return None, None
        a, b = self._sealed.find(record, first), self._sealed.find(record, second)
        if b is memo_pages.MISSING and self._staged:  # held for the next commit (stage_memo)
            a = self._staged.get(first, None) if a is memo_pages.MISSING else a
            b = self._staged.get(second, b)
        return (None if a is memo_pages.MISSING else a), (None if b is memo_pages.MISSING else b)

    def recorded_memos(self) -> dict[str, Any]:
        """Every memo of the task by name, the sealed pages' then the record's, as recorded
        (read them only, like :meth:`recorded`): for views that list them."""
        record = self._h._live.get(self._task_id)
        return {} if record is None else self._sealed.every(record)

    def _find(self, name: str) -> Any:
        record = self._h._live.get(self._task_id)
        if record is None:
            return memo_pages.MISSING
        found = self._sealed.find(record, name)  # on the record, or sealed in a page
        if found is memo_pages.MISSING:
            # Held for the next commit (stage_memo): this run already decided it.
            return self._staged.get(name, memo_pages.MISSING)
        return found

    async def memo(self, name: str, candidate: Any = _MISSING) -> Any:
        """First-writer-wins memo; durable when this returns (with ``candidate``; without
        one, a memo held for the next commit is returned as held). Its commit carries the
        memos held for the task's next commit (:meth:`stage_memo`)."""
        found = self._find(name)
        if found is not memo_pages.MISSING and (candidate is _MISSING or name not in self._staged):
            return memo_pages.unshared(found)
        if candidate is _MISSING:
            return None
        require_json(candidate, f"memo {name!r}")

        def write(d: Draft) -> Any:
            tx = _Tx(self._h, d, self._task_id, holder=self._holder, sealed=self._sealed)
            self._write_staged(tx)
            return tx.memo(name, candidate)

        written = self._h._apply(write)
        self._staged.clear()
        return written

    def stage_memo(self, name: str, value: Any) -> Any:
        """Write memo ``name`` (first writer wins) with the task's next commit, not alone: for
        a memo nothing outside the task sees before that commit, so a crash before it leaves
        what a crash before this call leaves (the run, replayed, writes it again). The value
        staged first for ``name`` (this one, or an earlier call's not yet committed).

        Every commit of the run carries what is held (:meth:`commit`, :meth:`write`, a
        :meth:`memo` it writes, a progress event), and this run's reads see it
        (:meth:`recorded`); a caller about to act outside the task on what it holds commits
        it first (:meth:`flush_staged`)."""
        require_json(value, f"memo {name!r}")
        return self._staged.setdefault(name, value)

    @property
    def holds_memos(self) -> bool:
        """Whether memos are held for the next commit (:meth:`stage_memo`)."""
        return bool(self._staged)

    async def flush_staged(self) -> None:
        """Commit the memos held for the next commit now, alone (side writes only): before
        the run does something outside the task that may depend on them (a workflow step
        runs its code). Nothing when none is held."""
        if self._staged:
            await self.commit(lambda tx: None)

    def _write_staged(self, tx: _Tx) -> None:
        for name, value in self._staged.items():
            tx.memo(name, value)

    async def read_signal(
        self, token: SignalToken[T], key: str, *, read: bool = True
    ) -> SignalState[T] | None:
        """The key's value, failure (:class:`SignalFailed`), expired, or None: from the record
        in memory, or for a consumed or expired key from its document (cached once read or
        written by this harness). With ``read=False`` a document this harness does not know
        is not read and the key found None: for a caller that parks on the key when it finds
        None, since the park's commit requires that document absent (no request of its own)
        and is refused with :class:`~bide.engine.errors.InvalidPark` once it proves there."""
        record = self._h._live.get(self._task_id)
        if record is None:
            return None
        name = slot_name(token.name, key)
        slot = record.signals.get(name)
        if slot is None and (read or slots.doc_key(self._task_id, name) in self._h._docs):
            slot = slots.lookup(self._h.get_doc, self._task_id)(name)
        if slot is None:
            return None
        if slot.failure is not None:
            return SignalFailed(**slot.failure)
        if slot.has_value:
            return SignalValue(token.load(slot.value, slot.version or token.version))
        if slot.expired:
            return SignalExpired()
        return None

    def unread_slots(self, names: Iterable[str]) -> frozenset[str]:
        """The slots among ``names`` (the task's keys, :func:`~bide.engine.signals.slot_name`)
        whose signal document this harness has not read, written or proven absent: a park
        on them requires the document absent, and a park refused because one exists learns
        it (then it is read)."""
        known = self._h._docs
        return frozenset(n for n in names if slots.doc_key(self._task_id, n) not in known)

    async def outcome(self, task_id: str) -> Outcome | None:
        """Another task's outcome once terminal."""
        return self._h.outcome(task_id)

    def get_doc(self, key: str) -> Any:
        """A committed document's body (None when absent)."""
        return self._h.get_doc(key)

    def list_docs(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, Any]]:
        """Committed documents under ``prefix``, in key order (after ``start_after``, at most
        ``limit``: see :meth:`bide.engine.store.Store.list_docs`)."""
        found = self._h.list_docs(prefix, start_after=start_after, limit=limit)
        return [(d.key, d.body) for d in found]

    async def write(self, change: Callable[[_Tx], R]) -> R:
        """Commit side writes (documents, child tasks, signals) without changing the task's
        state; returns what ``change`` returned. ``change`` may run more than once."""
        box: list[R] = []

        def build(tx: _Tx) -> None:
            box.clear()
            box.append(change(tx))

        await self.commit(build)  # type: ignore[arg-type]
        return box[0]

    # --- internals ---------------------------------------------------------------------------

    def _flush_progress(self, write: Callable[[_Tx], None]) -> None:
        """Commit a progress event (side writes only), with the memos held for the next
        commit: the event may tell what they decided. A run that can no longer commit drops
        it: the report was made by an invocation that is over."""

        def change(d: Draft) -> None:
            self._holder(d)
            tx = _Tx(self._h, d, self._task_id, holder=self._holder, sealed=self._sealed)
            self._write_staged(tx)
            write(tx)

        with contextlib.suppress(InvocationEnded):
            self._h._apply(change)
            self._staged.clear()

    def _holder(self, d: Draft) -> TaskRecord:
        record = d.get(self._task_id)
        state = record.state if record is not None else None
        if not isinstance(state, Running) or state.invocation != self._invocation:
            raise InvocationEnded(self._task_id, "the task parked, ended or was taken over")
        assert record is not None
        if record.abort_marked and not self._aborting:
            raise InvocationEnded(self._task_id, "the task was abort-marked")
        return record

    def _transition(self, d: Draft, record: TaskRecord, new: TaskState) -> bool:
        """Stage ``record`` moving to ``new``; return whether that is durable progress."""
        current = record.state
        assert isinstance(current, Running)
        if self._aborting and not isinstance(new, Terminal):
            raise InvalidTransition(
                f"task {record.id!r}: an abort handler must commit a terminal state, "
                f"not {new.status!r}"
            )
        if isinstance(new, Completing):
            raise InvalidTransition("'completing' is set by the engine, not committed by phases")
        if isinstance(new, Terminal):
            self._h._finish(d, record, new.outcome)
            return True
        if isinstance(new, Running | Pending):
            same = new.checkpoint == current.checkpoint
            wake = current.wake if same else None
            if isinstance(new, Running):
                # A phase that commits progress and runs on renews its lease: a long tool
                # run that checkpoints is not taken for abandoned.
                lease = self._h.lease_seconds
                staged: TaskState = Running(
                    checkpoint=new.checkpoint,
                    wake=wake,
                    invocation=self._invocation,
                    lease_until=None if lease is None else self._h.clock.now() + lease,
                )
            else:
                staged = Pending(checkpoint=new.checkpoint, wake=wake)
            progress = new.checkpoint != self._start
            restarts = 0 if progress else record.restarts
            if not progress and isinstance(new, Pending):
                # Yielding back unchanged is allowed (e.g. rerun gates at once) but counted
                # like a restart, so a phase that only ever yields cannot spin forever.
                restarts += 1
                if restarts > self._h.restart_limit:
                    error = f"phase {current.checkpoint['phase']!r} kept yielding without progress"
                    self._h._finish(d, record, Faulted(error=error))
                    return True
            d.put(bump(record, state=staged, restarts=restarts))
            return progress
        if isinstance(new, Sleeping):
            # A fresh key is not read: the commit requires its document absent instead.
            check_sleep(record, new, moved=d.moved_unread(record.id))
            # The heartbeat clock starts when the sleep parks; a phase cannot choose beat_by.
            beat_by = None if new.heartbeat is None else self._h.clock.now() + new.heartbeat
            new = new.replace(beat_by=beat_by)
        elif isinstance(new, Waiting):
            check_wait(record, new, d.live(), lambda t: d.find(t) is not None)
        else:  # pragma: no cover - the union is closed
            raise InvalidTransition(f"unknown state {new!r}")
        d.put(bump(record, state=new, restarts=0))
        return True


_SEAL_ROOM = MAX_COMMIT_ITEMS - 8
"""A memo seals a page only while its commit stays this far under the store's item limit:
room for what the builder writes after it (progress events, a stream's head)."""


def _items(d: Draft) -> int:
    return len(d.writes) + len(d.docs)


class _Tx(HostTx):
    """The ``tx`` a commit builder receives: a host transaction whose committing task owns
    what it creates, and which can write that task's memos."""

    def __init__(
        self,
        harness: Kernel,
        d: Draft,
        task_id: str,
        holder: Any = None,
        sealed: memo_pages.SealedCache | None = None,
    ) -> None:
        super().__init__(harness, d)
        self._task_id = task_id
        self._holder = holder
        self._sealed = sealed  # the runtime's: committed pages read once

    @property
    def task_id(self) -> str:
        """The committing task."""
        return self._task_id

    def create_task(
        self,
        kind: TaskDefinition,
        input: Any = None,
        *,
        key: str | None = None,
        background: bool = False,
        owner: str | None = _MISSING,
    ) -> str:
        """Create a task in this commit, owned by the committing task unless ``owner`` says
        otherwise (None: a top-level task)."""
        owned_by = self._task_id if owner is _MISSING else owner
        return super().create_task(kind, input, key=key, background=background, owner=owned_by)

    def find(self, task_id: str) -> TaskRecord | None:
        """A task of this session as this commit would leave it (live or ended), or None."""
        return self._d.find(task_id)

    def keyed_id(self, key: str, owner: str | None = _MISSING) -> str:
        """The id a task created with ``key`` (by ``owner``, default: the committing task)
        has or will have."""
        owned_by = self._task_id if owner is _MISSING else owner
        return keyed_id("t-", self._h.session_id, owned_by or "", key)

    def memo(self, name: str, value: Any) -> Any:
        """First-writer-wins memo on the committing task, in this commit. A memo that
        passes a page moves the oldest ones to a sealed page in this commit, when it has room
        (:mod:`bide.engine.memo_pages`; else a later memo seals it)."""
        record = self._holder(self._d) if self._holder else self._d.get(self._task_id)
        assert record is not None
        adopted = self._h._live.get(self._task_id)
        committed = None
        if self._sealed is not None and adopted is not None:
            committed = (self._sealed, adopted.memo_pages)
        found = memo_pages.find(self._d.get_doc, record, name, committed)
        if found is not memo_pages.MISSING:
            return memo_pages.unshared(found)
        require_json(value, f"memo {name!r}")
        written = bump(record, memos={**record.memos, name: value})
        sealed = memo_pages.seal(written)
        if sealed is not None and _items(self._d) + memo_pages.PAGE_ITEMS <= _SEAL_ROOM:
            written, key, page = sealed
            self._d.put_doc(key, page)
        self._d.put(written)
        return value

    def consume(self, key: SignalKey[Any]) -> bool:
        """Mark the committing task's unconsumed value under ``key`` consumed, in this commit,
        as a wake on it would: no sleep may name the key again and a later value is a
        ``duplicate``. For a task that read the value without sleeping on the key (a mailbox
        reader): the slot then leaves the record instead of staying there unused. False when
        the record holds no unconsumed value under ``key``."""
        record = self._holder(self._d) if self._holder else self._d.get(self._task_id)
        assert record is not None
        slot = record.signals.get(key.slot)
        if slot is None or not slot.has_value or slot.consumed:
            return False
        self._d.put_doc(
            slots.doc_key(record.id, key.slot),
            slots.to_body(key.slot, slot.replace(consumed=True)),
        )
        kept = {name: s for name, s in record.signals.items() if name != key.slot}
        self._d.put(bump(record, signals=kept))
        return True
