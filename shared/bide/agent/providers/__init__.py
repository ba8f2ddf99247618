"""Model providers: the port, a scripted provider for tests and demos, Amazon Bedrock."""

from .base import (
    AssistantMessage,
    Message,
    ModelError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "Message",
    "ModelError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "ToolCallRequest",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
]
