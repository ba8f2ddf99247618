"""The tool task: ``call`` -> intent (``execute``) -> result, or -> ``parked`` -> intent again.

Checkpoints (design 001 ch. V):

* ``{"phase": "call", "registry": n}``: resolve, validate, every ``before_tool`` gate,
  validate again. A gate's sleep parks here; every wake reruns the whole phase.
* ``{"phase": "execute", arguments, replay, wake, checkpoint}``: the intent, committed before
  ``execute()`` runs. Only recovery enters this phase: it reruns when the stored and the
  current policy are both ``safe``; otherwise the call ends ``interrupted``.
* ``{"phase": "parked", arguments, replay, checkpoint}``: sleeping or waiting after
  ``execute()`` returned a park. Its handler resolves the tool, commits intent with the wake,
  then runs ``execute()`` again in the same invocation. A workflow body both policies call
  replay-safe commits no intent: its woken run replays its history, so recovery reruns the
  parked phase with the same wake (:func:`_replays_itself`; docs/reliability.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ..engine.errors import InvalidPark, InvocationEnded
from ..engine.failures import FailureReceived
from ..engine.state import (
    Aborted,
    Completed,
    Failed,
    Pending,
    Running,
    Sleeping,
    Terminal,
    WakeReason,
)
from ..engine.state_forms import wake_from_dict
from ..engine.tasks import TaskDefinition, TaskView, define_task
from .api import ToolExecutionApi
from .define import ToolArgumentsError, ToolDefinition
from .hooks import Block, Replace, ToolCall
from .redaction import scrub_value
from .result_entry import with_entry
from .results import Sleep, ToolErrorCode, ToolResult, Wait, park_state

if TYPE_CHECKING:
    from ..engine.records import TaskRecord
    from ..engine.runtime import Runtime
    from .registry import ToolRegistry

TOOL_TASK = "bide.tool"


class ToolCallInput(BaseModel):
    """A tool task's input."""

    name: str
    arguments: dict[str, Any] = {}
    call_id: str | None = None
    conversation: str | None = None  # the transcript its result entry goes to
    exposed_name: str | None = None  # the name the model used (tool admission)
    variant: str | None = None  # the presentation variant the model saw


def tool_task(registry: ToolRegistry) -> TaskDefinition:
    """The task kind that runs calls against ``registry``."""

    async def call(task: TaskView, rt: Any) -> None:
        await _call_phase(registry, task, rt)

    async def execute(task: TaskView, rt: Any) -> None:
        await _recover(registry, task, rt)

    async def parked(task: TaskView, rt: Any) -> None:
        await _woken(registry, task, rt)

    async def abort(task: TaskView, rt: Any) -> None:
        await _aborted(registry, task, rt)

    def rerun(record: TaskRecord, first_pass: bool) -> bool:
        # The gates installed now decide: a registry change, or the first pass after open,
        # reruns every call parked at its gates.
        checkpoint = record.state.checkpoint  # type: ignore[union-attr]
        return (
            isinstance(record.state, Sleeping)
            and checkpoint.get("phase") == "call"
            and (first_pass or checkpoint.get("registry") != registry.version)
        )

    return define_task(
        TOOL_TASK,
        1,
        lambda _input: {"phase": "call"},
        {"call": call, "execute": execute, "parked": parked},
        abort=abort,
        input_type=ToolCallInput,
        rerun=rerun,
    )


