"""The Harness: one session's task graph, run until every task is parked or ended.

The harness is the only code that talks to the store. Every change is one atomic commit
conditioned on the session's sequence number; state is adopted in memory only after the store
accepted it. On a conflict the harness reloads and evaluates the change again against the
fresh view (optimistic concurrency), so a concurrent signal never interrupts running work,
while a concurrent abort or takeover ends the stale invocation.

Long because: the harness is the session's one public face (open, run, signal, close,
queries) over the scheduler; splitting it would split that face.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from . import creation, deferred, scheduler
from .budgets import check_commit
from .clock import Clock, SystemClock
from .errors import (
    ConflictError,
    DefinitionError,
    DocumentExists,
    HarnessClosed,
    StoreFailedMidRun,
    StoreUnavailable,
)
from .ids import IdSource, RandomIds
from .kernel import IN_INVOCATION, ViewMoved
from .kernel import Draft as Draft  # re-exported: callers building commits look for it here
from .partial import Focus, PageHint, read_focus
from .records import TaskRecord
from .rules import (
    SignalDecision,
    Wake,
    bump,
    compute_wake,
    descendants,
    ended_outcome,
    live_children,
)
from .signals import SignalResult, SignalToken
from .state import Completing, Outcome, Running, Terminal
from .store.base import MAX_COMMIT_ITEMS, Doc, Store
from .tasks import TaskDefinition

R = TypeVar("R")

DEFAULT_RESTART_LIMIT = 5
_COMMIT_ATTEMPTS = 8
_MARK_BUDGET = scheduler.MARK_BUDGET  # descendants marked in the commit that ends or aborts
# Store errors that stop a run like a crash when raised inside an invocation (not a fault).
_TRANSIENT = (StoreUnavailable, ConflictError)


class Harness:
    """Runs one session. Create it, ``await open()``, then create tasks, deliver signals and
    ``await run_until_parked()``; ``wake()`` says whether and when it must run again."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        tasks: Iterable[TaskDefinition] = (),
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        restart_limit: int = DEFAULT_RESTART_LIMIT,
        services: dict[str, Any] | None = None,
        lease_seconds: float | None = None,
        woken_after_writes: bool = False,
        focus: Focus | None = None,
        hold_reservation: bool = False,
    ) -> None:
        if lease_seconds is not None and not lease_seconds > 0:
            raise DefinitionError(f"lease_seconds must be > 0 (or None), not {lease_seconds!r}")
        self.store = store
        self.services: dict[str, Any] = dict(services or {})
        """Host-provided values code may need (e.g. ``webhook_base_url``)."""
        self.session_id = session_id
        self.clock: Clock = clock or SystemClock()
        self.ids: IdSource = ids or RandomIds()
        self.restart_limit = restart_limit
        self.lease_seconds = lease_seconds
        """How long a task this harness runs is leased to it (renewed when a phase commits a
        new checkpoint and runs on); other harnesses take it over only once it expired. None:
        ``open()`` takes over every running task (a single-process host). A worker passes its
        timeout plus some slack."""
        self.woken_after_writes = woken_after_writes
        """True when every other writer of the session queues a wake for it after its write
        lands, in a queue that runs the session again after this run (the service's wake
        queue). Then :meth:`run_until_parked` need not read the head before it reports that
        all is parked: a write it did not see has a wake of its own."""
        self.focus = focus
        """``(task id, its owner's id or None)``, and optionally the task's sealed page count
        as its signal's delivery read it (:data:`~bide.engine.partial.PageHint`): ``open()``
        reads that task alone when it may (:mod:`bide.engine.partial`) and the run starts on
        that partial view; otherwise it loads the whole session. For a run owed to one task
        (a signal's wake)."""
        self.hold_reservation = hold_reservation
        """A reservation that starts one task alone is held until that task's first commit
        (:mod:`bide.engine.deferred`): a worker's run on a wake's first delivery. A phase
        that has not committed after :attr:`hold_flush_seconds` (loop time) gets it
        committed alone."""
        self.hold_flush_seconds = 1.0
        self._deferred: Draft | None = None  # a reservation held until the next commit
        self._defs: dict[tuple[str, int], TaskDefinition] = {}
        for definition in tasks:
            self.register(definition)
        self._seq = 0
        self._live: dict[str, TaskRecord] = {}
        self._ended: dict[str, TaskRecord] = {}
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._mine: set[str] = set()
        self._changed = asyncio.Event()
        self._opened = False
        self._closed = False
        self._closing = False
        self._first_pass = False
        self._truncated = False
        self._outcome_waiters: dict[str, list[asyncio.Future[Outcome]]] = {}
        self._docs: dict[str, Any] = {}  # documents read or written at the current seq
        self._abort_events: dict[str, asyncio.Event] = {}
        self._partial = False
        self._loaded: dict[str, TaskRecord] = {}  # each live task as first read

    # --- lifecycle ---------------------------------------------------------------------------

    def register(self, definition: TaskDefinition) -> None:
        """Make a task kind runnable by this harness."""
        key = (definition.name, definition.version)
        if key in self._defs and self._defs[key] is not definition:
            raise DefinitionError(f"task kind {definition.name!r} v{definition.version} twice")
        self._defs[key] = definition

    async def open(self) -> None:
        """Load the session. Tasks left ``running`` by a dead process go back to ``pending``
        with their wake (counting a restart); parked tasks stay parked. With leases, a task
        whose lease is live is left to the harness that holds it (see ``lease_seconds``).

        Recovery writes as many commits as the number of such tasks needs; a crash between
        two leaves the rest for the next ``open()``."""
        if self._closed:
            raise HarnessClosed("this harness was closed; create a new one")
        if self.focus is None or not self._load_focus(*self.focus):
            self._reload()
        self._opened = True
        self._first_pass = True
        for _ in range(2):  # again when recovery loaded the whole session: recover it all
            partial = self._partial
            while self._apply(lambda d: scheduler.recover_abandoned(self, d, at_open=True)):
                pass
            if not partial or self._partial:
                break

    async def attach(self) -> None:
        """Load the session to send commands (submit, signal, abort) without running it: unlike
        :meth:`open`, tasks another worker is running are left alone."""
        if self._closed:
            raise HarnessClosed("this harness was closed; create a new one")
        self._reload()
        self._opened = True

    async def close(self) -> None:
        """Stop running work. Running tasks go back to ``pending`` (no restart counted, their
        leases released); a later ``open()`` continues them. The store stays the caller's."""
        if self._closed:
            return
        self._closing = True  # the run loop starts nothing more
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        try:
            if self._opened:
                # One commit per MAX_COMMIT_ITEMS tasks; a crash in between leaves the rest
                # running under their leases, recovered once those expire.
                while self._apply(lambda d: scheduler.release_mine(self, d)):
                    pass
        finally:
            self._closed = True

    # --- commands ----------------------------------------------------------------------------

    async def create_task(
        self,
        kind: TaskDefinition,
        input: Any = None,
        *,
        key: str | None = None,
        background: bool = False,
    ) -> str:
        """Create a top-level task and return its id. With ``key``, creating again returns
        the same task (another kind or input under a used key raises KeyReuseError)."""
        return self._apply(
            lambda d: self.new_task(d, kind, input, key=key, owner=None, background=background)
        )

    async def signal(
        self, task_id: str, token: SignalToken[Any], key: str, value: Any
    ) -> SignalResult:
        """Deliver ``value`` under ``token.key(key)`` to a task of this session. A
        :class:`~bide.engine.failures.SignalFailure` as ``value`` delivers a failure instead
        (same checks, first of values and failures wins)."""
        return (await self.deliver(task_id, token, key, value)).result

    async def deliver(
        self, task_id: str, token: SignalToken[Any], key: str, value: Any
    ) -> SignalDecision:
        """Like :meth:`signal`, also telling which fields of an ``invalid`` value failed."""

        return self._apply(lambda d: d.signal(task_id, token, key, value, self.clock.now()))

    async def beat(self, task_id: str, token: SignalToken[Any], key: str) -> SignalResult:
        """A heartbeat on ``token.key(key)``: a sleep on that key with a ``heartbeat`` gets
        its ``beat_by`` moved to now + heartbeat (:mod:`bide.engine.heartbeats`)."""
        return self._apply(lambda d: d.beat(task_id, token.name, key, self.clock.now())).result

    async def abort(self, task_id: str, reason: str | None = None) -> bool:
        """Abort-mark a task and its owned work. Parked tasks stop waiting at once; running
        ones are refused their next commit. False when the task had already ended."""

        return self._apply(lambda d: self.mark_abort(d, task_id, reason))

    def mark_abort(self, d: Draft, task_id: str, reason: str | None) -> bool:
        """Stage abort marks on a live task and its owned work; False if it is not live."""
        record = d.get(task_id)
        if record is None:
            return False
        # Deeper work past the budget (or past what this commit still holds) is marked by
        # the scheduler's next pass (scheduler.propagate_aborts).
        room = max(0, min(_MARK_BUDGET, MAX_COMMIT_ITEMS - 1 - len(d.writes) - len(d.docs)))
        targets = descendants(task_id, d.live())[:room]
        if not isinstance(record.state, Completing):
            targets.append(record)
        for target in targets:
            if not target.abort_marked:
                d.put(bump(target, abort_marked=True, abort_reason=reason))
        return True

    async def run_until_parked(self, *, stop_at: float | None = None) -> Wake:
        """Run every runnable task until all are parked or ended, and return :meth:`wake`.

        With ``stop_at`` (a clock time) no new invocation starts after it; the returned wake
        then says ``active`` and the host re-arms at once.
        """
        self._ensure_open()
        try:
            while not self._closed and not self._closing:
                self._truncated = False
                if stop_at is None or self.clock.now() < stop_at:
                    reserve = lambda d: scheduler.reserve(self, d)  # noqa: E731
                    for task_id, invocation in self._apply(reserve, defer=True):
                        scheduler.spawn(self, task_id, invocation)
                    self._first_pass = False
                if self._truncated and (stop_at is None or self.clock.now() < stop_at):
                    continue  # more to reserve than one commit holds
                if not self._inflight:
                    # No lost wakeup: a signal delivered by another process while we ran
                    # moved the session on. Notice it before reporting that all is parked.
                    if (
                        not self.woken_after_writes
                        and self.store.head(self.session_id) != self._seq
                    ):
                        self._reload()
                        continue
                    break
                self._changed.clear()
                waiter = asyncio.ensure_future(self._changed.wait())
                done, _ = await asyncio.wait(
                    {*self._inflight.values(), waiter},
                    return_when=asyncio.FIRST_COMPLETED,
                    timeout=self.hold_flush_seconds if self._deferred else None,
                )
                waiter.cancel()
                if not done and self._deferred is not None:
                    self._apply(lambda d: None, flush=True)  # a long phase: commit it alone
                for task in done:
                    if task is not waiter and not task.cancelled() and task.exception():
                        raise task.exception()  # type: ignore[misc]
        except StoreFailedMidRun as failed:
            # A transient store error inside an invocation: the run stops like a crash, never
            # faulting the task or turning the call into a tool error. The caller sees the
            # store's own (retryable) error, and the next run recovers the task.
            await self._die()
            self._abandon_after_store_failure()
            raise failed.error from failed.error.__cause__
        except BaseException:
            # An engine bug or a process death (e.g. a simulated crash): stop every other
            # invocation too, write nothing more. The store holds whatever was committed.
            await self._die()
            raise
        if self._deferred is not None:  # held past its run (no commit followed): never written
            self._deferred = None
            self._reload()
        return self.wake()

    def _abandon_after_store_failure(self) -> None:
        """With leases, best effort: recover this dead run's tasks now rather than when their
        leases expire (if the store still fails, that is when)."""
        if self.lease_seconds is None:
            return
        self._closed = False
        try:
            while self._apply(lambda d: scheduler.recover_mine(self, d)):
                pass
        except Exception:  # the store is still failing: the leases will expire
            pass
        finally:
            self._closed = True

    async def _die(self) -> None:
        self._closed = True
        tasks = [t for t in self._inflight.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- queries -----------------------------------------------------------------------------

    def wake(self) -> Wake:
        """``active``: something can run now; ``at``: the earliest sleep deadline (or None)."""
        return compute_wake(
            self._live, self.clock.now(), self.outcome, self._reruns, mine=self._held()
        )

    def _held(self) -> set[str]:
        """The invocations this harness is running now (their tasks count as active)."""
        records = (self._live.get(task_id) for task_id in self._inflight)
        return {r.state.invocation for r in records if r and isinstance(r.state, Running)}  # type: ignore[misc]

    def task(self, task_id: str) -> TaskRecord | None:
        """A task's record, live or ended."""
        return self._live.get(task_id) or self._fetch(task_id)

    def outcome(self, task_id: str) -> Outcome | None:
        """A terminal task's outcome, or None while it is live (or unknown)."""
        if task_id in self._live:
            return None
        return ended_outcome(self._fetch(task_id))

    def get_doc(self, key: str) -> Any:
        """A document's body (None when absent), cached until the session moves on."""
        if key not in self._docs:
            with self._store_errors():
                doc = self.store.get_doc(self.session_id, key)
            self._docs[key] = None if doc is None else doc.body
        return self._docs[key]

    def list_docs(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> list[Doc]:
        """Committed documents under ``prefix`` in key order."""
        with self._store_errors():
            return self.store.list_docs(
                self.session_id, prefix, start_after=start_after, limit=limit
            )

    @property
    def live_tasks(self) -> dict[str, TaskRecord]:
        """The live tasks as last adopted (read-only view)."""
        return dict(self._live)

    @property
    def partial(self) -> bool:
        """True while the view holds the focus task only: :meth:`wake` speaks for it alone.
        False once anything needed the whole session (:mod:`bide.engine.partial`)."""
        return self._partial

    @property
    def loaded_tasks(self) -> dict[str, TaskRecord]:
        """Each live task as this harness first read it (by ``open()``, or by the load that
        replaced a partial view), whatever it committed since."""
        return dict(self._loaded)

    @property
    def seq(self) -> int:
        """The session's sequence number as last seen."""
        return self._seq

    # --- engine internals (the Kernel the scheduler, Runtime and HostTx use) -----------------

    def new_task(
        self,
        d: Draft,
        kind: TaskDefinition,
        input: Any,
        *,
        key: str | None,
        owner: str | None,
        background: bool,
    ) -> str:
        """Stage a new task (or find the one a key already names): :func:`creation.new_task`."""
        return creation.new_task(self, d, kind, input, key=key, owner=owner, background=background)

    def _finish(self, d: Draft, record: TaskRecord, outcome: Outcome) -> None:
        """End a task: terminal, or completing while owned work is live (that work is
        abort-marked unless it runs in the background)."""
        live = d.live()
        if live_children(record.id, live):
            # Direct children first; deeper work and anything past the budget is marked by
            # the scheduler's next pass (scheduler.propagate_aborts), so no commit grows unbounded.
            for child in live_children(record.id, live)[:_MARK_BUDGET]:
                if not child.abort_marked and not child.background:
                    d.put(bump(child, abort_marked=True, abort_reason="owner ended"))
            d.put(bump(record, state=Completing(outcome=outcome)))
        else:
            # Memos and signal values live exactly as long as the task.
            d.put(bump(record, state=Terminal(outcome=outcome), memos={}, memo_pages=0, signals={}))

    def _apply(
        self, change: Callable[[Draft], R], *, defer: bool = False, flush: bool = False
    ) -> R:
        """Evaluate ``change`` against the adopted view and commit its writes; on a conflict
        reload and evaluate it again (it decides afresh; nothing stale is resent).

        Keys the draft requires absent (:meth:`Draft.moved_unread`) go with the commit as
        conditions. When one holds a document after all, the store hands it back and
        ``change`` is decided again knowing it, as if it had been read first; when the
        conditions do not fit the commit (or the commit writes one of those keys), they are
        read instead, then ``change`` is decided again. Neither counts as an attempt: each
        learns documents for good, so the next evaluation requires fewer keys absent.

        A reservation held (:mod:`bide.engine.deferred`) goes with the next commit; ``defer``:
        hold this one, if it may be; ``flush``: commit a held one even with nothing else."""
        with self._store_errors():
            attempts = 0
            while attempts < _COMMIT_ATTEMPTS:
                if self._closed:
                    raise HarnessClosed("this harness was closed; create a new one")
                draft = Draft(self)
                try:
                    result = change(draft)
                except ViewMoved:
                    attempts += 1  # the whole session is loaded now, at a newer seq
                    continue
                if not draft.writes and not draft.docs and not (flush and self._deferred):
                    return result
                if defer and self._hold(draft):
                    return result
                if self._deferred is not None:  # its writes first: the change's replace them
                    draft = deferred.merged(self._deferred, draft)
                check_commit(self._live, draft.writes.values(), draft.docs)  # ValueRefused
                absent = sorted(draft.absent)
                if absent and (
                    len(draft.writes) + len(draft.docs) + len(absent) > MAX_COMMIT_ITEMS
                    or not draft.absent.isdisjoint(draft.docs)
                ):
                    for key in absent:
                        self.get_doc(key)  # no room for the conditions: read the keys
                    continue
                docs = [Doc(key, body) for key, body in draft.docs.items()]
                try:
                    self._seq = self.store.commit(
                        self.session_id, self._seq, list(draft.writes.values()), docs, absent=absent
                    )
                except ConflictError:
                    self._reload()
                    attempts += 1
                    continue
                except DocumentExists as exc:
                    if not set(exc.found) & draft.absent:
                        raise  # names no key this commit checked: a store bug, not a retry
                    self._docs.update(exc.found)  # as they stand at this seq: decide again
                    continue
                self._deferred = None
                self._docs.update(dict.fromkeys(absent))  # proven absent; none was written
                self._docs.update(draft.docs)
                self._adopt(draft.writes.values())
                return result
            raise ConflictError(self.session_id, self._seq, None)

    @contextlib.contextmanager
    def _store_errors(self) -> Iterator[None]:
        """Inside a running invocation, a transient store error (unreachable, throttled, too
        busy for every attempt) becomes :class:`StoreFailedMidRun`: a crash of this run, not
        the task's fault. A racing writer's conflict is reloaded by ``_apply`` instead."""
        try:
            yield
        except _TRANSIENT as exc:
            if IN_INVOCATION.get():
                raise StoreFailedMidRun(exc) from exc
            raise

    def _adopt(self, records: Iterable[TaskRecord]) -> None:
        for record in records:
            if record.live:
                self._live[record.id] = record
                if record.abort_marked and record.id in self._abort_events:
                    self._abort_events[record.id].set()
            else:
                self._live.pop(record.id, None)
                self._ended[record.id] = record
                for waiter in self._outcome_waiters.pop(record.id, []):
                    if not waiter.done():
                        waiter.set_result(record.state.outcome)  # type: ignore[union-attr]
        self._changed.set()

    async def wait_outcome(self, task_id: str) -> Outcome:
        """Wait in memory until a task of this session is terminal; its outcome.

        Only meaningful while :meth:`run_until_parked` runs the task (e.g. a tool awaiting a
        nested call); a parked task should park instead of waiting here.
        """
        outcome = self.outcome(task_id)
        if outcome is not None:
            return outcome
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._outcome_waiters.setdefault(task_id, []).append(future)
        return await future

    def abort_event(self, task_id: str) -> asyncio.Event:
        """An event set once ``task_id`` carries an abort mark (for code that runs long)."""
        event = self._abort_events.setdefault(task_id, asyncio.Event())
        record = self._live.get(task_id)
        if record is not None and record.abort_marked:
            event.set()
        return event

    def _reruns(self, record: TaskRecord) -> bool:
        """Whether the task's definition asks a parked task to run again now."""
        definition = self._defs.get((record.kind, record.version))
        return (
            definition is not None
            and definition.rerun is not None
            and not record.abort_marked
            and definition.rerun(record, self._first_pass)
        )

    def _reload(self) -> None:
        self._docs.clear()
        snapshot = self.store.load(self.session_id)
        self._seq = snapshot.seq
        self._live = dict(snapshot.tasks)
        if self._partial or not self._opened:  # the first whole view of the session
            for task_id, record in snapshot.tasks.items():
                self._loaded.setdefault(task_id, record)
        self._partial = False
        self._changed.set()
        if self._deferred is not None:
            self._deferred = deferred.restage(self, self._deferred)
            if self._deferred is not None:
                self._docs.update(self._deferred.docs)
                self._adopt(self._deferred.writes.values())

    def _hold(self, draft: Draft) -> bool:
        """Hold ``draft`` (a reservation) for the next commit, adopted in memory, if it may."""
        if not self.hold_reservation or self._deferred is not None:
            return False
        if not deferred.may_hold(draft):
            return False
        self._deferred = draft
        self._docs.update(draft.docs)
        self._adopt(draft.writes.values())
        return True

    def _load_focus(
        self, task_id: str, owner_id: str | None, pages: PageHint | None = None
    ) -> bool:
        """Adopt the task alone (True) when :func:`read_focus` allows, else read nothing more
        (its sealed pages ``pages`` names may be read with it, into the page cache)."""
        found = read_focus(self.store, self.session_id, task_id, owner_id, pages)
        if found is None:
            return False
        self._seq, record = found
        self._live, self._loaded, self._partial = {task_id: record}, {task_id: record}, True
        return True

    def _widen(self) -> None:
        """Replace a partial view by the whole session. Raises :class:`ViewMoved` when the
        session moved on since the partial view was read (a change decided on it is
        decided again); at the same seq the records already held are the ones loaded."""
        seq = self._seq
        self._reload()
        if self._seq != seq:
            raise ViewMoved()

    def _fetch(self, task_id: str) -> TaskRecord | None:
        if task_id in self._ended:
            return self._ended[task_id]
        with self._store_errors():
            record = self.store.get_task(self.session_id, task_id)
        if record is not None and not record.live:
            self._ended[task_id] = record
        return record

    def _ensure_open(self) -> None:
        if self._closed:
            raise HarnessClosed("this harness was closed; create a new one")
        if not self._opened:
            raise HarnessClosed("call `await harness.open()` first")
