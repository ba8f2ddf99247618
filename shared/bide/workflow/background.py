"""Background tasks: the body of a ``lifetime="task"`` tool, run as a session-owned task.

The tool call itself completes at once with the receipt ``{"status": "working", "task_id"}``
(:func:`bide.tools.define.background_receipt`, through the registry's ``background`` port,
which :func:`workflow_kinds` fills), after creating one task of kind
:data:`BACKGROUND_TASK` (keyed by the call, so a rerun finds the same one; top-level and
``background``, so it outlives the call and the turn) and its entry in the session's task
index (``wf/task/<id>``, a :class:`BackgroundTaskInfo`).

The background task runs the tool's body with the same machinery as a waiting tool: a
workflow body is replayed from its history (checkpoints ``start`` -> ``execute`` (intent)
-> ``parked`` -> ``execute`` ...), an ordinary ``execute(args, api, task)`` runs like a tool
that may park. ``task.post_message(text)`` submits the text to the parent conversation as a
follow-up attributed to the task (``source="task:<id>"``, request id from a delivery id, so a
repeat is a duplicate). When the body returns or raises, the same commit ends the task,
updates the index, withdraws its open requests and submits the completion or failure
notification. ``task_cancel`` (a tool), :func:`~bide.workflow.index.cancel_background_in` and
:func:`~bide.workflow.index.end_session_in` abort it: its body unwinds (``finally`` runs)
and it ends ``cancelled`` without waking the parent.

A harness must know the kind: :func:`install` adds it to an agent's task kinds (and so to
the app's; a :class:`bide.app.App` calls it), or list :func:`workflow_kinds` yourself.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, Field, ValidationError

from ..engine.errors import InvalidPark, InvocationEnded, UnknownTaskKind
from ..engine.signals import SignalToken
from ..engine.state import Aborted, Completed, Failed, Outcome, Running, Terminal
from ..engine.tasks import TaskDefinition, TaskView, define_task
from ..tools.api import ToolExecutionApi
from ..tools.define import WorkflowTool
from ..tools.redaction import scrub, scrub_value
from ..tools.results import Sleep, ToolErrorCode, ToolResult, Wait, park_state
from .context import Errored, Finished, Parked, RunHost, open_requests, run_body
from .history import WEBHOOK
from .index import ENDED_KEY, BackgroundTaskInfo, TaskStatus, index_key
from .ops import describe
from .requests import withdraw

if TYPE_CHECKING:
    from ..engine.runtime import Runtime
    from ..tools.registry import BackgroundStarter, ToolRegistry

BACKGROUND_TASK = "bide.workflow.background"


class BackgroundInput(BaseModel):
    """A background task's input: the tool, its validated arguments and the call."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_task: str | None = None
    call_id: str | None = None
    conversation: str | None = None


@dataclass
class _Kinds:
    registry: ToolRegistry
    agent: Any
    background: TaskDefinition | None = None


_KINDS: weakref.WeakKeyDictionary[ToolRegistry, _Kinds] = weakref.WeakKeyDictionary()


def workflow_kinds(registry: ToolRegistry, agent: Any = None) -> list[TaskDefinition]:
    """The task kinds a harness needs to run ``registry``'s background tools (built once per
    registry). ``agent`` (a :class:`~bide.agent.Agent`) is what messages and notifications
    are submitted with; without one they only reach the task index."""
    kinds = _KINDS.get(registry)
    if kinds is None:
        kinds = _KINDS.setdefault(registry, _Kinds(registry, agent))
        kinds.background = _background_task(kinds)
        # The receipts of the registry's background tools start their tasks through this.
        registry.background = _starter(kinds.background)
    if agent is not None:
        kinds.agent = agent
    assert kinds.background is not None
    return [kinds.background]


def install(agent: Any) -> list[TaskDefinition]:
    """Let ``agent`` (a :class:`~bide.agent.Agent`) run background tools: their task kind
    joins ``agent.task_kinds()`` (and so every harness and app built from the agent)."""
    kinds = workflow_kinds(agent.tools, agent)
    for kind in kinds:
        if kind not in agent.hook_tasks:
            agent.hook_tasks.append(kind)
    return kinds


class AppLike(Protocol):
    """What :func:`setup_app` needs of an app (a :class:`bide.app.App`, which sits above the
    workflow layer and so is described here rather than imported)."""

    tasks: list[TaskDefinition]
    tools: ToolRegistry | None
    agent: Any

    def add_signals(self, tokens: Iterable[SignalToken[Any]]) -> None:
        """Make more tokens deliverable by name."""


