"""The tool registry: tools and extensions a harness's tool tasks resolve against, and the
ports higher layers fill: the transcript a call made in a conversation writes its result
entry to (the agent's), and the starter of background tools' tasks (the workflow's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.errors import DefinitionError
from .define import ToolDefinition
from .hooks import Extension

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..engine.host import WriteTx
    from ..engine.tasks import TaskDefinition
    from .api import ToolExecutionApi
    from .results import ToolResult


class TranscriptWriter(Protocol):
    """Appends ``entry`` to the transcript of conversation ``cid`` inside the commit ``tx``
    and returns its index. Conversations belong to the agent layer, above this one, so the
    agent provides it (:attr:`ToolRegistry.transcript`)."""

    def __call__(self, tx: WriteTx, cid: str, entry: dict[str, Any], /) -> int:
        """Append the entry; its index (1-based)."""
        ...


class BackgroundStarter(Protocol):
    """Starts the background task of a call of the ``lifetime="task"`` tool named ``tool``
    (once per call) and returns the receipt the model gets. The background task kind belongs
    to :mod:`bide.workflow`, above this layer, which provides it
    (:attr:`ToolRegistry.background`, filled by :func:`bide.workflow.workflow_kinds`)."""

    async def __call__(self, tool: str, args: BaseModel, api: ToolExecutionApi, /) -> ToolResult:
        """Create the task (or find it) and return the receipt."""
        ...


class ToolRegistry:
    """Named tools plus extensions in order. ``version`` counts changes: a change wakes
    every call parked at its gates, so the gates installed now decide.

    Two ports are filled by the layers that own what they reach: ``transcript``, through
    which a call made in a conversation writes its result entry (an
    :class:`~bide.agent.Agent` installs it when it takes the registry), and ``background``,
    which starts a background tool's task (:func:`bide.workflow.install` installs it)."""

    def __init__(
        self, tools: Iterable[ToolDefinition] = (), extensions: Iterable[Extension] = ()
    ) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self._extensions: list[Extension] = []
        self.version = 0
        for tool in tools:
            self.add(tool)
        for extension in extensions:
            self.add_extension(extension)
        self.version = 0
        self.transcript: TranscriptWriter | None = None
        self.background: BackgroundStarter | None = None
        from .task import tool_task  # the task kind needs the registry; built once

        self.task: TaskDefinition = tool_task(self)

    def add(self, tool: ToolDefinition) -> None:
        """Publish a tool (replacing one of the same name)."""
        self._tools[tool.name] = tool
        self.version += 1

    def remove(self, name: str) -> None:
        """Withdraw a tool; calls parked on it settle ``tool_unavailable`` when they wake."""
        if self._tools.pop(name, None) is None:
            raise DefinitionError(f"no tool named {name!r}")
        self.version += 1

    def add_extension(self, extension: Extension) -> None:
        """Append an extension; its hooks run after those already present."""
        if any(e.name == extension.name for e in self._extensions):
            raise DefinitionError(f"extension {extension.name!r} is already installed")
        self._extensions.append(extension)
        self.version += 1

    def remove_extension(self, name: str) -> None:
        """Remove an extension by name."""
        before = len(self._extensions)
        self._extensions = [e for e in self._extensions if e.name != name]
        if len(self._extensions) == before:
            raise DefinitionError(f"no extension named {name!r}")
        self.version += 1

    def get(self, name: str) -> ToolDefinition | None:
        """The tool published under ``name``, if any."""
        return self._tools.get(name)

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """Extensions in order."""
        return tuple(self._extensions)

    @property
    def tools(self) -> tuple[ToolDefinition, ...]:
        """Published tools."""
        return tuple(self._tools.values())

    def manifest(self) -> list[dict[str, Any]]:
        """What a model is shown: each tool's name, description and parameters schema, with
        its replay policy and its shape (lifetime and suspend, computed at definition)."""
        return [
            {
                "name": t.name,
                "description": t.description,
                "parameters": t.json_schema(),
                "replay": t.replay,
                "shape": t.shape.as_json(),
            }
            for t in self._tools.values()
        ]

    @staticmethod
    def call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
        """The input of a tool task that calls ``name`` with ``arguments``."""
        return {"name": name, "arguments": arguments, "call_id": call_id}
