"""Turning admitted bindings into tools, and the host's reply command."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from ..engine.errors import DefinitionError
from ..engine.host import WriteTx, host_commit
from ..engine.tasks import TaskDefinition
from ..promises import (
    DEADLINE_KEEPER,
    PromiseSettled,
    ResolveResult,
    await_promise,
    read_promise,
)
from ..promises.tools import render_value
from ..tools.define import ToolDefinition, claim_tools, define_tool
from ..tools.results import Sleep, ToolResult
from .declaration import WorkflowBinding
from .invocations import InvocationDoc, read_invocation, record_invocation, reply_in

if TYPE_CHECKING:
    from ..engine.harness import Harness


def binding_tool(binding: WorkflowBinding) -> ToolDefinition:
    """The tool of an admitted binding.

    Its ``execute`` records the invocation (destination, producer, promises, correlations) and
    emits it in one commit, then: ``accepted`` returns an acknowledgment; ``promises`` returns
    the keyed promise handles; ``joined`` parks on its promise until the reply, the hard
    deadline or a cancellation ends it. Model arguments are validated against
    ``binding.parameters`` and never choose the destination. Replay-safe: a rerun finds the
    recorded invocation and emits nothing again.
    """

    async def execute(args: BaseModel, api: Any) -> ToolResult | Sleep:
        # Idempotent: after the first run this finds the recorded invocation and writes nothing.
        task_id = api.task_id
        invocation = await api.write(lambda tx: record_invocation(tx, binding, task_id, args))
        if invocation.status == "undeliverable":
            return ToolResult.of_text(
                f"{binding.name}: invocation {invocation.id} was not delivered: {invocation.error}",
                is_error=True,
            )
        if binding.completion == "accepted":
            return _accepted(binding, invocation)
        if binding.completion == "promises":
            return _handles(binding, invocation)
        got = await await_promise(api, invocation.keys["result"].promise)
        if isinstance(got, PromiseSettled):
            return _joined(binding, got)
        assert isinstance(got, Sleep)  # no await timeout: the hard deadline ends the wait
        return got

    return define_tool(
        binding.name, binding.description, binding.parameters, execute, replay="safe"
    )


def _accepted(binding: WorkflowBinding, invocation: InvocationDoc) -> ToolResult:
    text = f"{binding.name}: accepted as invocation {invocation.id} (no result will follow)"
    return ToolResult.of_text(text, details={"invocation": invocation.id})


def _handles(binding: WorkflowBinding, invocation: InvocationDoc) -> ToolResult:
    handles = {key: ref.promise for key, ref in invocation.keys.items()}
    listed = ", ".join(f"{key}={pid}" for key, pid in handles.items())
    text = (
        f"{binding.name}: started invocation {invocation.id}; promise handles: {listed}. "
        "Await them later with promise_await."
    )
    return ToolResult.of_text(text, details={"invocation": invocation.id, "promises": handles})


def _joined(binding: WorkflowBinding, settled: PromiseSettled) -> ToolResult:
    if settled.status == "resolved":
        return ToolResult.of_text(render_value(settled.value), details=settled.model_dump())
    text = f"{binding.name} ended {settled.status}: {settled.error}"
    return ToolResult.of_text(text, is_error=True, details=settled.model_dump())


class BindingSet:
    """The admitted bindings of an app: their tools, the task kinds a harness needs, and the
    reply command. Names are unique; a receiver name means one receiver."""

    def __init__(self, bindings: Iterable[WorkflowBinding]) -> None:
        self._bindings: dict[str, WorkflowBinding] = {}
        receivers: dict[str, Any] = {}
        for binding in bindings:
            if binding.name in self._bindings:
                raise DefinitionError(f"two workflow bindings are named {binding.name!r}")
            receiver = getattr(binding.destination, "receiver", None)
            if (
                receiver is not None
                and receivers.setdefault(receiver.name, receiver) is not receiver
            ):
                raise DefinitionError(f"two receivers are named {receiver.name!r}")
            self._bindings[binding.name] = binding
        self.tools = [binding_tool(b) for b in self._bindings.values()]
        claim_tools(self, self.tools)  # an App finds the set through its tools

    def get(self, name: str) -> WorkflowBinding | None:
        """The binding admitted under ``name``."""
        return self._bindings.get(name)

    def task_kinds(self) -> list[TaskDefinition]:
        """Receiver tasks, execution recipes and the promise keeper."""
        kinds: list[TaskDefinition] = [DEADLINE_KEEPER]
        for binding in self._bindings.values():
            destination = binding.destination
            receiver = getattr(destination, "receiver", None)
            kind = getattr(destination, "recipe", None) or (receiver and receiver.task)
            if kind is not None and kind not in kinds:
                kinds.append(kind)
        return kinds

    def reply_in(
        self,
        tx: WriteTx,
        invocation_id: str,
        key: str,
        *,
        correlation: str,
        producer: str | None = None,
        status: Literal["resolved", "rejected"] = "resolved",
        value: Any = None,
        error: str | None = None,
    ) -> ResolveResult:
        """A reply inside a commit (a receiver's or execution's own); see
        :func:`~bide.bindings.reply_in`."""
        return reply_in(
            tx,
            self.get,
            invocation_id,
            key,
            correlation=correlation,
            producer=producer,
            status=status,
            value=value,
            error=error,
        )

    async def reply(
        self,
        harness: Harness,
        invocation_id: str,
        key: str,
        *,
        producer: str,
        correlation: str,
        status: Literal["resolved", "rejected"] = "resolved",
        value: Any = None,
        error: str | None = None,
    ) -> ResolveResult:
        """A correlated reply delivered by the host (a receiver's backend calling back).
        Raises :class:`~bide.bindings.ReplyRejected` and writes nothing when it does not
        match."""
        return host_commit(
            harness,
            lambda tx: self.reply_in(
                tx,
                invocation_id,
                key,
                correlation=correlation,
                producer=producer,
                status=status,
                value=value,
                error=error,
            ),
        )

    @staticmethod
    def status(harness: Harness, invocation_id: str) -> dict[str, str]:
        """Each completion key's promise status."""
        invocation = read_invocation(harness, invocation_id)
        if invocation is None:
            return {}
        return {
            key: getattr(read_promise(harness, ref.promise), "status", "unknown")
            for key, ref in invocation.keys.items()
        }
