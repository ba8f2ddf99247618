"""What a tool returns: a result, or a park (a sleep or a wait) instead of a result."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..engine.signals import SignalKey
from ..engine.state import Sleeping, Waiting


class ToolErrorCode(enum.StrEnum):
    """Why a call ended with an error result that the tool itself did not write."""

    INVALID_PARK = "invalid_park"  # a sleep on a consumed or expired key, or a malformed park
    TOOL_UNAVAILABLE = "tool_unavailable"  # no tool by that name (removed while parked)
    INTERRUPTED = "interrupted"  # a run was cut off and may not be replayed
    TOOL_ERROR = "tool_error"  # execute() raised
    BLOCKED = "blocked"  # a before_tool gate blocked the call
    INVALID_ARGUMENTS = "invalid_arguments"  # the arguments failed the tool's parameters
    ABORTED = "aborted"  # the call was aborted


class TextContent(BaseModel):
    """A piece of text output."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ToolResult(BaseModel):
    """A call's result as the model will see it, plus what the harness adds."""

    model_config = ConfigDict(frozen=True)

    content: tuple[TextContent, ...] = ()
    is_error: bool = False
    code: ToolErrorCode | None = None
    details: Any = None
    diagnostics: tuple[str, ...] = ()
    duration_ms: float | None = None

    @classmethod
    def of_text(cls, text: str, *, is_error: bool = False, details: Any = None) -> ToolResult:
        """A result holding one text block."""
        return cls(content=(TextContent(text=text),), is_error=is_error, details=details)

    @classmethod
    def error(cls, code: ToolErrorCode, text: str, *, details: Any = None) -> ToolResult:
        """An error result with one of the harness's error codes."""
        return cls(content=(TextContent(text=text),), is_error=True, code=code, details=details)

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(block.text for block in self.content)


@dataclass(frozen=True)
class Sleep:
    """Park until ``until`` (a clock time), the first listed key holding a value, or both.

    Returned by ``execute()`` (``checkpoint`` is what the call keeps for its next run) or by a
    ``before_tool`` gate (no checkpoint: the whole call phase runs again on wake).
    """

    checkpoint: Any = None
    until: float | None = None
    signals: Sequence[SignalKey[Any]] = field(default_factory=tuple)
    heartbeat: float | None = None
    """Seconds: the sender must beat on a listed key at least this often, or the call wakes
    with :class:`~bide.engine.state.WakeHeartbeat` (its keys expired)."""
    expire_on_deadline: bool = True
    """False: ``until`` wakes the call with ``WakeTime`` and leaves its keys open."""


@dataclass(frozen=True)
class Wait:
    """Park until tasks end: ``all_settled``, ``fail_fast`` or ``any`` (the first)."""

    on: Sequence[str]
    checkpoint: Any = None
    policy: Literal["fail_fast", "all_settled", "any"] = "all_settled"


Park = Sleep | Wait


def park_state(park: Park, checkpoint: Any) -> Sleeping | Waiting:
    """The state a task commits for ``park``, keeping ``checkpoint`` (the caller's own, which
    wraps the park's). Raises pydantic's ``ValidationError`` for a malformed park."""
    if isinstance(park, Sleep):
        return Sleeping(
            checkpoint=checkpoint,
            until=park.until,
            signals=tuple(park.signals),
            heartbeat=park.heartbeat,
            expire_on_deadline=park.expire_on_deadline,
        )
    return Waiting(checkpoint=checkpoint, on=tuple(park.on), policy=park.policy)
