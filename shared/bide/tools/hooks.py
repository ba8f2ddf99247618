"""Extensions: ``before_tool`` gates and ``after_tool`` result hooks, in extension order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..engine.signals import SignalState, SignalToken
from .results import Sleep, ToolResult

T = TypeVar("T")


@dataclass(frozen=True)
class ToolCall:
    """A call as hooks see it: the tool's name, its (possibly replaced) arguments, its task."""

    name: str
    arguments: dict[str, Any]
    task_id: str
    call_id: str | None = None


@dataclass(frozen=True)
class Block:
    """A gate's answer: the call does not run; the model gets ``reason`` as a blocked result."""

    reason: str


@dataclass(frozen=True)
class Replace:
    """A gate's answer: later gates and the tool see these arguments instead."""

    arguments: dict[str, Any]


BeforeToolAnswer = Block | Replace | Sleep | None


class HookApi(Protocol):
    """What a hook may do: read signals and memos of the call's task, and read the clock.
    Hooks never commit; the task makes their answer durable."""

    @property
    def task_id(self) -> str:
        """The tool task's id."""
        ...

    def now(self) -> float:
        """The harness clock."""
        ...

    async def read_signal(self, token: SignalToken[T], key: str) -> SignalState[T] | None:
        """A key's value, expired, or None; the same as the task's own read."""
        ...

    async def memo(self, name: str, candidate: Any = ...) -> Any:
        """First-writer-wins memo in the task's namespace (prefix names with the extension)."""
        ...


BeforeTool = Callable[[ToolCall, HookApi], Awaitable[BeforeToolAnswer]]
AfterTool = Callable[[ToolCall, ToolResult, HookApi], Awaitable[ToolResult | None]]


@dataclass(frozen=True)
class Extension:
    """A named set of hooks. ``before_tool`` may replace arguments, block, or sleep (a gate);
    the first block or sleep stops the chain. ``after_tool`` may replace the result and runs on
    every result the tool task writes, blocked and aborted included."""

    name: str
    before_tool: BeforeTool | None = None
    after_tool: AfterTool | None = None
