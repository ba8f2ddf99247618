"""Durable promises (design 002, "Distinguish an approval from an outstanding result").

A promise records a result that has not arrived yet, as the session document
``promise/<id>``: its identity, owner (the creating task), scope (a task whose end cancels it,
or the session), producer and correlation (what a reply must carry), hard deadline, status
(``open`` -> ``resolved`` | ``rejected`` | ``cancelled`` | ``expired``) and value. It is built
on signals, not beside them:

* **Resolution is a commit and a delivery.** :func:`resolve_promise` writes the terminal
  status and, in the same commit, delivers :data:`PROMISE` (value: :class:`PromiseSettled`) to
  every open await key. A tool or task waits by parking on such a key, so nothing runs while a
  promise is open, and an outcome landing before the park is an early signal that wakes it at
  once.
* **The first terminal write wins** (:func:`~.rules.decide_resolution`, a pure function):
  a terminal promise never changes, so a late success never revives a cancelled promise and
  repeated deliveries converge.
* **Hard deadline vs await timeout.** The hard deadline belongs to the promise: a keeper task
  (:data:`DEADLINE_KEEPER`, one per promise) sleeps until it and then ends the promise
  ``expired`` through the same resolution path, so waiters get ``expired`` as the outcome. A
  write that arrives after the deadline also ends it ``expired``. An await timeout belongs to
  one waiter: it is the ``until`` of that waiter's sleep, so it ends only that waiting interval
  (:class:`AwaitTimedOut`) and leaves the promise open.
* **One key per await interval.** Design 001 lets a key serve one wait: a timed-out key is
  expired for good and a sleep on it is refused. So an await uses the key
  ``<promise id>#<interval>`` (:func:`~.rules.await_key`), registered on the promise as a
  waiter; the next interval of the same task uses the next number, and resolution delivers
  to every registered key. Keys live on the waiting task, so different tasks never collide.
* **Producers and cleanup.** A cancelled or expired promise sends its producer a per-key
  notice (:data:`PROMISE_CANCELLED`, or an envelope in a receiver's mailbox), and once every
  promise of a group is terminal its ``close_task`` (a started execution, a delegated child)
  is aborted.

Model-visible handles are promise ids; :func:`promise_tools` gives an agent ``promise_await``
(with a timeout that leaves the promise open), ``promise_status`` and ``promise_cancel``.
"""

from ..engine.tasks import TaskDefinition
from .commands import Promises
from .core import (
    DEADLINE_KEEPER,
    KEEPER_TASK,
    cancel_promise,
    create_promise,
    list_promises,
    promise_doc_key,
    read_promise,
    register_waiter,
    resolve_promise,
)
from .model import (
    PROMISE,
    PROMISE_CANCELLED,
    TERMINAL,
    CancelNotice,
    NoticeRoute,
    PromiseDoc,
    PromiseError,
    PromiseSettled,
    PromiseStatus,
    Waiter,
)
from .rules import ResolveDecision, ResolveResult, await_key, decide_resolution, group_terminal
from .tools import promise_tools, settled_result
from .waiting import AwaitTimedOut, await_promise


def promise_task_kinds() -> list[TaskDefinition]:
    """The task kinds a harness needs to run promises (the deadline keeper)."""
    return [DEADLINE_KEEPER]


__all__ = [
    "DEADLINE_KEEPER",
    "KEEPER_TASK",
    "PROMISE",
    "PROMISE_CANCELLED",
    "TERMINAL",
    "AwaitTimedOut",
    "CancelNotice",
    "NoticeRoute",
    "PromiseDoc",
    "PromiseError",
    "PromiseSettled",
    "PromiseStatus",
    "Promises",
    "ResolveDecision",
    "ResolveResult",
    "Waiter",
    "await_key",
    "await_promise",
    "cancel_promise",
    "create_promise",
    "decide_resolution",
    "group_terminal",
    "list_promises",
    "promise_doc_key",
    "promise_task_kinds",
    "promise_tools",
    "read_promise",
    "register_waiter",
    "resolve_promise",
    "settled_result",
]
