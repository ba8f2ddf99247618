"""Tools that park: ``define_tool``, the tool task, gates and wrappers (design 001 ch. V-VIII)."""

from .api import KeyRequired, NestedToolCall, ToolExecutionApi, result_of
from .define import ToolArgumentsError, ToolDefinition, define_tool, wrap_tool
from .hooks import Block, Extension, HookApi, Replace, ToolCall
from .registry import ToolRegistry
from .results import Park, Sleep, TextContent, ToolErrorCode, ToolResult, Wait
from .task import TOOL_TASK, ToolCallInput

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
    "Wait",
    "define_tool",
    "result_of",
    "wrap_tool",
]
