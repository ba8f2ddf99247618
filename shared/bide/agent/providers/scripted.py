"""A deterministic model provider for tests and demos.

:class:`ScriptedProvider` answers from a script instead of a model::

    provider = ScriptedProvider([
        call_tool("get_weather", {"city": "Oslo"}),
        lambda request: reply(f"The tool said: {last_tool_result(request)}"),
    ])

Each step is a :class:`~.base.ModelResponse` (returned), a :class:`~.base.ModelError` (raised)
or a callable ``(ModelRequest) -> ModelResponse`` that answers from the conversation. A single
callable can also be the whole script; it then answers every request.

**One step per request answered.** Every call of :meth:`ScriptedProvider.complete` consumes the
next step, whether it returns or raises. The generation loop delivers at least once: after a
crash it may send the same request again, and that second request takes the *next* step, not
the one the lost answer came from. A script meant to survive crashes should therefore answer
from the conversation (a callable, or a whole-script callable) rather than by position.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .base import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCallRequest,
    ToolResultMessage,
)

__all__ = [
    "Responder",
    "ScriptStep",
    "ScriptedProvider",
    "call_tool",
    "call_tools",
    "last_tool_result",
    "reply",
]

Responder = Callable[[ModelRequest], ModelResponse]
"""Answers one request from its content."""

ScriptStep = ModelResponse | ModelError | Responder
"""One scripted answer: returned, raised, or computed from the request."""


class ScriptedProvider:
    """A :class:`~.base.ModelProvider` that plays a script; see the module docstring.

    ``requests`` records every request received, in order, including those answered by an
    error. When a list script runs out, :meth:`complete` raises a non-retryable
    :class:`~.base.ModelError` with code ``"script_exhausted"``.
    """

    def __init__(self, script: Sequence[ScriptStep] | Responder) -> None:
        self.requests: list[ModelRequest] = []
        self._responder: Responder | None = None
        self._steps: deque[ScriptStep] = deque()
        if callable(script):
            self._responder = script
        else:
            self._steps.extend(script)

    @property
    def remaining(self) -> int | None:
        """Steps not used yet; ``None`` when the script is one callable that never runs out."""
        return None if self._responder is not None else len(self._steps)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with the next step of the script."""
        self.requests.append(request)
        if self._responder is not None:
            step: ScriptStep = self._responder
        elif self._steps:
            step = self._steps.popleft()
        else:
            raise ModelError(
                f"the script ran out: request {len(self.requests)} has no step left to answer it",
                retryable=False,
                code="script_exhausted",
            )
        if isinstance(step, ModelError):
            raise step
        response = step if isinstance(step, ModelResponse) else step(request)
        if not isinstance(response, ModelResponse):
            raise TypeError(
                f"a script step must give a ModelResponse, got {type(response).__name__}"
            )
        _check_fresh_call_ids(request, response)
        return response


def reply(text: str, *, stop_reason: StopReason = "end_turn") -> ModelResponse:
    """A plain text answer."""
    return ModelResponse(text=text, stop_reason=stop_reason)


def call_tool(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    id: str | None = None,
    *,
    text: str = "",
) -> ModelResponse:
    """An answer that calls one tool (``stop_reason="tool_use"``), optionally with some text.

    Without ``id`` the call id is derived from the name and arguments, so a script gives the
    same ids on every run. Pass ``id`` when one conversation makes the same call twice.
    """
    return call_tools([(name, arguments or {}, id)], text=text)


def call_tools(
    calls: Iterable[
        ToolCallRequest | tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str | None]
    ],
    *,
    text: str = "",
) -> ModelResponse:
    """An answer that calls several tools at once.

    Each call is a :class:`~.base.ToolCallRequest` or a ``(name, arguments)`` or
    ``(name, arguments, id)`` tuple; missing ids are derived as in :func:`call_tool`.
    """
    requests: list[ToolCallRequest] = []
    for index, call in enumerate(calls):
        if isinstance(call, ToolCallRequest):
            requests.append(call)
            continue
        name, arguments = call[0], dict(call[1])
        call_id = call[2] if len(call) > 2 else None
        requests.append(
            ToolCallRequest(
                id=call_id or _derived_id(name, arguments, index),
                name=name,
                arguments=arguments,
            )
        )
    return ModelResponse(text=text, tool_calls=tuple(requests), stop_reason="tool_use")


def last_tool_result(request: ModelRequest) -> str:
    """The text of the newest tool result in ``request``'s conversation ("" if none).

    For callable steps that answer from what a tool returned.
    """
    for message in reversed(request.messages):
        if isinstance(message, ToolResultMessage):
            return message.text
    return ""


def _derived_id(name: str, arguments: Mapping[str, Any], index: int) -> str:
    # Stable across runs and processes (no counters, no randomness), so demos and golden
    # outputs do not depend on which test ran first.
    canonical = json.dumps([name, arguments, index], sort_keys=True, default=str)
    return f"call_{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"


def _check_fresh_call_ids(request: ModelRequest, response: ModelResponse) -> None:
    """Refuse a call id used twice in one conversation: derived ids repeat for a repeated call.

    A re-sent request (at-least-once delivery) does not hold the lost answer, so it never
    trips this.
    """
    used = {
        call.id
        for message in request.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }
    repeated: set[str] = set()
    for call in response.tool_calls:
        if call.id in used:
            repeated.add(call.id)
        used.add(call.id)
    if repeated:
        raise ModelError(
            f"scripted tool call ids {sorted(repeated)} occur twice in this conversation; "
            "pass id= to call_tool for a call made more than once",
            retryable=False,
            code="script_error",
        )
