"""Model-visible promise handles: tools to await, inspect and cancel a promise by its id."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from ..engine.clock import DAY
from ..tools.define import ToolDefinition, define_tool
from ..tools.results import Sleep, ToolResult
from .core import cancel_promise, read_promise
from .model import DEFAULT_REJECTION, PromiseDoc, PromiseError, PromiseSettled
from .rules import ResolveResult
from .waiting import AwaitTimedOut, await_promise

MAX_AWAIT = 7 * DAY


class AwaitArgs(BaseModel):
    """Arguments of ``promise_await``."""

    promise_id: str = Field(description="The promise handle a tool returned")
    timeout_seconds: float = Field(
        default=600,
        ge=0,
        le=MAX_AWAIT,
        description="How long to wait now; on timeout the promise stays open",
    )


class PromiseArgs(BaseModel):
    """Arguments naming one promise."""

    promise_id: str = Field(description="The promise handle a tool returned")


class CancelArgs(PromiseArgs):
    """Arguments of ``promise_cancel``."""

    reason: str | None = Field(default=None, description="Why the result is no longer needed")


def render_value(value: Any) -> str:
    """A result value as text for the model."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def settled_result(settled: PromiseSettled) -> ToolResult:
    """What the model sees of a terminal promise; anything but ``resolved`` is an error."""
    details = settled.model_dump(mode="json")
    if settled.status == "resolved":
        text = f"promise {settled.promise_id} resolved: {render_value(settled.value)}"
        return ToolResult.of_text(text, details=details)
    error = settled.error
    if settled.error_type not in (None, DEFAULT_REJECTION):  # a named type says what failed
        error = f"{settled.error_type}: {error}"
    text = f"promise {settled.promise_id} {settled.status}: {error}"
    return ToolResult.of_text(text, is_error=True, details=details)


def _open_result(doc: PromiseDoc, waited: float | None) -> ToolResult:
    head = f"promise {doc.id} is still open"
    if waited is not None:
        head += f" after waiting {waited:g}s (the await timed out; the promise is unaffected)"
    tail = "; await it again later"
    details = {"promise_id": doc.id, "status": "open", "deadline": doc.deadline}
    return ToolResult.of_text(head + tail, details=details)


async def _await(args: AwaitArgs, api: Any) -> ToolResult | Sleep:
    if not args.timeout_seconds:
        return await _status(PromiseArgs(promise_id=args.promise_id), api)  # a status check
    try:
        got = await await_promise(api, args.promise_id, timeout=args.timeout_seconds)
    except PromiseError as exc:
        return ToolResult.of_text(str(exc), is_error=True)
    if isinstance(got, PromiseSettled):
        return settled_result(got)
    if isinstance(got, AwaitTimedOut):
        return _open_result(got.promise, args.timeout_seconds)
    return got


async def _status(args: PromiseArgs, api: Any) -> ToolResult:
    doc = read_promise(api, args.promise_id)
    if doc is None:
        return ToolResult.of_text(f"no promise {args.promise_id!r} in this session", is_error=True)
    if doc.terminal:
        return settled_result(PromiseSettled.of(doc))
    return _open_result(doc, None)


async def _cancel(args: CancelArgs, api: Any) -> ToolResult:
    if read_promise(api, args.promise_id) is None:
        return ToolResult.of_text(f"no promise {args.promise_id!r} in this session", is_error=True)
    reason = args.reason or "cancelled by the agent"
    result = await api.write(lambda tx: cancel_promise(tx, args.promise_id, reason))
    doc = read_promise(api, args.promise_id)
    assert doc is not None
    if result == ResolveResult.SETTLED:
        return ToolResult.of_text(f"promise {doc.id} cancelled")
    return ToolResult.of_text(f"promise {doc.id} had already ended {doc.status}")


def promise_tools() -> list[ToolDefinition]:
    """``promise_await``, ``promise_status`` and ``promise_cancel``: what lets an agent hold a
    promise handle and come back to it later. All replay-safe (they only read and record);
    awaiting and reading are parallel-safe, so several handles can be awaited in one batch."""
    return [
        define_tool(
            "promise_await",
            "Wait for a promise's result, up to timeout_seconds. On timeout the promise stays "
            "open and can be awaited again later.",
            AwaitArgs,
            _await,
            replay="safe",
            concurrency="parallel_safe",
        ),
        define_tool(
            "promise_status",
            "The current status of a promise, without waiting",
            PromiseArgs,
            _status,
            replay="safe",
            concurrency="parallel_safe",
        ),
        define_tool(
            "promise_cancel",
            "Cancel a promise whose result is no longer needed",
            CancelArgs,
            _cancel,
            replay="safe",
        ),
    ]
