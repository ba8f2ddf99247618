"""Defining workflow and background tools: every cell of the shape table (design 000 §2).

=====================  ===============================  =====================================
                       ``lifetime="step"``              ``lifetime="task"``
=====================  ===============================  =====================================
``suspend="none"``     :func:`~bide.tools.define_tool`  ``define_tool(..., lifetime="task")``:
                       ``execute(args, api)``           ``execute(args, api, task)`` runs as a
                                                        background task after the receipt
``suspend="workflow"`` :func:`define_workflow_tool`:    ``define_workflow_tool(...,
                       ``body(args, ctx)`` replayed;    lifetime="task")``: ``body(args, ctx,
                       the turn waits for its result    task)``; receipt, then the body runs
                                                        on as a background task
=====================  ===============================  =====================================

The shape is computed once, at definition (:func:`bide.tools.define.body_shape`), and every
consumer reads it: the tool task (which cleans up a workflow body's first run on abort), the
background task kind, the manifest. The ``task`` argument exists if and only if the lifetime
is ``"task"``; a body with the wrong number of parameters is refused at definition. The
``task``/``none`` cell needs no workflow machinery to define: :func:`define_background_tool`
is :func:`bide.tools.define.define_background_tool`, re-exported here.

The final-output rule: a body's return value is the result (a ``str`` or a
:class:`~bide.tools.ToolResult` as is; anything else as JSON text, also kept in ``details``).
Progress (``ctx.progress``) goes to the event stream and never becomes the result; ``return None``
means the result ``null``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..engine.errors import DefinitionError
from ..tools.api import ToolExecutionApi
from ..tools.define import (
    Concurrency,
    Lifetime,
    Replay,
    WorkflowTool,
    background_receipt,
    body_shape,
    define_background_tool,
    define_tool,
)
from ..tools.results import ToolErrorCode, ToolResult
from .background import call_input
from .context import Errored, Finished, Parked, RunHost, open_requests, run_body
from .requests import CloseReason, withdraw

__all__ = ["define_background_tool", "define_workflow_tool", "result_of_value"]


def define_workflow_tool(
    name: str,
    description: str,
    parameters: type[BaseModel],
    body: Callable[..., Any],
    *,
    lifetime: Lifetime = "step",
    replay: Replay = "safe",
    concurrency: Concurrency = "exclusive",
    agents: Mapping[str, Any] | None = None,
    grace: float = 30.0,
) -> WorkflowTool:
    """Define a tool whose body awaits durable operations (``ctx.step``, ``ctx.sleep``,
    ``ctx.ask``, ``ctx.webhook``, ``ctx.wait_for``, ``ctx.agent``, ``ctx.race``) and is
    replayed from its recorded history after every wake.

    ``lifetime="step"``: ``body(args, ctx)``; the turn waits for its return value.
    ``lifetime="task"``: ``body(args, ctx, task)``; the model gets a receipt at once and the
    body runs on as a background task (``await task.post_message(text)`` wakes the parent).
    ``replay`` (default ``"safe"``) lets recovery rerun a cut-off run: replay skips recorded
    steps, and a step cut off mid-way runs again (steps are at least once; give external
    calls ``step.idempotency_key``). ``agents`` maps the names ``ctx.agent(target=...)`` may
    use to agents. A cancelled body gets ``grace`` seconds to unwind.
    """
    _async_body(name, body)
    shape = body_shape(name, lifetime, "workflow", body)
    _validated(name, description, parameters, replay, concurrency)
    if lifetime == "task":
        execute, cancel = background_receipt(name), None
    else:
        execute, cancel = _replayed(name)
    return WorkflowTool(
        name,
        description,
        parameters,
        execute,
        replay if lifetime == "step" else "safe",
        cancel,
        concurrency=concurrency,
        shape=shape,
        body=body,
        body_replay="safe",
        agents=dict(agents or {}),
        grace=grace,
    )


def _async_body(name: str, body: Callable[..., Any]) -> None:
    """Refuse, at definition, a body that could only fail when it runs: replay awaits a
    coroutine, so the body must be an ``async def`` (or a callable whose ``__call__`` is)."""
    if not callable(body):
        return  # body_shape says so
    call = getattr(body, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    if inspect.isasyncgenfunction(body) or inspect.isasyncgenfunction(call):
        raise DefinitionError(
            f"tool {name!r}: its body is an async generator; a workflow body returns its "
            "result: use `async def` with `ctx.progress(value)` where it yields progress, "
            "`await task.post_message(text)` where it yields a message, and `return` the result"
        )
    if inspect.iscoroutinefunction(body) or inspect.iscoroutinefunction(call):
        return
    what = "a lambda" if getattr(body, "__name__", "") == "<lambda>" else "not an `async def`"
    if inspect.isgeneratorfunction(body):
        what = "a generator function"
    raise DefinitionError(
        f"tool {name!r}: its body is {what}; a workflow body is replayed as a coroutine: "
        "define it as `async def body(args, ctx)` (`body(args, ctx, task)` for "
        "lifetime='task') and await its operations; to reuse another function, wrap it: "
        "`async def body(args, ctx): return await other(args, ctx)`"
    )


def _validated(
    name: str, description: str, parameters: type[BaseModel], replay: str, concurrency: str
) -> None:
    async def unused(_args: Any, _api: Any) -> str:  # pragma: no cover - never called
        return ""

    # define_tool checks the common parts (name, parameters model, policies).
    define_tool(name, description, parameters, unused, replay=replay, concurrency=concurrency)  # type: ignore[arg-type]


def result_of_value(value: Any) -> ToolResult:
    """The final-output rule: the body's return value as the call's result."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.of_text(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return ToolResult.of_text(json.dumps(value, default=str), details=value)


