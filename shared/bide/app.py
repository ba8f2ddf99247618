"""An App: everything a deployment runs, named once and loaded by every function.

Lambda functions and the local stack find the app through ``BIDE_APP`` (``module:attribute``),
so a user's CDK app points the same handlers at their own tools module.

An App wires the features its tools build on when it is created (:meth:`App.wire`), so
``App(tools=registry, agent=agent)`` is enough: workflow tools (background task kind, webhook
requests deliverable), ``task_cancel`` beside background tools, the promise keeper, and the
delegations and binding sets whose tools are in the registry (their task kinds, their agent).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .bindings import BindingSet
from .delegation import Delegation
from .engine.errors import DefinitionError
from .engine.signals import SignalToken
from .engine.tasks import TaskDefinition
from .promises import promise_task_kinds
from .tools.define import tool_owners
from .tools.registry import ToolRegistry
from .workflow import setup_app, task_cancel_tool


@dataclass
class App:
    """Task kinds, deliverable signal tokens and the tool registry of one deployment.

    Created with ``wire_features=True`` (the default) it calls :meth:`wire` at once; with
    ``wire_features=False`` it takes ``tasks``, ``signals`` and ``tools`` exactly as given."""

    tasks: list[TaskDefinition] = field(default_factory=list)
    signals: list[SignalToken[Any]] = field(default_factory=list)
    tools: ToolRegistry | None = None
    agent: Any = None  # a bide.agent.Agent: the agent of every session's main conversation
    extras: dict[str, Any] = field(default_factory=dict)
    wire_features: bool = True

    def __post_init__(self) -> None:
        # Own copies: wiring appends, and a caller's list may be shared with other apps.
        self.tasks = list(self.tasks)
        self.signals = list(self.signals)
        if self.wire_features:
            self.wire()

    def wire(self) -> App:
        """Set up what the app's tools build on, so no harness needs it by hand. Idempotent:
        explicit ``bide.workflow.install``/``setup_app``, ``Delegation.bind`` and listed task
        kinds stay as they were. Call it again after adding tools to a registry later.

        * workflow tools: :func:`bide.workflow.setup_app` (background task kind, webhook
          requests deliverable by name);
        * task cancellation: a registry with a background (``lifetime="task"``) tool gets
          :func:`bide.workflow.task_cancel_tool` unless it has one (or a tool of that name);
        * promises: the deadline keeper's task kind;
        * delegation: each :class:`~bide.delegation.Delegation` whose tools are registered
          is bound to ``agent`` (unless bound already) and its task kinds listed;
        * bindings: each :class:`~bide.bindings.BindingSet` whose tools are registered has
          its task kinds listed.
        """
        for registry in self._registries():
            lifetimes = {tool.shape.lifetime for tool in registry.tools}
            owners = tool_owners(registry.tools)
            has_cancel = task_cancel_tool in owners or registry.get("task_cancel") is not None
            if "task" in lifetimes and not has_cancel:
                registry.add(task_cancel_tool())
            for owner in owners:
                if isinstance(owner, Delegation):
                    if not owner.bound and self.agent is not None:
                        owner.bind(self.agent)
                    self._add_tasks(owner.task_kinds())
                elif isinstance(owner, BindingSet):
                    self._add_tasks(owner.task_kinds())
        self._add_tasks(promise_task_kinds())
        setup_app(self)
        return self

    def _registries(self) -> list[ToolRegistry]:
        found = [self.tools, None if self.agent is None else self.agent.tools]
        return [r for i, r in enumerate(found) if r is not None and r not in found[:i]]

    def _add_tasks(self, kinds: Iterable[TaskDefinition]) -> None:
        for kind in kinds:
            if kind not in self.tasks:
                self.tasks.append(kind)

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
    return setup_app(app)  # an app built with wire_features=False still runs workflow tools
