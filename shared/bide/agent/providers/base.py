"""The model provider port: one request in, one response out.

Messages are provider-neutral; each adapter maps them to its API. Errors are
:class:`ModelError`: ``retryable`` ones (throttling, overload, timeouts) make the generation
park on time and try again; the others end the run.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ...engine.errors import BideError


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCallRequest(_Model):
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class UserMessage(_Model):
    """Input from a person (or a parent agent)."""

    role: Literal["user"] = "user"
    text: str


class AssistantMessage(_Model):
    """What the model said, with the tool calls it asked for."""

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()


class ToolResultMessage(_Model):
    """The result of one tool call, answering the assistant message before it."""

    role: Literal["tool"] = "tool"
    call_id: str
    text: str
    is_error: bool = False


Message = UserMessage | AssistantMessage | ToolResultMessage


class ToolSpec(_Model):
    """A tool as the model sees it: name, description, JSON schema of its parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(_Model):
    """One request: system prompt, the conversation so far, the tools on offer."""

    system: str | None = None
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered"]


class Usage(_Model):
    """Token counts, when the provider reports them."""

    input_tokens: int = 0
    output_tokens: int = 0


class ModelResponse(_Model):
    """The model's answer: text and/or tool calls, and why it stopped."""

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    stop_reason: StopReason = "end_turn"
    usage: Usage = Usage()


class ModelError(BideError):
    """A request failed. ``retryable`` says whether the same request may succeed later;
    ``code`` is the provider's error name."""

    def __init__(self, message: str, *, retryable: bool, code: str = "model_error") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = code


class ModelProvider(Protocol):
    """Answers model requests."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request; raises :class:`ModelError` on failure."""
        ...
