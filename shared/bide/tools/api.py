"""ToolExecutionApi: what ``execute()`` and ``cancel()`` receive."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.errors import BideError
from ..engine.signals import SignalState, SignalToken
from ..engine.state import Outcome, WakeReason
from ..engine.tasks import TaskDefinition
from .results import ToolResult

if TYPE_CHECKING:
    from ..engine.runtime import Runtime
    from .registry import ToolRegistry

T = TypeVar("T")


class KeyRequired(BideError):
    """After a wake, nested calls and created tasks need an explicit key: default keys are
    positions in a run, and a woken run is a different run."""


@dataclass(frozen=True)
class NestedToolCall:
    """A nested call started with ``wait=False``: its task id and a way to get its result."""

    task_id: str
    _api: ToolExecutionApi

    async def result(self) -> ToolResult:
        """The stored result once the call is terminal; otherwise waits for it in memory."""
        return result_of(await self._api._rt.wait_outcome(self.task_id))


def result_of(outcome: Outcome) -> ToolResult:
    """The ToolResult a tool task's outcome carries."""
    payload = getattr(outcome, "result", None)
    if payload is None and outcome.status == "failed":
        payload = outcome.error
    if payload is None:
        error = getattr(outcome, "error", None) or getattr(outcome, "reason", None)
        return ToolResult.of_text(f"call ended {outcome.status}: {error}", is_error=True)
    return ToolResult.model_validate(payload)


class ToolExecutionApi:
    """A run's handle: why it woke, what it parked with, signals, memos, the clock, nested
    calls and child tasks. Each run starts with empty progress; diagnostics carry over."""

    def __init__(
        self,
        rt: Runtime,
        registry: ToolRegistry,
        *,
        wake: WakeReason | None,
        checkpoint: Any,
        abort_event: asyncio.Event | None = None,
    ) -> None:
        self._rt = rt
        self._registry = registry
        self.wake = wake
        """Why this run woke (None on a fresh call)."""
        self.checkpoint = checkpoint
        """What the call last parked with (None before its first park)."""
        self.progress_log: list[str] = []
        self._abort_event = abort_event
        self._position = 0

    @property
    def task_id(self) -> str:
        """The tool task's id."""
        return self._rt.task_id

    @property
    def session_id(self) -> str:
        """The id of the session the call runs in."""
        return self._rt.session_id

    @property
    def services(self) -> Mapping[str, Any]:
        """Values the host provided (e.g. ``webhook_base_url``), read-only: a tool reads
        them, the host sets them (``Harness(services=...)``, the service's dependencies)."""
        return MappingProxyType(self._rt.services)

    @property
    def aborted(self) -> asyncio.Event:
        """Set once the call is aborted (never set in ``cancel``: cleanup is not cancelled)."""
        return self._abort_event if self._abort_event is not None else self._rt.abort_event

    def now(self) -> float:
        """The harness clock."""
        return self._rt.now()

    async def read_signal(self, token: SignalToken[T], key: str) -> SignalState[T] | None:
        """The key's value, expired, or None while nothing came."""
        return await self._rt.read_signal(token, key)

    async def memo(self, name: str, candidate: Any = ...) -> Any:
        """First-writer-wins memo; a rerun gets the same value (e.g. an idempotency key)."""
        if candidate is ...:
            return await self._rt.memo(name)
        return await self._rt.memo(name, candidate)

    def progress(self, text: str) -> None:
        """Report progress of this run: kept in :attr:`progress_log` and carried to the
        session's event stream as ``progress`` events, coalesced (at most one every
        :data:`~bide.engine.progress.PROGRESS_INTERVAL` seconds, the latest value winning,
        the last one always written when the run parks or ends)."""
        self.progress_log.append(text)
        tool, call_id = self._caller()
        self._rt.progress.report(text, tool=tool, call_id=call_id)

    def _caller(self) -> tuple[str | None, str | None]:
        """The tool and the model's call id of the task this run belongs to (from its input:
        a tool call's ``name``, a background task's ``tool``)."""
        record = self._rt._h.task(self.task_id)
        given = record.input if record is not None and isinstance(record.input, dict) else {}
        tool = given.get("name") or given.get("tool")
        call_id = given.get("call_id")
        return (
            tool if isinstance(tool, str) else None,
            call_id if isinstance(call_id, str) else None,
        )

    async def diagnostic(self, text: str) -> None:
        """Record a diagnostic durably; every later run and the result carry it."""
        index = 0
        while await self._rt.memo(f"bide.diag.{index}") is not None:
            index += 1
        await self._rt.memo(f"bide.diag.{index}", text)

    def _key(self, key: str | None, what: str) -> str:
        if key is not None:
            return key
        if self.wake is not None:
            raise KeyRequired(f"{what} after a wake needs an explicit key")
        self._position += 1
        return f"pos.{self._position}"

    async def execute_tool(
        self, name: str, arguments: dict[str, Any], *, key: str | None = None, wait: bool = True
    ) -> Any:
        """Start (or find, by key) a nested call owned by this call. ``wait=True`` waits for
        it in memory and returns its :class:`ToolResult`; ``wait=False`` returns a
        :class:`NestedToolCall` at once (park with ``Wait(on=[call.task_id])``)."""
        used = self._key(key, "execute_tool()")
        created: list[str] = []
        call_input = {"name": name, "arguments": arguments, "call_id": None}

        def build(tx: Any) -> None:
            created.append(tx.create_task(self._registry.task, call_input, key=f"tool:{used}"))

        await self._rt.commit(build)
        handle = NestedToolCall(created[0], self)
        return await handle.result() if wait else handle

    async def create_task(
        self, kind: TaskDefinition, input: Any = None, *, key: str | None = None
    ) -> str:
        """Create (or find, by key) a task owned by this call; its id."""
        used = self._key(key, "create_task()")
        created: list[str] = []

        def build(tx: Any) -> None:
            created.append(tx.create_task(kind, input, key=f"task:{used}"))

        await self._rt.commit(build)
        return created[0]

    async def outcome(self, task_id: str) -> Outcome | None:
        """A task's outcome once terminal."""
        return await self._rt.outcome(task_id)

    async def write(self, change: Any) -> Any:
        """Commit documents, child tasks or signals (``change(tx)``) without parking; what
        ``change`` returned. ``change`` may run more than once: keep it free of effects."""
        return await self._rt.write(change)

    def get_doc(self, key: str) -> Any:
        """A committed document of this session (None when absent)."""
        return self._rt.get_doc(key)
