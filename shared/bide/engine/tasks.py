"""Task kinds: a name, a version, an initial checkpoint, named phases and an abort handler.

A phase is ``async def phase(task: TaskView, rt: TaskRuntime) -> None`` and ends by
committing a new state (``await rt.commit(...)``). The checkpoint names the phase that runs
next. A phase that returns without changing its checkpoint made no durable progress and the
task is faulted; so is a phase that raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from .errors import DefinitionError
from .signals import SignalResult, SignalState, SignalToken
from .state import Checkpoint, Outcome, TaskState, WakeReason
from .values import FrozenValue, value_class

T = TypeVar("T")

_set = object.__setattr__  # a frozen value's fields, at build

StateOrBuilder = TaskState | Callable[["Tx"], TaskState | None]


@value_class
class TaskView(FrozenValue):
    """What a phase sees of its task (a snapshot taken when the phase started)."""

    __slots__ = (
        "abort_reason",
        "checkpoint",
        "created_at",
        "id",
        "input",
        "kind",
        "owner",
        "session_id",
        "wake",
    )
    id: str
    session_id: str
    kind: str
    input: Any
    checkpoint: Checkpoint
    wake: WakeReason | None
    owner: str | None
    abort_reason: str | None
    created_at: float

    def __init__(
        self,
        id: str,
        session_id: str,
        kind: str,
        input: Any,
        checkpoint: Checkpoint,
        wake: WakeReason | None,
        owner: str | None,
        abort_reason: str | None = None,
        created_at: float = 0.0,
    ) -> None:
        _set(self, "id", id)
        _set(self, "session_id", session_id)
        _set(self, "kind", kind)
        _set(self, "input", input)
        _set(self, "checkpoint", checkpoint)
        _set(self, "wake", wake)
        _set(self, "owner", owner)
        _set(self, "abort_reason", abort_reason)
        _set(self, "created_at", created_at)


class Tx(Protocol):
    """Writes that become part of one commit, atomically with the task's new state.

    The builder passed to :meth:`TaskRuntime.commit` may run more than once (after a
    conflict it is evaluated again against fresh data): keep it free of side effects.
    """

    def create_task(
        self,
        kind: TaskDefinition,
        input: Any = None,
        *,
        key: str | None = None,
        background: bool = False,
    ) -> str:
        """Create a task owned by the committing task; a used ``key`` returns the same task."""
        ...

    def signal(self, task_id: str, token: SignalToken[Any], key: str, value: Any) -> SignalResult:
        """Deliver a signal to another task of this session, in this commit."""
        ...

    def memo(self, name: str, value: Any) -> Any:
        """First-writer-wins memo written with this commit; returns the winner."""
        ...


class TaskRuntime(Protocol):
    """What a running phase may do. Everything durable goes through :meth:`commit`."""

    @property
    def task_id(self) -> str:
        """The running task's id."""
        ...

    @property
    def aborted(self) -> bool:
        """True once the task carries an abort mark (its next commit will be refused)."""
        ...

    def now(self) -> float:
        """The harness clock (seconds since the epoch)."""
        ...

    async def commit(self, state: StateOrBuilder) -> None:
        """Atomically write the task's new state with whatever the builder adds via ``tx``.
        A builder that returns None keeps the state (side writes only: child tasks, signals,
        memos); that alone is not durable progress."""
        ...

    async def memo(self, name: str, candidate: Any = ...) -> Any:
        """First-writer-wins: store ``candidate`` unless ``name`` holds a value; return the
        winner. Without a candidate, read the memo (None when unset). Durable at return."""
        ...

    async def read_signal(self, token: SignalToken[T], key: str) -> SignalState[T] | None:
        """The key's value (migrated to the token's version), a failure delivered instead
        (:class:`~bide.engine.failures.SignalFailed`), expired, or None while nothing
        came. Reads the task record in memory; costs no storage access."""
        ...

    async def outcome(self, task_id: str) -> Outcome | None:
        """Another task's outcome once it is terminal; None while it is live."""
        ...


Phase = Callable[[TaskView, TaskRuntime], Awaitable[None]]


@value_class
class TaskDefinition(FrozenValue):
    """A registered task kind. Build one with :func:`define_task`. Equal only to itself."""

    __slots__ = (
        "__weakref__",
        "_input_adapter",
        "abort",
        "initial",
        "input_type",
        "name",
        "phases",
        "rerun",
        "version",
    )
    name: str
    version: int
    initial: Callable[[Any], Checkpoint | str]
    phases: Mapping[str, Phase]
    abort: Phase | None
    input_type: Any
    rerun: Callable[[Any, bool], bool] | None
    # A pydantic TypeAdapter, typed Any: pydantic is imported with the first input_type only,
    # and a class's annotations must resolve without it (typing.get_type_hints).
    _input_adapter: Any

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(
        self,
        name: str,
        version: int,
        initial: Callable[[Any], Checkpoint | str],
        phases: Mapping[str, Phase],
        abort: Phase | None = None,
        input_type: Any = None,
        rerun: Callable[[Any, bool], bool] | None = None,
        _input_adapter: Any = None,
    ) -> None:
        _set(self, "name", name)
        _set(self, "version", version)
        _set(self, "initial", initial)
        _set(self, "phases", phases)
        _set(self, "abort", abort)
        _set(self, "input_type", input_type)
        _set(self, "rerun", rerun)
        _set(self, "_input_adapter", _input_adapter)

    def __repr__(self) -> str:  # the adapter left out, as its dataclass field was
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names[:-1])
        return f"TaskDefinition({shown})"

    def validate_input(self, value: Any) -> Any:
        """Validate the task's input (when the kind declared ``input_type``) into JSON form."""
        if self._input_adapter is None:
            return value
        from pydantic import ValidationError  # with the first input_type (kinds with one only)

        try:
            parsed = self._input_adapter.validate_python(value)
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise DefinitionError(f"task {self.name!r}: invalid input ({detail})") from None
        return self._input_adapter.dump_python(parsed, mode="json")


def define_task(
    name: str,
    version: int,
    initial: Callable[[Any], Checkpoint | str],
    phases: Mapping[str, Phase],
    abort: Phase | None = None,
    *,
    input_type: Any = None,
    rerun: Callable[[Any, bool], bool] | None = None,
) -> TaskDefinition:
    """Define a task kind.

    ``initial(input)`` returns the first checkpoint (a phase name or a dict with ``phase``).
    ``abort`` runs once after an abort mark, when owned work has ended, and must commit a
    terminal state; without one, an aborted task ends ``aborted`` directly.
    ``input_type`` (optional) is validated with pydantic when the task is created.
    ``rerun(record, first_pass)`` (optional) lets a parked task run again before its wake
    condition: the tool task uses it to rerun gates after a registry change and on the first
    pass after ``open()``. The rerun carries no wake reason.
    """
    if not isinstance(name, str) or not name:
        raise DefinitionError("a task kind needs a non-empty name")
    if not isinstance(version, int) or version < 1:
        raise DefinitionError(f"task {name!r}: version must be an integer >= 1")
    if not phases:
        raise DefinitionError(f"task {name!r}: at least one phase is needed")
    adapter = None
    if input_type is not None:
        # Imported here: the engine is on every Lambda function's import path, and pydantic's
        # import is a large part of a cold start (docs/performance.md, section d).
        from pydantic import TypeAdapter

        adapter = TypeAdapter(input_type)
    return TaskDefinition(name, version, initial, dict(phases), abort, input_type, rerun, adapter)
