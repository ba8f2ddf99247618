"""Trusted workflow-tool declarations and the rules that admit them.

A :class:`WorkflowBinding` names where a tool's invocations go (its destination) and what the
calling agent gets back (its completion). Both come from code the deployment trusts, never from
model arguments. Only combinations that give the caller a real delivery guarantee are admitted;
:func:`binding_violations` lists the rules a declaration breaks (a pure function) and
constructing a binding raises :class:`InvalidBinding` naming them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from ..engine.errors import DefinitionError
from ..engine.tasks import TaskDefinition

Completion = Literal["accepted", "joined", "promises"]
COMPLETIONS: tuple[str, ...] = ("accepted", "joined", "promises")


@dataclass(frozen=True, eq=False)
class Receiver:
    """An admitted endpoint that serves invocations from many calls.

    A push receiver is a task kind: the session runs one long-lived task of it (keyed by the
    receiver's name), which finds requests and cancellation notices in its mailbox. A pull
    receiver needs no task: whoever serves it reads accepted invocations from the session's
    documents (:func:`~bide.bindings.pull_invocations`).
    """

    name: str
    task: TaskDefinition | None = None

    @property
    def mailbox(self) -> str:
        """The mailbox its envelopes are posted to."""
        return f"receiver.{self.name}"


@dataclass(frozen=True)
class Push:
    """Destination: an existing receiver that is sent each invocation."""

    receiver: Receiver
    kind: Literal["push"] = "push"


@dataclass(frozen=True)
class Pull:
    """Destination: an existing receiver that reads accepted invocations itself."""

    receiver: Receiver
    kind: Literal["pull"] = "pull"


@dataclass(frozen=True)
class Start:
    """Destination: a new execution of ``recipe`` per invocation, with an identity derived from
    the invocation (so a rerun finds the same execution)."""

    recipe: TaskDefinition
    kind: Literal["start"] = "start"


Destination = Push | Pull | Start


class BindingRule(enum.StrEnum):
    """The admission rules; an :class:`InvalidBinding` names the ones broken."""

    PULL_ACCEPTED_ONLY = "pull-accepted-only"
    JOINED_NEEDS_PUSH_OR_START = "joined-needs-push-or-start"
    JOINED_NEEDS_HARD_DEADLINE = "joined-needs-hard-deadline"
    START_NEEDS_PROMISE_COMPLETION = "start-needs-promise-completion"
    PUSH_NEEDS_RECEIVER_TASK = "push-needs-receiver-task"
    ACCEPTED_HAS_NO_RESULT = "accepted-has-no-result"
    KEYS_NEED_PROMISES = "keys-need-promises-completion"
    DEADLINE_POSITIVE = "deadline-positive"
    KNOWN_COMPLETION = "known-completion"


_WHY: dict[BindingRule, str] = {
    BindingRule.PULL_ACCEPTED_ONLY: "pull dispatch supports accepted completion only",
    BindingRule.JOINED_NEEDS_PUSH_OR_START: (
        "joined completion needs push delivery or a started execution"
    ),
    BindingRule.JOINED_NEEDS_HARD_DEADLINE: "joined completion needs a nonzero hard deadline",
    BindingRule.START_NEEDS_PROMISE_COMPLETION: (
        "a started execution needs promise-bearing completion (joined or promises)"
    ),
    BindingRule.PUSH_NEEDS_RECEIVER_TASK: "push delivery needs a receiver with a task kind",
    BindingRule.ACCEPTED_HAS_NO_RESULT: (
        "accepted completion returns no result, so it takes no hard deadline or reply schema"
    ),
    BindingRule.KEYS_NEED_PROMISES: "completion keys need promises completion",
    BindingRule.DEADLINE_POSITIVE: "a hard deadline is a number of seconds > 0",
    BindingRule.KNOWN_COMPLETION: f"completion is one of {COMPLETIONS}",
}


class InvalidBinding(DefinitionError):
    """A workflow binding that is not admitted; ``rules`` lists every rule it breaks."""

    def __init__(self, name: str, rules: Sequence[BindingRule]) -> None:
        self.rules = tuple(rules)
        detail = "; ".join(f"{rule.value}: {_WHY[rule]}" for rule in self.rules)
        super().__init__(f"workflow binding {name!r} is not admitted ({detail})")


def binding_violations(
    destination: str,
    completion: str,
    hard_deadline: float | None,
    *,
    has_receiver_task: bool = True,
    has_reply_schema: bool = False,
    has_keys: bool = False,
) -> list[BindingRule]:
    """The admission rules a declaration breaks, in a fixed order (empty: admitted)."""
    broken: list[BindingRule] = []
    if completion not in COMPLETIONS:
        return [BindingRule.KNOWN_COMPLETION]
    if destination == "pull" and completion != "accepted":
        broken.append(BindingRule.PULL_ACCEPTED_ONLY)
    if completion == "joined" and destination not in ("push", "start"):
        broken.append(BindingRule.JOINED_NEEDS_PUSH_OR_START)
    if completion == "joined" and not (hard_deadline is not None and hard_deadline > 0):
        broken.append(BindingRule.JOINED_NEEDS_HARD_DEADLINE)
    elif hard_deadline is not None and not hard_deadline > 0:
        broken.append(BindingRule.DEADLINE_POSITIVE)
    if destination == "start" and completion not in ("joined", "promises"):
        broken.append(BindingRule.START_NEEDS_PROMISE_COMPLETION)
    if destination == "push" and not has_receiver_task:
        broken.append(BindingRule.PUSH_NEEDS_RECEIVER_TASK)
    if completion == "accepted" and (hard_deadline is not None or has_reply_schema):
        broken.append(BindingRule.ACCEPTED_HAS_NO_RESULT)
    if has_keys and completion != "promises":
        broken.append(BindingRule.KEYS_NEED_PROMISES)
    return broken


KeysOf = Callable[[Any], Sequence[str]]


@dataclass(frozen=True, eq=False)
class WorkflowBinding:
    """A trusted declaration binding a typed tool to a workflow relationship.

    ``name``, ``description`` and ``parameters`` are the tool the model sees; the model supplies
    only business arguments. ``destination`` (:class:`Push`, :class:`Pull` or :class:`Start`),
    ``completion`` (``accepted``, ``joined`` or ``promises``), ``hard_deadline`` (seconds, for
    every promise of an invocation), ``reply_schema`` (a pydantic model replies must match) and
    ``keys`` (completion keys from the arguments, for ``promises``; default ``["result"]``)
    come from this declaration only. Construction checks the admission rules.
    """

    name: str
    description: str
    parameters: type[BaseModel]
    destination: Destination
    completion: Completion
    hard_deadline: float | None = None
    reply_schema: type[BaseModel] | None = None
    keys: KeysOf | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise DefinitionError("a workflow binding needs a tool name")
        if not (isinstance(self.parameters, type) and issubclass(self.parameters, BaseModel)):
            raise DefinitionError(f"binding {self.name!r}: parameters must be a pydantic model")
        receiver = getattr(self.destination, "receiver", None)
        broken = binding_violations(
            self.destination.kind,
            self.completion,
            self.hard_deadline,
            has_receiver_task=receiver is not None and receiver.task is not None,
            has_reply_schema=self.reply_schema is not None,
            has_keys=self.keys is not None,
        )
        if broken:
            raise InvalidBinding(self.name, broken)

    def completion_keys(self, arguments: BaseModel) -> list[str]:
        """The completion keys of one invocation: ``["result"]`` unless ``keys`` says more."""
        if self.completion == "accepted":
            return []
        keys = list(self.keys(arguments)) if self.keys is not None else ["result"]
        if (
            not keys
            or len(set(keys)) != len(keys)
            or not all(isinstance(k, str) and k for k in keys)
        ):
            raise ValueError(f"binding {self.name!r}: completion keys must be distinct, non-empty")
        return keys
