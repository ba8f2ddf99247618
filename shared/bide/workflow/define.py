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

The shape is computed here, once, and every consumer reads it: the tool task (which cleans up
a workflow body's first run on abort), the background task kind, the manifest. The ``task``
argument exists if and only if the lifetime is ``"task"``; a body with the wrong number of
parameters is refused at definition.

The final-output rule: a body's return value is the result (a ``str`` or a
:class:`~bide.tools.ToolResult` as is; anything else as JSON text, also kept in ``details``).
Progress (``ctx.progress``) is stream-only and never becomes the result; ``return None``
means the result ``null``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..engine.errors import DefinitionError, UnknownTaskKind
from ..tools.api import ToolExecutionApi
from ..tools.define import Cancel, Concurrency, Lifetime, Replay, ToolShape, define_tool
from ..tools.results import ToolErrorCode, ToolResult
from .background import ENDED_KEY, _info, background_kind, index_key
from .context import Errored, Finished, Parked, RunHost, open_requests, run_body
from .requests import withdraw
from .tool import WorkflowTool


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
    shape = _shape(name, lifetime, "workflow", body)
    _validated(name, description, parameters, replay, concurrency)
    if lifetime == "task":
        execute, cancel = _receipt(name), None
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


def define_background_tool(
    name: str,
    description: str,
    parameters: type[BaseModel],
    execute: Callable[..., Any],
    *,
    replay: Replay = "unsafe",
    cancel: Cancel | None = None,
    concurrency: Concurrency = "exclusive",
) -> WorkflowTool:
    """The ``task``/``none`` cell: ``execute(args, api, task)`` runs as a background task
    after the model got its receipt; it may park like any tool (return ``Sleep``/``Wait``)
    and post messages (``await task.post_message(text)``); its return value arrives as the
    completion notification. ``replay`` and ``cancel`` mean what they mean for a tool."""
    shape = _shape(name, "task", "none", execute)
    _validated(name, description, parameters, replay, concurrency)
    return WorkflowTool(
        name,
        description,
        parameters,
        _receipt(name),
        "safe",  # the receipt finds its task by key: rerunning it is harmless
        None,
        concurrency=concurrency,
        shape=shape,
        body=execute,
        body_replay=replay,
        body_cancel=cancel,
    )


def _validated(
    name: str, description: str, parameters: type[BaseModel], replay: str, concurrency: str
) -> None:
    async def unused(_args: Any, _api: Any) -> str:  # pragma: no cover - never called
        return ""

    # define_tool checks the common parts (name, parameters model, policies).
    define_tool(name, description, parameters, unused, replay=replay, concurrency=concurrency)  # type: ignore[arg-type]


def _shape(name: str, lifetime: str, suspend: str, fn: Callable[..., Any]) -> ToolShape:
    if lifetime not in ("step", "task"):
        raise DefinitionError(f"tool {name!r}: lifetime must be 'step' or 'task'")
    if not callable(fn):
        raise DefinitionError(f"tool {name!r}: its body must be callable")
    wanted = 3 if lifetime == "task" else 2
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None:
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != wanted and not any(p.kind == p.VAR_POSITIONAL for p in params):
            task = "(args, ctx, task)" if suspend == "workflow" else "(args, api, task)"
            plain = "(args, ctx)" if suspend == "workflow" else "(args, api)"
            raise DefinitionError(
                f"tool {name!r}: lifetime {lifetime!r} takes {task if wanted == 3 else plain}; "
                "the task argument exists if and only if lifetime is 'task'"
            )
    return ToolShape(lifetime=lifetime, suspend=suspend)  # type: ignore[arg-type]


def result_of_value(value: Any) -> ToolResult:
    """The final-output rule: the body's return value as the call's result."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.of_text(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return ToolResult.of_text(json.dumps(value, default=str), details=value)


def _call_input(api: ToolExecutionApi) -> dict[str, Any]:
    record = api._rt._h.task(api.task_id)
    return dict(record.input) if record is not None and isinstance(record.input, dict) else {}


def _foreground(api: ToolExecutionApi, tool: WorkflowTool) -> RunHost:
    def report(value: Any) -> None:
        api.progress(value if isinstance(value, str) else json.dumps(value, default=str))

    return RunHost(
        api._rt,
        tool.name,
        _call_input(api).get("call_id"),
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
            await api.write(lambda tx: withdraw(tx, requests))
        if isinstance(outcome, Finished):
            return result_of_value(outcome.value)
        assert isinstance(outcome, Errored)
        return ToolResult.error(ToolErrorCode.TOOL_ERROR, outcome.error)

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
            await api.write(lambda tx: withdraw(tx, requests))

    return execute, cancel


def _receipt(name: str) -> Any:
    """``execute`` of a background tool: create its task (once) and hand out the receipt."""

    async def execute(args: BaseModel, api: ToolExecutionApi) -> ToolResult:
        kind = background_kind(api._registry)
        if kind is None:
            return ToolResult.error(
                ToolErrorCode.TOOL_ERROR,
                f"background tool {name!r} needs bide.workflow.install(agent) (or the kinds "
                "of bide.workflow.workflow_kinds(registry) in the harness)",
            )
        if api.get_doc(ENDED_KEY) is not None:
            return ToolResult.error(ToolErrorCode.TOOL_ERROR, "the session has ended")
        call = _call_input(api)
        spec = {
            "tool": name,
            "arguments": args.model_dump(mode="json"),
            "call_task": api.task_id,
            "call_id": call.get("call_id"),
            "conversation": call.get("conversation"),
        }

        def start(tx: Any) -> str:
            task_id: str = tx.create_task(
                kind, spec, key=f"background:{api.task_id}", owner=None, background=True
            )
            if tx.get_doc(index_key(task_id)) is None:
                info = _info(task_id, _spec_model(spec), tx.now())
                tx.put_doc(index_key(task_id), info.model_dump(mode="json"))
            return task_id

        try:
            task_id = await api.write(start)
        except UnknownTaskKind as exc:
            return ToolResult.error(ToolErrorCode.TOOL_ERROR, f"{exc}: see bide.workflow.install")
        receipt = {"status": "working", "task_id": task_id}
        return ToolResult.of_text(json.dumps(receipt), details=receipt)

    return execute


def _spec_model(spec: dict[str, Any]) -> Any:
    from .background import BackgroundInput

    return BackgroundInput.model_validate(spec)
