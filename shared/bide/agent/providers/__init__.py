"""Model providers: the port, a scripted provider for tests and demos, Amazon Bedrock."""

from .base import (
    AssistantMessage,
    Message,
    ModelDeferred,
    ModelError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCallRequest,
    ToolNameError,
    ToolNameRule,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
    check_tool_names,
)

__all__ = [
    "AssistantMessage",
    "Message",
    "ModelDeferred",
    "ModelError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "ToolCallRequest",
    "ToolNameError",
    "ToolNameRule",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "check_tool_names",
]
