"""Host commands as commits: what a webhook route, a UI button or a test calls to change a
session (resolve a promise, record a decision, attach a controller) without a running task.

:func:`host_commit` runs ``change(tx)`` inside one harness commit, exactly like a task's commit
builder: documents, signals, created tasks and abort marks staged through ``tx`` land together
or not at all. On a conflict the change is evaluated again against fresh data, so it must be
free of side effects; an exception raised inside it writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .kernel import Draft, Kernel
from .signals import SignalResult, SignalToken
from .tasks import TaskDefinition

R = TypeVar("R")


class WriteTx(Protocol):
    """What the modules built on commits need from one: a task's ``tx`` or a :class:`HostTx`.

    ``task_id`` is the committing task, or None for a host command.
    """

    @property
    def task_id(self) -> str | None: ...
    @property
    def session_id(self) -> str: ...
    def now(self) -> float: ...
    def get_doc(self, key: str) -> Any: ...
    def put_doc(self, key: str, body: Any) -> None: ...
    def list_docs(self, prefix: str) -> list[tuple[str, Any]]: ...
    def signal(
        self, task_id: str, token: SignalToken[Any], key: str, value: Any
    ) -> SignalResult: ...
    def create_task(
        self,
        kind: TaskDefinition,
        input: Any = None,
        *,
        key: str | None = None,
        background: bool = False,
        owner: str | None = ...,
    ) -> str: ...
    def abort(self, task_id: str, reason: str | None = None) -> bool: ...


class HostTx:
    """The ``tx`` of a host command: no committing task, so created tasks are top-level unless
    ``owner`` names one."""

    def __init__(self, harness: Kernel, draft: Draft) -> None:
        self._h = harness
        self._d = draft

    @property
    def task_id(self) -> str | None:
        """Always None: a host command is not a task."""
        return None

    @property
    def session_id(self) -> str:
        """The session of this commit."""
        return self._h.session_id

    def now(self) -> float:
        """The harness clock."""
        return self._h.clock.now()

    def get_doc(self, key: str) -> Any:
        """A document as this commit would leave it (None when absent)."""
        return self._d.get_doc(key)

    def put_doc(self, key: str, body: Any) -> None:
        """Write a document in this commit."""
        self._d.put_doc(key, body)

    def list_docs(self, prefix: str) -> list[tuple[str, Any]]:
        """Committed documents under ``prefix`` overlaid with this commit's, in key order."""
        found = {d.key: d.body for d in self._h.list_docs(prefix)}
        found.update({k: v for k, v in self._d.docs.items() if k.startswith(prefix)})
        return sorted(found.items())

    def signal(self, task_id: str, token: SignalToken[Any], key: str, value: Any) -> SignalResult:
        """Deliver a signal to a task of this session, in this commit."""
        return self._d.signal(task_id, token, key, value, self.now()).result

    def create_task(
        self,
        kind: TaskDefinition,
        input: Any = None,
        *,
        key: str | None = None,
        background: bool = False,
        owner: str | None = None,
    ) -> str:
        """Create a task in this commit (top-level unless ``owner`` is given)."""
        return self._h.new_task(self._d, kind, input, key=key, owner=owner, background=background)

    def abort(self, task_id: str, reason: str | None = None) -> bool:
        """Abort-mark a task and its owned work, in this commit."""
        return self._h.mark_abort(self._d, task_id, reason)


def host_commit(harness: Kernel, change: Callable[[HostTx], R]) -> R:
    """Run ``change`` in one commit of ``harness``'s session and return what it returned."""
    # Conversations does the same: host commands go through the harness's one commit path, so
    # they are conditioned on the session's sequence number like every other write.
    return harness._apply(lambda d: change(HostTx(harness, d)))


def read_docs(reader: Any, prefix: str) -> list[tuple[str, Any]]:
    """Documents under ``prefix`` as ``(key, body)`` pairs, from a harness, a runtime or a tx."""
    items = reader.list_docs(prefix)
    return [(i.key, i.body) if hasattr(i, "key") else (i[0], i[1]) for i in items]
