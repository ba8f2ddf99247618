"""Generation hooks: ``on_yield``, ``after_tools`` and ``after_run`` (design 001 ch. IX), and
``compact`` (:mod:`.compaction`: what the model reads of a long conversation).

These hooks never park the generation. A hook that needs to wait returns tasks
(:func:`hook_task`) and the generation waits for them as its children.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.tasks import TaskDefinition

if TYPE_CHECKING:
    from .compaction import Compaction


@dataclass(frozen=True)
class HookTask:
    """A task a hook asks the generation to start and wait for."""

    task: TaskDefinition
    input: Any = None


def hook_task(task: TaskDefinition, input: Any = None) -> HookTask:
    """Build a :class:`HookTask` (the task kind must be registered with the harness)."""
    return HookTask(task, input)


@dataclass(frozen=True)
class StartTasks:
    """A hook's answer: start these tasks; the generation waits for all of them."""

    tasks: Sequence[HookTask]


@dataclass(frozen=True)
class Continue:
    """An ``on_yield`` answer: send the agent back to work with this input."""

    input: str


Entry = dict[str, Any]
OnYield = Callable[[Entry, Any], Awaitable[Continue | StartTasks | None]]
AfterTools = Callable[[Entry, list[Entry], Any], Awaitable[StartTasks | None]]
AfterRun = Callable[[Entry, Any], Awaitable[StartTasks | None]]


@dataclass(frozen=True)
class GenerationHooks:
    """Hooks of one extension on the generation. ``on_yield`` may return tasks whose first
    ``{"continue": input}`` result (in creation order) sends the agent back to work;
    ``after_tools`` tasks may complete with ``{"terminate": True}`` to end the run with the
    tool-calling answer, or submit a steer; ``after_run`` tasks act on an answer that stands.
    ``compact``: before each model request, fold old turns into a summary once the model
    would read more than its threshold of entries (the first hook with one is used)."""

    name: str
    on_yield: OnYield | None = None
    after_tools: AfterTools | None = None
    after_run: AfterRun | None = None
    compact: Compaction | None = None
