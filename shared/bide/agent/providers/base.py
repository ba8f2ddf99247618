"""The model provider port: one request in, one response out.

Messages are provider-neutral; each adapter maps them to its API. Errors are
:class:`ModelError`: ``retryable`` ones (throttling, overload, timeouts) make the generation
park on time and try again; the others end the run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ...engine.errors import BideError, DefinitionError


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
    time_limit: float | None = Field(
        default=None,
        description="seconds the answer must arrive in: what is left of the invocation that "
        "sends the request (None: the host sets no limit); a provider that cannot answer in "
        "time raises ModelDeferred rather than start a request it would have to abandon",
    )


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered"]


class Usage(_Model):
    """Token counts, when the provider reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


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


class ModelDeferred(ModelError):
    """The request was not sent (or not waited for) because the invocation's time was too
    short for it: the generation parks until the invocation ends and a later invocation asks
    again, without counting a failed attempt."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True, code="deferred")


class ModelProvider(Protocol):
    """Answers model requests."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request; raises :class:`ModelError` on failure."""
        ...


@dataclass(frozen=True)
class ToolNameRule:
    """The tool names a provider's API accepts: ``pattern`` must match the whole name, which
    is at most ``max_length`` characters long; ``documented_at`` says where the rule is from.

    A provider declares it as its ``tool_name_rule`` attribute (optional: a provider without
    one accepts any name). A name the API refuses would fail every request of a run, so the
    agent checks the names it exposes when it is defined (:func:`check_tool_names`)."""

    pattern: str
    max_length: int
    documented_at: str

    def problem(self, name: str) -> str | None:
        """Why ``name`` is refused, or None when it is accepted."""
        if not 1 <= len(name) <= self.max_length:
            return f"it is {len(name)} characters long (1 to {self.max_length} are accepted)"
        if re.fullmatch(self.pattern, name) is None:
            return f"it does not match {self.pattern}"
        return None


class ToolNameError(DefinitionError):
    """A tool is exposed to a model under a name its provider refuses."""


def check_tool_names(provider: object, names: Iterable[str], *, family: str) -> None:
    """Raise :class:`ToolNameError` naming every exposed name ``provider`` refuses."""
    rule = getattr(provider, "tool_name_rule", None)
    if not isinstance(rule, ToolNameRule):
        return
    problems = [f"{name!r}: {why}" for name in names if (why := rule.problem(name)) is not None]
    if problems:
        raise ToolNameError(
            f"{type(provider).__name__} refuses tool names exposed to model family {family!r}: "
            + "; ".join(problems)
            + f" (rule: {rule.documented_at}). Rename the tool, or give it a presentation "
            "with an accepted name (bide.admission)."
        )
