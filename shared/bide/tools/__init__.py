"""Tools that park: ``define_tool``, the tool task, gates and wrappers (design 001 ch. V-VIII),
and :func:`mint_webhook`, a capability URL that delivers its body to the calling tool."""

from .api import KeyRequired, NestedToolCall, ToolExecutionApi, result_of
from .define import ToolArgumentsError, ToolDefinition, ToolShape, define_tool, wrap_tool
from .hooks import Block, Extension, HookApi, Replace, ToolCall
from .registry import ToolRegistry
from .results import Park, Sleep, TextContent, ToolErrorCode, ToolResult, Wait
from .task import TOOL_TASK, ToolCallInput
from .webhooks import Webhook, mint_webhook

__all__ = [
    "TOOL_TASK",
    "Block",
    "Extension",
    "HookApi",
    "KeyRequired",
    "NestedToolCall",
    "Park",
    "Replace",
    "Sleep",
    "TextContent",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallInput",
    "ToolDefinition",
    "ToolErrorCode",
    "ToolExecutionApi",
    "ToolRegistry",
    "ToolResult",
    "ToolShape",
    "Wait",
    "Webhook",
    "define_tool",
    "mint_webhook",
    "result_of",
    "wrap_tool",
]
