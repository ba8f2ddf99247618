"""Tool definitions: ``define_tool`` and ``wrap_tool``, a tool's :class:`ToolShape`, and
:class:`WorkflowTool`, the definition of a tool whose authored body is not its ``execute``.

Every tool carries its shape as data, computed once when it is defined (design 000 §2, §5):
``lifetime`` says whether the call ends with its step (``"step"``) or hands the model a
receipt and outlives it as a session-owned task (``"task"``); ``suspend`` says whether the
body parks by returning :class:`Sleep`/:class:`Wait` itself (``"none"``) or is a replayed
workflow body that awaits durable operations (``"workflow"``, see :mod:`bide.workflow`).
Consumers switch on the shape instead of re-deriving it; the ``task`` argument exists if and
only if the lifetime is ``"task"``.

Every cell's definition is data defined here; what runs the cells other than ``step``/``none``
(replaying a workflow body, the background task kind) is :mod:`bide.workflow`, above this
layer. A background tool's receipt reaches it through the registry's ``background`` port,
which :func:`bide.workflow.install` fills.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from ..engine.errors import DefinitionError
from .results import Park, Sleep, ToolErrorCode, ToolResult, Wait

if TYPE_CHECKING:
    from .api import ToolExecutionApi

Replay = Literal["safe", "unsafe"]
Lifetime = Literal["step", "task"]
Suspend = Literal["none", "workflow"]
Concurrency = Literal["parallel_safe", "exclusive"]
ExecuteResult = ToolResult | Sleep | Wait | str
Execute = Callable[[Any, "ToolExecutionApi"], Awaitable[ExecuteResult]]
Cancel = Callable[[Any, "ToolExecutionApi"], Awaitable[None]]
Wrapper = Callable[[Any, "ToolExecutionApi", Execute], Awaitable[ExecuteResult]]


class ToolArgumentsError(ValueError):
    """Arguments failed the tool's parameters; ``errors`` lists each field and why."""

    def __init__(self, tool: str, error: ValidationError) -> None:
        self.errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "(arguments)", "message": e["msg"]}
            for e in error.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in self.errors)
        super().__init__(f"invalid arguments for tool {tool!r}: {detail}")


@dataclass(frozen=True)
class ToolShape:
    """The cell a tool lives in: ``lifetime`` (``"step"``: the call ends with its result;
    ``"task"``: the model gets ``{"status": "working", "task_id": ...}`` at once and the body
    runs on as a background task) and ``suspend`` (``"none"``: an ordinary ``execute`` that
    may park by returning a park; ``"workflow"``: a body replayed from its recorded history)."""

    lifetime: Lifetime = "step"
    suspend: Suspend = "none"

    def as_json(self) -> dict[str, str]:
        """The shape as the manifest shows it."""
        return {"lifetime": self.lifetime, "suspend": self.suspend}


@dataclass(frozen=True, eq=False)
class ToolDefinition:
    """A tool: its name and description, a pydantic model of its parameters (whose JSON
    schema the model sees), ``execute``, its replay policy and an optional ``cancel``."""

    name: str
    description: str
    parameters: type[BaseModel]
    execute: Execute
    replay: Replay = "unsafe"
    cancel: Cancel | None = None
    _wrapped_parks: bool = field(default=False, repr=False)
    concurrency: Concurrency = "exclusive"
    shape: ToolShape = field(default_factory=ToolShape)

    def json_schema(self) -> dict[str, Any]:
        """The parameters' JSON schema, as a model provider needs it."""
        return self.parameters.model_json_schema()

    def parse(self, arguments: Any) -> BaseModel:
        """Validate arguments; raises :class:`ToolArgumentsError` saying which field failed."""
        try:
            return self.parameters.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(self.name, exc) from None

    def dump(self, parsed: BaseModel) -> dict[str, Any]:
        """The JSON form of validated arguments, as stored with the call's intent."""
        return parsed.model_dump(mode="json")


@dataclass(frozen=True, eq=False)
class WorkflowTool(ToolDefinition):
    """A :class:`ToolDefinition` whose authored code is not its ``execute``: ``execute`` is
    the adapter its shape calls for (a replay of ``body`` for a waiting workflow tool, the
    receipt for a background one), and ``body`` is what the author wrote. ``body_replay`` and
    ``body_cancel`` are the author's policy and cleanup for a background body of shape
    ``task``/``none``; ``agents`` names the subagents ``ctx.agent`` may call; ``grace``
    bounds how long a cancelled body may take to unwind (seconds)."""

    body: Callable[..., Any] | None = None
    body_replay: Replay = "safe"
    body_cancel: Cancel | None = None
    agents: Mapping[str, Any] = field(default_factory=dict)
    grace: float = 30.0


# The feature object that made a tool (a Delegation, a BindingSet), which an app asks for
# what the tool needs to run (task kinds, its agent). Weak: a dropped tool drops its entry.
_OWNERS: weakref.WeakKeyDictionary[ToolDefinition, object] = weakref.WeakKeyDictionary()


def claim_tools(owner: object, tools: Iterable[ToolDefinition]) -> None:
    """Record ``owner`` as the maker of ``tools``, so :func:`tool_owners` finds it."""
    for tool in tools:
        _OWNERS[tool] = owner