AppT = TypeVar("AppT", bound=AppLike)


def setup_app(app: AppT) -> AppT:
    """Make an app ready for workflow tools: webhook requests deliverable, background kinds
    known (through ``app.agent`` or ``app.tools``)."""
    app.add_signals([WEBHOOK])
    if app.agent is not None:
        install(app.agent)
    elif app.tools is not None:
        for kind in workflow_kinds(app.tools):
            if kind not in app.tasks:
                app.tasks.append(kind)
    return app


# --- the receipt's start -------------------------------------------------------------------


def call_input(api: ToolExecutionApi) -> dict[str, Any]:
    """The input of the tool task ``api`` runs in (its call id, its conversation)."""
    record = api._rt._h.task(api.task_id)
    return dict(record.input) if record is not None and isinstance(record.input, dict) else {}


def _starter(kind: TaskDefinition) -> BackgroundStarter:
    """The registry's ``background`` port: create the call's task of ``kind`` (once) with
    its index entry, and hand out the receipt."""

    async def start(name: str, args: BaseModel, api: ToolExecutionApi) -> ToolResult:
        if api.get_doc(ENDED_KEY) is not None:
            return ToolResult.error(ToolErrorCode.TOOL_ERROR, "the session has ended")
        call = call_input(api)
        spec = {
            "tool": name,
            "arguments": args.model_dump(mode="json"),
            "call_task": api.task_id,
            "call_id": call.get("call_id"),
            "conversation": call.get("conversation"),
        }

        def write(tx: Any) -> str:
            task_id: str = tx.create_task(
                kind, spec, key=f"background:{api.task_id}", owner=None, background=True
            )
            if tx.get_doc(index_key(task_id)) is None:
                info = _info(task_id, BackgroundInput.model_validate(spec), tx.now())
                tx.put_doc(index_key(task_id), info.model_dump(mode="json"))
            return task_id

        try:
            task_id = await api.write(write)
        except UnknownTaskKind as exc:
            return ToolResult.error(ToolErrorCode.TOOL_ERROR, f"{exc}: see bide.workflow.install")
        receipt = {"status": "working", "task_id": task_id}
        return ToolResult.of_text(json.dumps(receipt), details=receipt)

    return start


# --- the task kind -------------------------------------------------------------------------


def _background_task(kinds: _Kinds) -> TaskDefinition:
    async def start(task: TaskView, rt: Any) -> None:
        intent = {"phase": "execute", "wake": None, "checkpoint": None}
        await rt.commit(Running(checkpoint=intent))
        await _run(kinds, task, rt, wake=None, checkpoint=None)

    async def execute(task: TaskView, rt: Any) -> None:
        # Only recovery enters here: the run the intent records was cut off.
        tool = _tool(kinds, task)
        if tool is not None and tool.shape.suspend == "none" and tool.body_replay != "safe":
            error = f"the run of {tool.name!r} was cut off and may not be replayed"
            await _end(kinds, task, rt, "failed", error=error)
            return
        await _run(kinds, task, rt, wake=task.wake, checkpoint=task.checkpoint.get("checkpoint"))

    async def parked(task: TaskView, rt: Any) -> None:
        wake = task.wake.to_dict() if task.wake is not None else None
        saved = task.checkpoint.get("checkpoint")
        tool = _tool(kinds, task)
        if tool is None or tool.shape.suspend != "workflow":
            intent = {"phase": "execute", "wake": wake, "checkpoint": saved}
            await rt.commit(Running(checkpoint=intent))
        # A workflow body commits no intent: recovery reruns every cut-off run of it, and it
        # replays its history, so rerunning this phase with the wake the running state keeps
        # is that rerun (restarts still counted; docs/reliability.md, "A woken workflow body").
        await _run(kinds, task, rt, wake=task.wake, checkpoint=saved)

    async def abort(task: TaskView, rt: Any) -> None:
        await _aborted(kinds, task, rt)

    return define_task(
        BACKGROUND_TASK,
        1,
        lambda _input: {"phase": "start"},
        {"start": start, "execute": execute, "parked": parked},
        abort=abort,
        input_type=BackgroundInput,
    )


def _spec(task: TaskView) -> BackgroundInput:
    return BackgroundInput.model_validate(task.input)