def _foreground(api: ToolExecutionApi, tool: WorkflowTool) -> RunHost:
    def report(value: Any) -> None:
        # Only the call's log: ctx.progress writes the value itself to the event stream.
        api.progress_log.append(value if isinstance(value, str) else json.dumps(value, default=str))

    return RunHost(
        api._rt,
        tool.name,
        call_input(api).get("call_id"),
        aborted=api.aborted,
        agents=tool.agents,
        report=report,
    )


def _resolve(api: ToolExecutionApi, name: str) -> WorkflowTool:
    tool = api._registry.get(name)
    if not isinstance(tool, WorkflowTool) or tool.body is None:
        raise DefinitionError(f"tool {name!r} is not a workflow tool in this registry")
    return tool


def _replayed(name: str) -> tuple[Any, Any]:
    """``execute`` and ``cancel`` of a waiting workflow tool (shape ``step``/``workflow``)."""

    async def execute(args: Any, api: ToolExecutionApi) -> Any:
        tool = _resolve(api, name)
        assert tool.body is not None
        outcome = await run_body(_foreground(api, tool), tool.body, args, with_task=False)
        if isinstance(outcome, Parked):
            return outcome.park
        requests = open_requests(api._rt)
        if requests:  # the run ends with this result: its open questions are withdrawn
            why: CloseReason = "completed" if isinstance(outcome, Finished) else "failed"
            await api.write(lambda tx: withdraw(tx, requests, why))
        if isinstance(outcome, Finished):
            return result_of_value(outcome.value)
        assert isinstance(outcome, Errored)
        if outcome.failure is not None:  # uncaught: the call ends failed with it
            raise outcome.failure
        details = (
            None if outcome.nondeterminism is None else {"nondeterminism": outcome.nondeterminism}
        )
        return ToolResult.error(ToolErrorCode.TOOL_ERROR, outcome.error, details=details)

    async def cancel(args: Any, api: ToolExecutionApi) -> None:
        tool = _resolve(api, name)
        assert tool.body is not None
        host = _foreground(api, tool)  # api.aborted never fires during cleanup
        cleanup = run_body(host, tool.body, args, with_task=False, cancelling=True)
        try:
            await asyncio.wait_for(cleanup, tool.grace)
        except TimeoutError:
            await api.diagnostic(f"cleanup of {name!r} did not finish within {tool.grace}s")
        requests = open_requests(api._rt)
        if requests:
            await api.write(lambda tx: withdraw(tx, requests, "cancelled"))

    return execute, cancel
