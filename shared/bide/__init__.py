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
* failures (a wait's other answer): :class:`SignalFailure` (deliver it as the value),
  :class:`SignalFailed` (what ``read_signal`` returns then), :class:`FailureReceived` (the
  exception that stands for it);
* wakes: :class:`WakeTime`, :class:`WakeExpired`, :class:`WakeHeartbeat`, :class:`WakeSignal`,
  :class:`WakeTasks`, and :class:`Wake` (what ``Harness.wake()`` returns);
* running: :class:`Harness`, :func:`deliver_signal` (a signal without loading a session),
  :func:`deliver_beat` (a heartbeat likewise),
  :class:`WriteTx` (the ``tx`` of a tool's ``api.write`` and of a host command, which
  promises, conversations and delegation write through);
  ports :class:`Clock` (:class:`SystemClock`, :class:`ManualClock`),
  :class:`Store` (:class:`SQLiteStore`; documents are :class:`Doc`), :class:`IdSource`;
* errors: :class:`BideError` and its subclasses;
* deploying: :class:`App` (from :mod:`bide.app`). Tools are in :mod:`bide.tools`, agents in
  :mod:`bide.agent`, workflow tools in :mod:`bide.workflow`, test helpers in
  :mod:`bide.testing`.

Each name is imported from its module on first use, so ``import bide`` (and so every
``bide.<subpackage>`` import) loads nothing but this file.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .app import App
    from .engine.clock import DAY, HOUR, MINUTE, Clock, ManualClock, SystemClock
    from .engine.delivery import deliver_beat, deliver_signal
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
    from .engine.failures import FailureReceived, SignalFailed, SignalFailure
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
        WakeHeartbeat,
        WakeReason,
        WakeSignal,
        WakeTasks,
        WakeTime,
    )
    from .engine.store import Doc, SessionSnapshot, SQLiteStore, Store
    from .engine.tasks import TaskDefinition, TaskRuntime, TaskView, Tx, define_task

# Each public name -> the module (under bide) defining it. Imported on first use (PEP 562):
# a Lambda function imports ``bide.handlers.<name>``, which imports this package first, and
# must not pay for the engine parts, agents and workflow tools its path never touches.
_EXPORTS: dict[str, str] = {
    "DAY": "engine.clock",
    "HOUR": "engine.clock",
    "MINUTE": "engine.clock",
    "Clock": "engine.clock",
    "ManualClock": "engine.clock",
    "SystemClock": "engine.clock",
    "deliver_beat": "engine.delivery",
    "deliver_signal": "engine.delivery",
    "BideError": "engine.errors",
    "CommitTooLarge": "engine.errors",
    "ConflictError": "engine.errors",
    "DefinitionError": "engine.errors",
    "HarnessClosed": "engine.errors",
    "InvalidPark": "engine.errors",
    "InvalidTransition": "engine.errors",
    "InvalidWait": "engine.errors",
    "InvocationEnded": "engine.errors",
    "KeyReuseError": "engine.errors",
    "StoreUnavailable": "engine.errors",
    "UnknownTaskKind": "engine.errors",
    "FailureReceived": "engine.failures",
    "SignalFailed": "engine.failures",
    "SignalFailure": "engine.failures",
    "Harness": "engine.harness",
    "WriteTx": "engine.host",
    "IdSource": "engine.ids",
    "RandomIds": "engine.ids",
    "SequentialIds": "engine.ids",
    "SignalSlot": "engine.records",
    "TaskRecord": "engine.records",
    "SignalDecision": "engine.rules",
    "Wake": "engine.rules",
    "InvalidSignalValue": "engine.signals",
    "SignalExpired": "engine.signals",
    "SignalKey": "engine.signals",
    "SignalResult": "engine.signals",
    "SignalState": "engine.signals",
    "SignalToken": "engine.signals",
    "SignalValue": "engine.signals",
    "define_signal": "engine.signals",
    "Aborted": "engine.state",
    "Completed": "engine.state",
    "Completing": "engine.state",
    "Failed": "engine.state",
    "Faulted": "engine.state",
    "Orphaned": "engine.state",
    "Outcome": "engine.state",
    "Pending": "engine.state",
    "Running": "engine.state",
    "Sleeping": "engine.state",
    "TaskState": "engine.state",
    "Terminal": "engine.state",
    "Waiting": "engine.state",
    "WakeExpired": "engine.state",
    "WakeHeartbeat": "engine.state",
    "WakeReason": "engine.state",
    "WakeSignal": "engine.state",
    "WakeTasks": "engine.state",
    "WakeTime": "engine.state",
    "Doc": "engine.store",
    "SessionSnapshot": "engine.store",
    "SQLiteStore": "engine.store",
    "Store": "engine.store",
    "TaskDefinition": "engine.tasks",
    "TaskRuntime": "engine.tasks",
    "TaskView": "engine.tasks",
    "Tx": "engine.tasks",
    "define_task": "engine.tasks",
    "App": "app",
}


if not TYPE_CHECKING:  # mypy checks names against the imports above
    from ._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)


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
    "FailureReceived",
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
    "SignalFailed",
    "SignalFailure",
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
    "WakeHeartbeat",
    "WakeReason",
    "WakeSignal",
    "WakeTasks",
    "WakeTime",
    "WriteTx",
    "define_signal",
    "define_task",
    "deliver_beat",
    "deliver_signal",
]