def tool_owners(tools: Iterable[ToolDefinition]) -> list[object]:
    """The objects that claimed any of ``tools`` (:func:`claim_tools`), each once."""
    found: list[object] = []
    for tool in tools:
        owner = _OWNERS.get(tool)
        if owner is not None and not any(owner is seen for seen in found):
            found.append(owner)
    return found


def define_tool(
    name: str,
    description: str,
    parameters: type[BaseModel],
    execute: Execute,
    *,
    replay: Replay = "unsafe",
    cancel: Cancel | None = None,
    concurrency: Concurrency = "exclusive",
    lifetime: Lifetime = "step",
) -> ToolDefinition:
    """Define a tool. ``execute(args, api)`` returns a :class:`ToolResult` (or text), or parks
    by returning :class:`Sleep` / :class:`Wait`; it runs again with ``api.wake`` set when the
    park ends. ``replay="safe"`` lets recovery rerun a cut-off run (default ``"unsafe"``: the
    call ends ``interrupted``). ``cancel(args, api)`` cleans up external work of a call that
    parked; it must be safe to run twice. ``concurrency="parallel_safe"`` lets consecutive
    calls of such tools in one model answer run together (at most 8 in flight); an
    ``"exclusive"`` call (the default) runs alone, in order.

    ``lifetime="task"`` makes a background tool: ``execute(args, api, task)`` runs as a
    session-owned task after the model got its receipt (see
    :func:`define_background_tool`)."""
    if lifetime == "task":
        return define_background_tool(
            name,
            description,
            parameters,
            execute,
            replay=replay,
            cancel=cancel,
            concurrency=concurrency,
        )
    if lifetime != "step":
        raise DefinitionError(f"tool {name!r}: lifetime must be 'step' or 'task'")
    _check(name, parameters, replay, concurrency)
    return ToolDefinition(
        name, description, parameters, execute, replay, cancel, concurrency=concurrency
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
    completion notification. ``replay`` and ``cancel`` mean what they mean for a tool. The
    session runs it once :func:`bide.workflow.install` (or ``setup_app``) knows the registry."""
    shape = body_shape(name, "task", "none", execute)
    _check(name, parameters, replay, concurrency)
    return WorkflowTool(
        name,
        description,
        parameters,
        background_receipt(name),
        "safe",  # the receipt finds its task by key: rerunning it is harmless
        None,
        concurrency=concurrency,
        shape=shape,
        body=execute,
        body_replay=replay,
        body_cancel=cancel,
    )


def body_shape(name: str, lifetime: str, suspend: str, fn: Callable[..., Any]) -> ToolShape:
    """The shape of a tool whose body is ``fn``, checked: ``fn`` takes ``(args, api|ctx)``,
    plus ``task`` if and only if the lifetime is ``"task"``. Raises
    :class:`~bide.DefinitionError` saying what it should take."""
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


def background_receipt(name: str) -> Execute:
    """``execute`` of a background tool: the registry's ``background`` port creates the
    call's task (once) and returns the receipt the model gets."""

    async def execute(args: Any, api: ToolExecutionApi) -> ExecuteResult:
        start = api._registry.background
        if start is None:
            return ToolResult.error(
                ToolErrorCode.TOOL_ERROR,
                f"background tool {name!r} needs bide.workflow.install(agent) (or the kinds "
                "of bide.workflow.workflow_kinds(registry) in the harness); a bide.app.App "
                "does this itself",
            )
        return await start(name, args, api)

    return execute


def _check(name: str, parameters: type[BaseModel], replay: str, concurrency: str) -> None:
    """The checks every tool definition passes: a name, a parameters model, its policies."""
    if not name or not isinstance(name, str):
        raise DefinitionError("a tool needs a non-empty name")
    if not (isinstance(parameters, type) and issubclass(parameters, BaseModel)):
        raise DefinitionError(f"tool {name!r}: parameters must be a pydantic model class")
    if replay not in ("safe", "unsafe"):
        raise DefinitionError(f"tool {name!r}: replay must be 'safe' or 'unsafe'")
    if concurrency not in ("parallel_safe", "exclusive"):
        raise DefinitionError(f"tool {name!r}: concurrency must be 'parallel_safe' or 'exclusive'")


def wrap_tool(tool: ToolDefinition, wrapper: Wrapper, *, name: str | None = None) -> ToolDefinition:
    """Decorate how a tool runs (a prefix, a timeout...). ``wrapper(args, api, base)`` calls
    ``base(args, api)``. Wrappers never park: a park the wrapper returns that its base did not
    return becomes an ``invalid_park`` error result."""

    async def execute(args: Any, api: ToolExecutionApi) -> ExecuteResult:
        parks: list[Park] = []

        async def base(a: Any, base_api: ToolExecutionApi) -> ExecuteResult:
            result = await tool.execute(a, base_api)
            if isinstance(result, Sleep | Wait):
                parks.append(result)
            return result

        result = await wrapper(args, api, base)
        if isinstance(result, Sleep | Wait) and not any(result is p for p in parks):
            return ToolResult.error(
                ToolErrorCode.INVALID_PARK,
                f"a wrapper of tool {tool.name!r} returned a park its base did not return; "
                "wrappers never park",
            )
        return result

    # replace() keeps everything else, the shape (and a subclass's fields) included.
    wrapped = replace(tool, name=name or tool.name, execute=execute, _wrapped_parks=True)
    owner = _OWNERS.get(tool)
    if owner is not None:  # a wrapped tool needs what its base needs
        claim_tools(owner, [wrapped])
    return wrapped