class _Hooks:
    """The HookApi given to gates and result hooks."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    @property
    def task_id(self) -> str:
        return self._rt.task_id

    def now(self) -> float:
        return self._rt.now()

    async def read_signal(self, token: Any, key: str) -> Any:
        return await self._rt.read_signal(token, key)

    async def memo(self, name: str, candidate: Any = ...) -> Any:
        if candidate is ...:
            return await self._rt.memo(name)
        return await self._rt.memo(name, candidate)


def _input(task: TaskView) -> ToolCallInput:
    return ToolCallInput.model_validate(task.input)


async def _call_phase(registry: ToolRegistry, task: TaskView, rt: Runtime) -> None:
    started = registry.version
    spec = _input(task)
    call = ToolCall(spec.name, dict(spec.arguments), task.id, spec.call_id)
    tool = registry.get(spec.name)
    if tool is None:
        text = f"no tool named {spec.name!r} is available"
        await _unavailable(registry, task, rt, call, text)
        return
    try:
        tool.parse(call.arguments)
    except ToolArgumentsError as exc:
        result = ToolResult.error(ToolErrorCode.INVALID_ARGUMENTS, str(exc), details=exc.errors)
        await _settle(registry, task, rt, call, result)
        return
    hooks = _Hooks(rt)
    for extension in registry.extensions:
        if extension.before_tool is None:
            continue
        answer = await extension.before_tool(call, hooks)
        if isinstance(answer, Replace):
            call = ToolCall(call.name, dict(answer.arguments), call.task_id, call.call_id)
        elif isinstance(answer, Block):
            result = ToolResult.error(ToolErrorCode.BLOCKED, answer.reason)
            await _settle(registry, task, rt, call, result)
            return
        elif isinstance(answer, Sleep):
            await _gate_sleep(registry, task, rt, call, answer, started)
            return
    try:
        parsed = tool.parse(call.arguments)
    except ToolArgumentsError as exc:
        result = ToolResult.error(ToolErrorCode.INVALID_ARGUMENTS, str(exc), details=exc.errors)
        await _settle(registry, task, rt, call, result)
        return
    arguments = tool.dump(parsed)
    intent = {
        "phase": "execute",
        "arguments": arguments,
        "replay": tool.replay,
        "wake": None,
        "checkpoint": None,
    }
    await rt.commit(Running(checkpoint=intent))
    await _run(registry, task, rt, tool, arguments, tool.replay, wake=None, checkpoint=None)


async def _gate_sleep(
    registry: ToolRegistry, task: TaskView, rt: Runtime, call: ToolCall, sleep: Sleep, started: int
) -> None:
    if registry.version != started:
        # The registry changed under this pass: run the gates installed now, at once.
        await rt.commit(Pending(checkpoint={"phase": "call"}))
        return
    try:
        state = Sleeping(
            checkpoint={"phase": "call", "registry": started},
            until=sleep.until,
            signals=tuple(sleep.signals),
            heartbeat=sleep.heartbeat,
            expire_on_deadline=sleep.expire_on_deadline,
        )
        await rt.commit(state)
    except (InvalidPark, ValidationError) as exc:
        await _settle(
            registry, task, rt, call, ToolResult.error(ToolErrorCode.INVALID_PARK, str(exc))
        )


async def _run(
    registry: ToolRegistry,
    task: TaskView,
    rt: Runtime,
    tool: ToolDefinition,
    arguments: dict[str, Any],
    replay: str,
    *,
    wake: WakeReason | None,
    checkpoint: Any,
    refused: Sleep | Wait | None = None,
) -> None:
    """Run ``execute()`` once (intent is already committed) and store what it returned.
    ``refused``: the park a workflow body returned last, which its commit refused."""
    call = ToolCall(tool.name, arguments, task.id, _input(task).call_id)
    api = ToolExecutionApi(rt, registry, wake=wake, checkpoint=checkpoint)
    try:
        returned = await tool.execute(tool.parse(arguments), api)
    except InvocationEnded:
        raise
    except FailureReceived as exc:  # a wait's failure nobody caught: the call failed with it
        text = f"{exc.type}: {exc.message}"
        result = ToolResult.error(
            ToolErrorCode.TOOL_ERROR, text, details={"failure": exc.to_json()}
        )
        await _settle(registry, task, rt, call, result, failed=True)
        return
    except Exception as exc:
        result = ToolResult.error(ToolErrorCode.TOOL_ERROR, f"{type(exc).__name__}: {exc}")
        await _settle(registry, task, rt, call, result)
        return
    if isinstance(returned, Sleep | Wait):
        park = returned

        async def again() -> None:
            await _run(
                registry,
                task,
                rt,
                tool,
                arguments,
                replay,
                wake=wake,
                checkpoint=checkpoint,
                refused=park,
            )

        # A workflow body's wait leaves the key it parks on unread (the park requires its
        # document absent): refused because it is there, the body runs again knowing it
        # (_park reruns only then). An identical park again learnt nothing: final.
        rerun = again if tool.shape.suspend == "workflow" and park != refused else None
        await _park(registry, task, rt, tool, call, arguments, replay, park, rerun)
        return
    result = ToolResult.of_text(returned) if isinstance(returned, str) else returned
    if not isinstance(result, ToolResult):
        text = f"tool {tool.name!r} returned {type(returned).__name__}, not a result or a park"
        result = ToolResult.error(ToolErrorCode.TOOL_ERROR, text)
    await _settle(registry, task, rt, call, result)


async def _park(
    registry: ToolRegistry,
    task: TaskView,
    rt: Runtime,
    tool: ToolDefinition,
    call: ToolCall,
    arguments: dict[str, Any],
    replay: str,
    park: Sleep | Wait,
    rerun: Callable[[], Awaitable[None]] | None = None,
) -> None:
    checkpoint = {
        "phase": "parked",
        "arguments": arguments,
        "replay": replay,
        "checkpoint": park.checkpoint,
    }
    refusal: Exception | None = None
    unread = rt.unread_slots(key.slot for key in getattr(park, "signals", ()))
    try:
        await rt.commit(park_state(park, checkpoint))
    except (InvalidPark, ValidationError) as exc:
        refusal = exc
    except InvocationEnded:
        if rt.aborted:
            # The call was abort-marked before its park was stored: the external work it
            # started may be live, and nothing else will ever clean it up.
            await _cancel(registry, tool, arguments, rt, park.checkpoint)
        raise
    # Refused because a key's document the body had not read exists (the store's refusal
    # taught the harness its body): nothing was written, the body decides again knowing it.
    # Any other refusal is final: the body would decide the same.
    learnt = unread - rt.unread_slots(unread)
    if isinstance(refusal, InvalidPark) and rerun is not None and learnt:
        await rerun()
    elif refusal is not None:
        await _settle(
            registry, task, rt, call, ToolResult.error(ToolErrorCode.INVALID_PARK, str(refusal))
        )


async def _woken(registry: ToolRegistry, task: TaskView, rt: Runtime) -> None:
    parked = task.checkpoint
    spec = _input(task)
    call = ToolCall(spec.name, parked["arguments"], task.id, spec.call_id)
    tool = registry.get(spec.name)
    if tool is None:
        text = f"tool {spec.name!r} was removed while the call was parked"
        await _unavailable(registry, task, rt, call, text)
        return
    wake = task.wake
    intent = {
        "phase": "execute",
        "arguments": parked["arguments"],
        "replay": parked["replay"],
        "wake": wake.to_dict() if wake is not None else None,
        "checkpoint": parked.get("checkpoint"),
    }
    replays = _replays_itself(tool, parked["replay"])
    if parked["replay"] == "safe" and rt.restarts > 0 and not replays:
        # An earlier run of this wake was cut off, and it may have been a workflow body's,
        # which commits no intent (below): recovery's rule decides, as if it had.
        await _recover(registry, task, rt, intent)
        return
    if not replays:
        await rt.commit(Running(checkpoint=intent))
    await _run(
        registry,
        task,
        rt,
        tool,
        parked["arguments"],
        parked["replay"],
        wake=wake,
        checkpoint=parked.get("checkpoint"),
    )


def _replays_itself(tool: ToolDefinition, stored: str) -> bool:
    """Whether a woken run of ``tool`` needs no intent commit (design 001 principle 6, as
    refined in docs/reliability.md): a workflow body that the call's stored and the current
    policy both call replay-safe. Recovery would rerun its cut-off run anyway, and the body
    replays its recorded history, so rerunning the parked phase with the same wake (the
    running state keeps it) is that same rerun. A crash is still counted: recovery counts a
    restart, and only the body's park or end moves the task on (resetting them)."""
    return (
        tool.shape.suspend == "workflow"
        and tool.shape.lifetime == "step"
        and stored == "safe"
        and tool.replay == "safe"
    )


