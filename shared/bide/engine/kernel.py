"""The harness as the engine's lower modules see it: :class:`Kernel`, and the :class:`Draft`
of one commit.

Why this module exists: the harness drives the scheduler, the scheduler runs phases through
a :class:`~bide.engine.runtime.Runtime`, and runtimes and host commands commit back through
the harness. Typed against ``Harness`` itself, those modules and ``harness.py`` would import
each other (a loop, even when only under ``TYPE_CHECKING``). Instead they type against
:class:`Kernel`, a ``Protocol`` naming exactly what they use of the harness, so the engine's
imports point one way (each of these also imports this module, which imports none of them)::

    harness -> scheduler -> runtime -> host -> kernel

``Harness`` satisfies ``Kernel`` structurally, without inheriting from it, so its state and
its one commit path stay together in one class. mypy checks the fit wherever a harness is
passed down (``Draft(self)``, ``scheduler.reserve(self, d)``, ``host_commit(harness, ...)``),
so a member renamed on one side and not the other fails the type check rather than a run.

Members with a leading underscore are the harness's internals: shared within the engine
package (the scheduler is the harness's run loop kept in its own module), not beyond it.

``Draft`` lives here rather than in ``harness.py`` because the two belong together: the
kernel's commit path is expressed in drafts, and a draft reads through the kernel.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from . import slots
from .clock import Clock
from .errors import DefinitionError
from .heartbeats import decide_beat
from .ids import IdSource
from .records import SignalSlot, TaskRecord
from .rules import SignalDecision, decide_signal
from .signals import SignalToken
from .slots import SlotLookup
from .state import Outcome
from .store.base import Doc
from .tasks import TaskDefinition

R = TypeVar("R")


class Kernel(Protocol):
    """What the scheduler, a runtime and a host command use of the harness that runs them."""

    # Configuration, fixed when the harness is created.
    session_id: str
    clock: Clock
    ids: IdSource
    services: dict[str, Any]
    restart_limit: int
    lease_seconds: float | None

    # The adopted view and the run loop's bookkeeping, which the scheduler reads and updates.
    _live: dict[str, TaskRecord]
    _defs: dict[tuple[str, int], TaskDefinition]
    _inflight: dict[str, asyncio.Task[None]]
    _mine: set[str]
    _changed: asyncio.Event
    _truncated: bool
    _docs: dict[str, Any]  # documents known at the adopted seq (None: known absent)
    _partial: bool  # the adopted view holds some live tasks only (a targeted run)

    def _widen(self) -> None: ...

    # The commit path: every write goes through ``_apply``.
    def _apply(self, change: Callable[[Draft], R]) -> R: ...
    def _finish(self, d: Draft, record: TaskRecord, outcome: Outcome) -> None: ...
    def new_task(
        self,
        d: Draft,
        kind: TaskDefinition,
        input: Any,
        *,
        key: str | None,
        owner: str | None,
        background: bool,
    ) -> str: ...
    def mark_abort(self, d: Draft, task_id: str, reason: str | None) -> bool: ...

    # Queries.
    def task(self, task_id: str) -> TaskRecord | None: ...
    def outcome(self, task_id: str) -> Outcome | None: ...
    def get_doc(self, key: str) -> Any: ...
    def list_docs(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> list[Doc]: ...
    def abort_event(self, task_id: str) -> asyncio.Event: ...
    async def wait_outcome(self, task_id: str) -> Outcome: ...
    def _fetch(self, task_id: str) -> TaskRecord | None: ...
    def _reruns(self, record: TaskRecord) -> bool: ...


IN_INVOCATION: ContextVar[bool] = ContextVar("bide_in_invocation", default=False)
"""True inside the asyncio task that runs one invocation (a phase, a tool's ``execute()``, an
abort handler): the harness then turns a transient store error into
:class:`~bide.engine.errors.StoreFailedMidRun`, which no ``except Exception`` catches."""


class ViewMoved(BaseException):
    """Raised while a change is decided on a partial view that had to be replaced by the
    whole session, which had moved on since: :meth:`Harness._apply` decides the change
    again on the new view. A BaseException, so no ``except Exception`` in code a change
    calls (a commit builder) can swallow it."""


class Draft:
    """The writes of one commit being built, over the harness's adopted view."""

    def __init__(self, harness: Kernel) -> None:
        self.harness = harness
        self.writes: dict[str, TaskRecord] = {}
        self.docs: dict[str, Any] = {}
        self.absent: set[str] = set()  # keys this commit requires absent (Store.commit)

    def get_doc(self, key: str) -> Any:
        """A document's body as this commit would leave it (None when absent)."""
        if key in self.docs:
            return self.docs[key]
        return self.harness.get_doc(key)

    def put_doc(self, key: str, body: Any) -> None:
        """Stage a document for this commit."""
        require_json(body, f"document {key!r}")
        self.docs[key] = body

    def get(self, task_id: str) -> TaskRecord | None:
        """The task as this commit would leave it, if live in memory. On a partial view
        a task it does not hold may be live anyway: the whole session is loaded first."""
        found = self.writes.get(task_id) or self.harness._live.get(task_id)
        if found is None and self.harness._partial:
            self.harness._widen()  # ViewMoved when the session moved on meanwhile
            found = self.harness._live.get(task_id)
        return found

    def find(self, task_id: str) -> TaskRecord | None:
        """Like :meth:`get`, falling back to the store for ended tasks."""
        return self.get(task_id) or self.harness._fetch(task_id)

    def put(self, record: TaskRecord) -> None:
        """Stage a record for this commit."""
        self.writes[record.id] = record

    def moved(self, task_id: str) -> SlotLookup:
        """Reads ``task_id``'s slots that left its record, as this commit would leave them."""
        return slots.lookup(self.get_doc, task_id)

    def moved_unread(self, task_id: str) -> SlotLookup:
        """Like :meth:`moved` for a check that only refuses when a slot is there (a sleep's
        keys): a key whose document this harness does not know is not read but required
        absent by this commit (a condition of the commit, no request of its own), and found
        None. Should the document exist after all, the store refuses the commit and the
        harness decides it again knowing the document, so the answer is the read's."""

        def find(slot: str) -> SignalSlot | None:
            key = slots.doc_key(task_id, slot)
            if key in self.docs:
                return slots.from_body(self.docs[key])
            if key in self.harness._docs:
                return slots.from_body(self.harness._docs[key])
            self.absent.add(key)
            return None

        return find

    def signal(
        self, task_id: str, token: SignalToken[Any], key: str, value: Any, now: float
    ) -> SignalDecision:
        """Decide a delivery to ``task_id`` (design 001's checks, :func:`decide_signal`) and
        stage the record it writes, if any."""
        decision = decide_signal(
            self.find(task_id), token, key, value, now, moved=self.moved(task_id)
        )
        if decision.record is not None:
            self.put(decision.record)
        return decision

    def beat(self, task_id: str, signal: str, key: str, now: float) -> SignalDecision:
        """Decide a heartbeat to ``task_id`` (:func:`~bide.engine.heartbeats.decide_beat`)
        and stage the record it writes, if any."""
        decision = decide_beat(self.find(task_id), signal, key, now, moved=self.moved(task_id))
        if decision.record is not None:
            self.put(decision.record)
        return decision

    def live(self) -> dict[str, TaskRecord]:
        """Every live task as this commit would leave them (a partial view is replaced by
        the whole session first)."""
        if self.harness._partial:
            self.harness._widen()  # ViewMoved when the session moved on meanwhile
        return self.loaded()

    def loaded(self) -> dict[str, TaskRecord]:
        """The live tasks of the harness's view, partial or whole, as this commit would leave
        them: for a rule that decides each task on itself and what the view holds of its
        owner (the scheduler's reservations and recoveries, see
        :func:`~bide.engine.partial.runs_alone`)."""
        merged = {**self.harness._live, **self.writes}
        return {k: v for k, v in merged.items() if v.live}


def require_json(value: Any, what: str) -> None:
    """Raise :class:`~bide.engine.errors.DefinitionError` unless ``value`` is plain JSON
    (what a store can hold: no NaN, no objects JSON does not know)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DefinitionError(f"{what} must be JSON: {exc}") from None
