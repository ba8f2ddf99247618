"""An App: everything a deployment runs, named once and loaded by every function.

Lambda functions and the local stack find the app through ``BIDE_APP`` (``module:attribute``),
so a user's CDK app points the same handlers at their own tools module.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .engine.errors import DefinitionError
from .engine.signals import SignalToken
from .engine.tasks import TaskDefinition
from .tools.registry import ToolRegistry


@dataclass
class App:
    """Task kinds, deliverable signal tokens and the tool registry of one deployment."""

    tasks: list[TaskDefinition] = field(default_factory=list)
    signals: list[SignalToken[Any]] = field(default_factory=list)
    tools: ToolRegistry | None = None
    agent: Any = None  # a bide.agent.Agent: the agent of every session's main conversation
    extras: dict[str, Any] = field(default_factory=dict)

    def task_kinds(self) -> list[TaskDefinition]:
        """Every kind a worker must be able to run (the tool task included)."""
        kinds = list(self.tasks)
        extra = [] if self.agent is None else self.agent.task_kinds()
        if self.tools is not None:
            extra.append(self.tools.task)
        for kind in extra:
            if kind not in kinds:
                kinds.append(kind)
        return kinds

    def signal_token(self, name: str) -> SignalToken[Any]:
        """The token deliverable under ``name``; raises :class:`DefinitionError` if none."""
        from .agent.conversation import SUBMISSION_SETTLED

        for token in [*self.signals, SUBMISSION_SETTLED]:
            if token.name == name:
                return token
        raise DefinitionError(f"no signal named {name!r} is deliverable in this app")

    def add_signals(self, tokens: Iterable[SignalToken[Any]]) -> None:
        """Make more tokens deliverable by name."""
        for token in tokens:
            if all(t.name != token.name for t in self.signals):
                self.signals.append(token)


def load_app(spec: str) -> App:
    """Import ``module:attribute`` and return the App it names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DefinitionError(f"BIDE_APP must look like 'package.module:app', not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DefinitionError(f"cannot import app module {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if callable(app) and not isinstance(app, App):
        app = app()
    if not isinstance(app, App):
        raise DefinitionError(f"{spec!r} is not a bide.App (got {type(app).__name__})")
    from .workflow import setup_app  # workflow tools build on the app; import when loading

    return setup_app(app)