async def _recover(
    registry: ToolRegistry, task: TaskView, rt: Runtime, woken: dict[str, Any] | None = None
) -> None:
    """Recovery found the intent: the run it records was cut off. ``woken``: the intent a
    rerun of the parked phase would commit, for a cut-off run that committed none (it is
    committed before the run repeats)."""
    intent = task.checkpoint if woken is None else woken
    spec = _input(task)
    tool = registry.get(spec.name)
    wake = wake_from_dict(intent["wake"]) if intent.get("wake") else None
    if tool is not None and intent["replay"] == "safe" and tool.replay == "safe":
        if woken is not None:
            await rt.commit(Running(checkpoint=intent))
        await _run(
            registry,
            task,
            rt,
            tool,
            intent["arguments"],
            intent["replay"],
            wake=wake,
            checkpoint=intent.get("checkpoint"),
        )
        return
    if tool is not None and wake is not None:
        # A woken run of a replay-unsafe tool: its external work may be live.
        await _cancel(registry, tool, intent["arguments"], rt, intent.get("checkpoint"))
    call = ToolCall(spec.name, intent["arguments"], task.id, spec.call_id)
    text = f"the run of {spec.name!r} was cut off and may not be replayed (replay-unsafe)"
    await _settle(registry, task, rt, call, ToolResult.error(ToolErrorCode.INTERRUPTED, text))


