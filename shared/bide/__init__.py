"""Bide: durable agent sessions whose tasks wait for the world while nothing runs.

The public API:

* tasks: :func:`define_task`, :class:`TaskRuntime`, :class:`TaskView`, the states
  (:class:`Pending`, :class:`Running`, :class:`Waiting`, :class:`Sleeping`,
  :class:`Completing`, :class:`Terminal`) and outcomes (:class:`Completed`, :class:`Failed`,
  :class:`Aborted`, :class:`Orphaned`, :class:`Faulted`);
* signals: :func:`define_signal`, :class:`SignalToken`, :class:`SignalKey`,
  :class:`SignalResult`, :class:`SignalDecision` (what ``Harness.deliver`` and
  :func:`deliver_signal` return), :class:`SignalValue`, :class:`SignalExpired`,
  :class:`SignalSlot` (a key's life on a :class:`TaskRecord`);
* wakes: :class:`WakeTime`, :class:`WakeExpired`, :class:`WakeSignal`, :class:`WakeTasks`,
  and :class:`Wake` (what ``Harness.wake()`` returns);
* running: :class:`Harness`, :func:`deliver_signal` (a signal without loading a session),
  :class:`WriteTx` (the ``tx`` of a tool's ``api.write`` and of a host command, which
  promises, conversations and delegation write through);
  ports :class:`Clock` (:class:`SystemClock`, :class:`ManualClock`),
  :class:`Store` (:class:`SQLiteStore`; documents are :class:`Doc`), :class:`IdSource`;
* errors: :class:`BideError` and its subclasses;
* deploying: :class:`App` (from :mod:`bide.app`, imported on first use so that ``import bide``
  loads the engine only). Tools are in :mod:`bide.tools`, agents in :mod:`bide.agent`,
  workflow tools in :mod:`bide.workflow`, test helpers in :mod:`bide.testing`.
"""

from typing import TYPE_CHECKING, Any

from .engine.clock import DAY, HOUR, MINUTE, Clock, ManualClock, SystemClock
from .engine.delivery import deliver_signal
from .engine.errors import (
    BideError,
    CommitTooLarge,
    ConflictError,
    DefinitionError,
    HarnessClosed,
    InvalidPark,
    InvalidTransition,
    InvalidWait,
    InvocationEnded,
    KeyReuseError,
    StoreUnavailable,
    UnknownTaskKind,
)
from .engine.harness import Harness
from .engine.host import WriteTx
from .engine.ids import IdSource, RandomIds, SequentialIds
from .engine.records import SignalSlot, TaskRecord
from .engine.rules import SignalDecision, Wake
from .engine.signals import (
    InvalidSignalValue,
    SignalExpired,
    SignalKey,
    SignalResult,
    SignalState,
    SignalToken,
    SignalValue,
    define_signal,
)
from .engine.state import (
    Aborted,
    Completed,
    Completing,
    Failed,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    Sleeping,
    TaskState,
    Terminal,
    Waiting,
    WakeExpired,
    WakeReason,
    WakeSignal,
    WakeTasks,
    WakeTime,
)
from .engine.store import Doc, SessionSnapshot, SQLiteStore, Store
from .engine.tasks import TaskDefinition, TaskRuntime, TaskView, Tx, define_task

if TYPE_CHECKING:
    from .app import App


def __getattr__(name: str) -> Any:
    # App pulls in agents, workflow tools and the design-002 features: load them only when
    # someone asks for it, not for every engine-only import of bide.
    if name == "App":
        from .app import App

        return App
    raise AttributeError(f"module 'bide' has no attribute {name!r}")


__all__ = [
    "DAY",
    "HOUR",
    "MINUTE",
    "Aborted",
    "App",
    "BideError",
    "Clock",
    "CommitTooLarge",
    "Completed",
    "Completing",
    "ConflictError",
    "DefinitionError",
    "Doc",
    "Failed",
    "Faulted",
    "Harness",
    "HarnessClosed",
    "IdSource",
    "InvalidPark",
    "InvalidSignalValue",
    "InvalidTransition",
    "InvalidWait",
    "InvocationEnded",
    "KeyReuseError",
    "ManualClock",
    "Orphaned",
    "Outcome",
    "Pending",
    "RandomIds",
    "Running",
    "SQLiteStore",
    "SequentialIds",
    "SessionSnapshot",
    "SignalDecision",
    "SignalExpired",
    "SignalKey",
    "SignalResult",
    "SignalSlot",
    "SignalState",
    "SignalToken",
    "SignalValue",
    "Sleeping",
    "Store",
    "StoreUnavailable",
    "SystemClock",
    "TaskDefinition",
    "TaskRecord",
    "TaskRuntime",
    "TaskState",
    "TaskView",
    "Terminal",
    "Tx",
    "UnknownTaskKind",
    "Waiting",
    "Wake",
    "WakeExpired",
    "WakeReason",
    "WakeSignal",
    "WakeTasks",
    "WakeTime",
    "WriteTx",
    "define_signal",
    "define_task",
    "deliver_signal",
]
