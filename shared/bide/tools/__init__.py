"""Tools that park: ``define_tool``, the tool task, gates and wrappers (design 001 ch. V-VIII),
and :func:`mint_webhook`, a capability URL that delivers its body to the calling tool."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import KeyRequired, NestedToolCall, ToolExecutionApi, result_of
    from .define import ToolArgumentsError, ToolDefinition, ToolShape, define_tool, wrap_tool
    from .hooks import Block, Extension, HookApi, Replace, ToolCall
    from .registry import ToolRegistry
    from .results import Park, Sleep, TextContent, ToolErrorCode, ToolResult, Wait
    from .task import TOOL_TASK, ToolCallInput
    from .webhooks import Webhook, mint_webhook

# Each public name -> its module, imported on first use (PEP 562): the signal function checks
# webhooks with bide.tools.webhooks and must not load the tool task, hooks and registry.
_EXPORTS: dict[str, str] = {
    "KeyRequired": "api",
    "NestedToolCall": "api",
    "ToolExecutionApi": "api",
    "result_of": "api",
    "ToolArgumentsError": "define",
    "ToolDefinition": "define",
    "ToolShape": "define",
    "define_tool": "define",
    "wrap_tool": "define",
    "Block": "hooks",
    "Extension": "hooks",
    "HookApi": "hooks",
    "Replace": "hooks",
    "ToolCall": "hooks",
    "ToolRegistry": "registry",
    "Park": "results",
    "Sleep": "results",
    "TextContent": "results",
    "ToolErrorCode": "results",
    "ToolResult": "results",
    "Wait": "results",
    "TOOL_TASK": "task",
    "ToolCallInput": "task",
    "Webhook": "webhooks",
    "mint_webhook": "webhooks",
}


if not TYPE_CHECKING:  # mypy checks names against the imports above
    from .._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)


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