async def _aborted(registry: ToolRegistry, task: TaskView, rt: Runtime) -> None:
    checkpoint = task.checkpoint
    spec = _input(task)
    tool = registry.get(spec.name)
    arguments = checkpoint.get("arguments", spec.arguments)
    woken_run = checkpoint["phase"] == "execute" and checkpoint.get("wake") is not None
    # A workflow body's first run records what it did as it goes (asks published, steps
    # done): its cancel can replay that history and run the body's cleanup, so it runs too.
    recorded_run = (
        checkpoint["phase"] == "execute" and tool is not None and tool.shape.suspend == "workflow"
    )
    if tool is not None and (checkpoint["phase"] == "parked" or woken_run or recorded_run):
        await _cancel(registry, tool, arguments, rt, checkpoint.get("checkpoint"))
    call = ToolCall(spec.name, arguments, task.id, spec.call_id)
    reason = task.abort_reason or "aborted"
    result = await _finish_result(
        registry, task, rt, call, ToolResult.error(ToolErrorCode.ABORTED, reason)
    )
    payload = result.model_dump(mode="json")
    end = Terminal(outcome=Aborted(reason=task.abort_reason, result=payload))
    await rt.commit(with_entry(registry, _input(task), call, result, end))


async def _cancel(
    registry: ToolRegistry,
    tool: ToolDefinition,
    arguments: dict[str, Any],
    rt: Runtime,
    checkpoint: Any,
) -> None:
    if tool.cancel is None:
        return
    # Cleanup gets an abort signal that never fires: the abort must not cut it short.
    api = ToolExecutionApi(
        rt, registry, wake=None, checkpoint=checkpoint, abort_event=asyncio.Event()
    )
    try:
        await tool.cancel(tool.parse(arguments), api)
    except InvocationEnded:
        raise
    except Exception as exc:  # a failing cleanup must not keep the call alive
        await rt.memo(f"bide.cancel-error.{rt.now()}", f"{type(exc).__name__}: {exc}")


async def _finish_result(
    registry: ToolRegistry, task: TaskView, rt: Runtime, call: ToolCall, result: ToolResult
) -> ToolResult:
    hooks = _Hooks(rt)
    for extension in registry.extensions:
        if extension.after_tool is not None:
            replaced = await extension.after_tool(call, result, hooks)
            if replaced is not None:
                result = replaced
    diagnostics = []
    index = 0
    while (text := await rt.memo(f"bide.diag.{index}")) is not None:
        diagnostics.append(text)
        index += 1
    duration = round((rt.now() - task.created_at) * 1000, 3)
    return result.model_copy(update={"diagnostics": tuple(diagnostics), "duration_ms": duration})


async def _unavailable(
    registry: ToolRegistry, task: TaskView, rt: Runtime, call: ToolCall, text: str
) -> None:
    """End the call failed with ``tool_unavailable``: no tool by its name (any more)."""
    result = ToolResult.error(ToolErrorCode.TOOL_UNAVAILABLE, text)
    await _settle(registry, task, rt, call, result, failed=True)


async def _settle(
    registry: ToolRegistry,
    task: TaskView,
    rt: Runtime,
    call: ToolCall,
    result: ToolResult,
    *,
    failed: bool = False,
) -> None:
    """The result commit: after_tool, then the outcome (and, with agent sessions, the entry)."""
    result = await _finish_result(registry, task, rt, call, result)
    payload = result.model_dump(mode="json")
    # What the model and the history see: never a registered provider token (tools.redaction).
    clean = scrub_value(payload)
    if clean != payload:
        result, payload = ToolResult.model_validate(clean), clean
    outcome = Failed(error=payload) if failed else Completed(result=payload)
    await rt.commit(with_entry(registry, _input(task), call, result, Terminal(outcome=outcome)))
