"""Tool admission (design 002): logical identities apart from what a model is shown.

An :class:`Operation` is what runs, named by a stable logical identity (``env.run_process``).
A :class:`Presentation` is how one model family sees it: exposed name, description,
parameters schema, an argument adapter and a result renderer. One operation may have several
presentations for a family (one exposed tool per variant). For each request the agent builds a
:class:`Catalog` for its effective model family: the advertised specs, and a request-local
reverse map from exposed name to (identity, variant). A name the catalog did not advertise
never reaches an operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from .engine.errors import DefinitionError
from .tools.define import ToolDefinition

ANY_FAMILY = "*"


def _same(arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments


def _plain(text: str, is_error: bool) -> str:
    return text


@dataclass(frozen=True)
class Presentation:
    """One way a model family sees an operation."""

    name: str
    description: str
    parameters: type[BaseModel] | dict[str, Any]
    families: frozenset[str] = frozenset({ANY_FAMILY})
    variant: str = "default"
    adapt_arguments: Callable[[dict[str, Any]], dict[str, Any]] = _same
    render_result: Callable[[str, bool], str] = _plain

    def schema(self) -> dict[str, Any]:
        """The JSON schema the model sees."""
        if isinstance(self.parameters, dict):
            return self.parameters
        return self.parameters.model_json_schema()


@dataclass(frozen=True)
class Operation:
    """An admitted operation: its logical identity, the tool that runs it (registered in the
    agent's ToolRegistry under the identity), and its presentations."""

    identity: str
    tool: ToolDefinition
    presentations: tuple[Presentation, ...] = ()

    def for_family(self, family: str) -> tuple[Presentation, ...]:
        """The presentations for ``family``: its own when it has some, else the generic ones."""
        own = tuple(p for p in self.presentations if family in p.families)
        return own or tuple(p for p in self.presentations if ANY_FAMILY in p.families)


class NotAdvertised(LookupError):
    """The model named a tool this request did not advertise."""


@dataclass(frozen=True)
class Resolved:
    """An exposed name resolved for one request."""

    identity: str
    variant: str
    presentation: Presentation
    operation: Operation


@dataclass
class Catalog:
    """What one request advertises, and how to route the answers back."""

    family: str
    specs: list[dict[str, Any]] = field(default_factory=list)
    reverse: dict[str, Resolved] = field(default_factory=dict)

    def resolve(self, exposed_name: str) -> Resolved:
        """(identity, variant) for an advertised name; :class:`NotAdvertised` otherwise."""
        found = self.reverse.get(exposed_name)
        if found is None:
            raise NotAdvertised(f"tool {exposed_name!r} was not offered in this request")
        return found


class Admission:
    """The registry of logical identities and their presentations."""

    def __init__(self, operations: Iterable[Operation] = ()) -> None:
        self._operations: dict[str, Operation] = {}
        for operation in operations:
            self.admit(operation)

    def admit(self, operation: Operation) -> None:
        """Admit an operation. Its tool must be named by the identity (that is what runs)."""
        if operation.tool.name != operation.identity:
            raise DefinitionError(
                f"operation {operation.identity!r}: its tool must be named {operation.identity!r}"
                f", not {operation.tool.name!r}"
            )
        if not operation.presentations:
            raise DefinitionError(f"operation {operation.identity!r} has no presentation")
        self._operations[operation.identity] = operation

    @property
    def operations(self) -> tuple[Operation, ...]:
        """Admitted operations."""
        return tuple(self._operations.values())

    def get(self, identity: str) -> Operation | None:
        """An operation by identity."""
        return self._operations.get(identity)

    def catalog(self, family: str) -> Catalog:
        """The catalog for one request to a model of ``family``. Exposed names must be
        unique: two operations showing the same name would make the answer ambiguous."""
        catalog = Catalog(family)
        for operation in self._operations.values():
            for presentation in operation.for_family(family):
                if presentation.name in catalog.reverse:
                    other = catalog.reverse[presentation.name].identity
                    raise DefinitionError(
                        f"exposed name {presentation.name!r} is used by {other!r} and "
                        f"{operation.identity!r} for family {family!r}; exposed names are unique"
                    )
                catalog.reverse[presentation.name] = Resolved(
                    operation.identity, presentation.variant, presentation, operation
                )
                catalog.specs.append(
                    {
                        "name": presentation.name,
                        "description": presentation.description,
                        "parameters": presentation.schema(),
                    }
                )
        return catalog

    def render(
        self,
        identity: str | None,
        variant: str | None,
        text: str,
        is_error: bool,
        *,
        family: str,
    ) -> str:
        """A result as the requesting model ``family`` is shown it: rendered by that family's
        presentation of the variant the call was made under. Variants are named per
        operation, not per family, so another family's presentation of the same variant is
        never used (its renderer was written for another model); without one of its own the
        family gets the plain text."""
        operation = self._operations.get(identity or "")
        if operation is None:
            return text
        for presentation in operation.for_family(family):
            if presentation.variant == variant:
                return presentation.render_result(text, is_error)
        return text