def _tool(kinds: _Kinds, task: TaskView) -> WorkflowTool | None:
    tool = kinds.registry.get(_spec(task).tool)
    if isinstance(tool, WorkflowTool) and tool.shape.lifetime == "task" and tool.body:
        return tool
    return None


def _host(kinds: _Kinds, task: TaskView, rt: Runtime, tool: WorkflowTool, **kw: Any) -> RunHost:
    spec = _spec(task)

    def messages(tx: Any, text: str, delivery: str) -> None:
        info = tx.get_doc(index_key(task.id))
        if info is not None:
            tx.put_doc(index_key(task.id), {**info, "messages": info.get("messages", 0) + 1})
        _submit(kinds, tx, spec, task.id, f"{_label(task.id, spec)} {text}", delivery)

    return RunHost(
        rt,
        tool.name,
        spec.call_id,
        aborted=kw.get("aborted", rt.abort_event),
        agents=tool.agents,
        messages=messages,
    )


def _label(task_id: str, spec: BackgroundInput) -> str:
    return f"[background task {task_id} ({spec.tool})]"


def _submit(
    kinds: _Kinds, tx: Any, spec: BackgroundInput, task_id: str, text: str, delivery: str
) -> None:
    """Wake the parent conversation with ``text`` (a follow-up while it is busy)."""
    from ..agent.agent import submit_in
    from ..agent.conversation import head_key

    if kinds.agent is None or spec.conversation is None:
        return
    if tx.get_doc(head_key(spec.conversation)) is None:
        return
    submit_in(
        kinds.agent,
        tx,
        spec.conversation,
        text,
        request_id=f"task:{task_id}:{delivery}",
        source=f"task:{task_id}",
    )


async def _run(kinds: _Kinds, task: TaskView, rt: Runtime, *, wake: Any, checkpoint: Any) -> None:
    tool = _tool(kinds, task)
    if tool is None:
        error = f"tool {_spec(task).tool!r} is not available as a background tool"
        await _end(kinds, task, rt, "failed", error=error)
        return
    assert tool.body is not None
    try:
        args = tool.parse(_spec(task).arguments)
    except ValueError as exc:  # the tool's parameters changed since the call was admitted
        await _end(kinds, task, rt, "failed", error=str(exc))
        return
    host = _host(kinds, task, rt, tool)
    if tool.shape.suspend == "workflow":
        outcome = await run_body(host, tool.body, args, with_task=True)
        refused: Sleep | Wait | None = None
        while isinstance(outcome, Parked) and outcome.park != refused:
            if await _park(kinds, task, rt, outcome.park, final=False):
                return
            # A wait leaves the key it parks on unread (the park requires its document
            # absent): refused because it is there, the body runs again knowing it. An
            # identical park again learnt nothing: its refusal is final.
            refused = outcome.park
            outcome = await run_body(host, tool.body, args, with_task=True)
        if isinstance(outcome, Parked):
            await _park(kinds, task, rt, outcome.park)
        elif isinstance(outcome, Finished):
            await _end(kinds, task, rt, "completed", result=_payload(outcome.value))
        elif isinstance(outcome, Errored):
            await _end(kinds, task, rt, "failed", error=outcome.error, why=outcome.nondeterminism)
        return
    api = ToolExecutionApi(rt, kinds.registry, wake=wake, checkpoint=checkpoint)
    try:
        returned = await tool.body(args, api, BackgroundTask(rt, host))
    except InvocationEnded:
        raise
    except Exception as exc:
        await _end(kinds, task, rt, "failed", error=f"{type(exc).__name__}: {exc}")
        return
    if isinstance(returned, Sleep | Wait):
        await _park(kinds, task, rt, returned)
    elif isinstance(returned, ToolResult) and returned.is_error:
        await _end(kinds, task, rt, "failed", error=returned.text)
    else:
        await _end(kinds, task, rt, "completed", result=_payload(returned))


async def _park(
    kinds: _Kinds, task: TaskView, rt: Runtime, park: Sleep | Wait, *, final: bool = True
) -> bool:
    """Commit the park; when refused as invalid, end the task failed (``final``) or, not
    ``final``, leave it as it was. Whether the park was committed."""
    checkpoint = {"phase": "parked", "checkpoint": park.checkpoint}
    try:
        await rt.commit(park_state(park, checkpoint))
    except (InvalidPark, ValidationError) as exc:
        if not final and isinstance(exc, InvalidPark):
            return False
        await _end(kinds, task, rt, "failed", error=f"invalid park: {exc}")
    return True


