"""The definition a workflow or background tool compiles to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..tools.define import Cancel, Replay, ToolDefinition


@dataclass(frozen=True, eq=False)
class WorkflowTool(ToolDefinition):
    """A :class:`~bide.tools.ToolDefinition` whose authored code is not its ``execute``:
    ``execute`` is the adapter its shape calls for (a replay of ``body`` for a waiting
    workflow tool, the receipt for a background one), and ``body`` is what the author wrote.
    ``body_replay`` and ``body_cancel`` are the author's policy and cleanup for a background
    body of shape ``task``/``none``; ``agents`` names the subagents ``ctx.agent`` may call;
    ``grace`` bounds how long a cancelled body may take to unwind (seconds)."""

    body: Callable[..., Any] | None = None
    body_replay: Replay = "safe"
    body_cancel: Cancel | None = None
    agents: Mapping[str, Any] = field(default_factory=dict)
    grace: float = 30.0
