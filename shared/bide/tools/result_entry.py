"""A tool call's result commit with its transcript entry (design 001: "result entry + slot
done"): the entry is written atomically with the call's end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.errors import DefinitionError
from ..engine.state import Terminal
from .hooks import ToolCall
from .results import ToolResult

if TYPE_CHECKING:
    from .registry import ToolRegistry
    from .task import ToolCallInput


def with_entry(
    registry: ToolRegistry, spec: ToolCallInput, call: ToolCall, result: ToolResult, state: Terminal
) -> Any:
    """The result commit: for a call made in a conversation, the result entry is written
    atomically with the call's end (design 001: "result entry + slot done")."""
    conversation = spec.conversation
    if conversation is None:
        return state
    append = registry.transcript
    if append is None:
        # Only an agent's generation names a conversation, and the agent installs the port.
        raise DefinitionError(
            f"tool call {call.task_id} was made in conversation {conversation!r}, but its "
            "registry has no transcript writer (give the registry to an Agent)"
        )
    entry = {
        "type": "tool_result",
        "call_id": call.call_id,
        "name": spec.exposed_name or call.name,
        "identity": call.name,
        "variant": spec.variant,
        "text": result.text,
        "is_error": result.is_error,
        "code": result.code,
    }

    def build(tx: Any) -> Terminal:
        append(tx, conversation, entry)
        return state

    return build