def _payload(value: Any) -> Any:
    if isinstance(value, ToolResult):
        return value.text
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


async def _end(
    kinds: _Kinds,
    task: TaskView,
    rt: Runtime,
    status: TaskStatus,
    *,
    result: Any = None,
    error: str | None = None,
    why: dict[str, Any] | None = None,
) -> None:
    """One commit: the task's end, its index entry, its requests withdrawn and (for a
    completion or a failure) the parent's notification. ``why``: the non-determinism that
    failed it (kept in the index entry and the outcome, for an operator)."""
    spec = _spec(task)
    requests = open_requests(rt)
    # The index entry and the parent's message: never a registered token (tools.redaction).
    result, error = scrub_value(result), None if error is None else scrub(error)
    outcome: Outcome
    text = ""
    if status == "completed":
        outcome = Completed(result=result)
        text = f"{_label(task.id, spec)} finished: {describe(result)}"
    elif status == "failed":
        outcome = Failed(error=error)
        text = f"{_label(task.id, spec)} failed: {error}"
    else:
        outcome = Aborted(reason=task.abort_reason)

    def build(tx: Any) -> Terminal:
        withdraw(tx, requests, "ended" if status == "working" else status)
        info = tx.get_doc(index_key(task.id)) or _info(task.id, spec, tx.now()).model_dump()
        ended = {"status": status, "ended_at": tx.now(), "result": result, "error": error}
        if why is not None:
            ended["nondeterminism"] = why
        tx.put_doc(index_key(task.id), {**info, **ended})
        if status != "cancelled":
            _submit(kinds, tx, spec, task.id, text, "end")
        return Terminal(outcome=outcome)

    await rt.commit(build)


def _info(task_id: str, spec: BackgroundInput, now: float) -> BackgroundTaskInfo:
    return BackgroundTaskInfo(
        id=task_id,
        tool=spec.tool,
        arguments=spec.arguments,
        call_task=spec.call_task,
        call_id=spec.call_id,
        conversation=spec.conversation,
        created_at=now,
    )


async def _aborted(kinds: _Kinds, task: TaskView, rt: Runtime) -> None:
    tool = _tool(kinds, task)
    phase = task.checkpoint["phase"]
    try:
        args = None if tool is None else tool.parse(_spec(task).arguments)
    except ValueError:
        args = None  # arguments the tool no longer accepts: nothing can be cleaned up
    if tool is not None and tool.body is not None and args is not None and phase != "start":
        # Cleanup gets an abort event that never fires: the abort must not cut it short.
        host = _host(kinds, task, rt, tool, aborted=asyncio.Event())
        if tool.shape.suspend == "workflow":
            cleanup = run_body(host, tool.body, args, with_task=True, cancelling=True)
            try:
                await asyncio.wait_for(cleanup, tool.grace)
            except TimeoutError:
                await rt.memo("bide.cancel-timeout", f"cleanup exceeded {tool.grace}s")
        elif tool.body_cancel is not None and (
            phase == "parked" or task.checkpoint.get("wake") is not None
        ):
            saved = task.checkpoint.get("checkpoint")
            api = ToolExecutionApi(
                rt, kinds.registry, wake=None, checkpoint=saved, abort_event=asyncio.Event()
            )
            try:
                await tool.body_cancel(args, api)
            except Exception as exc:  # a failing cleanup must not keep the task alive
                await rt.memo("bide.cancel-error", f"{type(exc).__name__}: {exc}")
    await _end(kinds, task, rt, "cancelled", error=task.abort_reason)


class BackgroundTask:
    """The ``task`` argument of an ordinary background ``execute(args, api, task)``."""

    def __init__(self, rt: Runtime, host: RunHost) -> None:
        self._rt = rt
        self._host = host

    @property
    def task_id(self) -> str:
        """The background task's id."""
        return self._rt.task_id

    async def post_message(self, text: str) -> None:
        """Wake the parent conversation with ``text``. Without a replayed history a rerun
        after a crash may send a message again (at least once, in order)."""
        index = 0
        while await self._rt.memo(f"bide.message.{index}") is not None:
            index += 1

        def write(tx: Any) -> None:
            tx.memo(f"bide.message.{index}", text)
            self._host.post_message(tx, text, f"p{index}")

        await self._rt.write(write)
