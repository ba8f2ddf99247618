"""Agents and the host's view of conversations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..admission import Admission
from ..engine.harness import Harness
from ..engine.host import HostTx
from ..engine.tasks import TaskDefinition
from ..tools.registry import ToolRegistry
from .conversation import (
    ConversationError,
    ConversationHead,
    Notify,
    Submission,
    WhenBusy,
    append_entry,
    create_conversation,
    read_head,
    read_submission,
    settle,
    write_head,
    write_submission,
)
from .generation import generation_task
from .hooks import GenerationHooks
from .limits import RunLimits
from .providers.base import ModelProvider, check_tool_names
from .steering import interrupt_round


class Agent:
    """A model provider, the tools it may call, a system prompt and generation hooks.

    With ``admission``, the model sees the presentations of ``model_family`` instead of the
    registry's tools, and each call is routed by the request's catalog (design 002).

    ``limits`` caps each run's model rounds, tool calls and tokens (:class:`RunLimits`; a run
    that reaches one ends with ``stopped: the run reached its limit of ...``).

    ``agent.task`` is the generation task kind; :meth:`task_kinds` lists every kind a
    harness needs to run this agent's sessions.
    """

    def __init__(
        self,
        provider: ModelProvider,
        tools: ToolRegistry | None = None,
        *,
        system: str | None = None,
        hooks: Iterable[GenerationHooks] = (),
        hook_tasks: Iterable[TaskDefinition] = (),
        max_attempts: int = 6,
        backoff_base: float = 2.0,
        backoff_cap: float = 300.0,
        admission: Admission | None = None,
        model_family: str = "generic",
        limits: RunLimits | None = None,
    ) -> None:
        self.provider = provider
        self.limits = limits if limits is not None else RunLimits()
        self.tools = tools if tools is not None else ToolRegistry()
        # The tool task writes each call's result entry through this port, in the commit
        # that ends the call (the tools layer cannot reach conversations itself).
        self.tools.transcript = append_entry
        self.admission = admission
        self.model_family = model_family
        if admission is not None:
            for operation in admission.operations:
                if self.tools.get(operation.identity) is not operation.tool:
                    self.tools.add(operation.tool)
        self.system = system
        self.hooks = list(hooks)
        self.hook_tasks = list(hook_tasks)
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.task = generation_task(self)
        self.check_tool_names()

    def exposed_tool_names(self) -> list[str]:
        """The tool names the model is shown: the presentations of ``model_family`` with
        admission, else the registry's tool names."""
        if self.admission is not None:
            return [spec["name"] for spec in self.admission.catalog(self.model_family).specs]
        return [tool.name for tool in self.tools.tools]

    def check_tool_names(self) -> None:
        """Raise :class:`~.providers.base.ToolNameError` if the provider refuses an exposed
        name. Runs when the agent is defined, when a harness takes it (:class:`Conversations`,
        after tools added since) and before each request (a name added later ends the run with
        this error instead of a request the provider refuses)."""
        check_tool_names(self.provider, self.exposed_tool_names(), family=self.model_family)

    def task_kinds(self) -> list[TaskDefinition]:
        """The generation, the tool task and the hook task kinds."""
        return [self.task, self.tools.task, *self.hook_tasks]


def start_run(agent: Agent, tx: Any, cid: str, submission: Submission) -> str:
    """Place ``submission`` and start a generation for it (in ``tx``'s commit)."""
    head = read_head(tx, cid)
    append_entry(
        tx,
        cid,
        {
            "type": "user",
            "text": submission.content,
            "submission": submission.id,
            "source": submission.source,
        },
    )
    write_submission(tx, submission.model_copy(update={"status": "placed"}))
    head = read_head(tx, cid)
    run_no = head.entries  # unique per run: the entry index of its first input
    generation: str = tx.create_task(
        agent.task, {"conversation": cid}, key=f"gen:{cid}:{run_no}", owner=head.owner_task
    )
    write_head(tx, head.model_copy(update={"run": generation, "run_submissions": [submission.id]}))
    return generation


def submit_in(
    agent: Agent,
    tx: Any,
    cid: str,
    content: str,
    *,
    request_id: str,
    when_busy: WhenBusy = "follow_up",
    notify: Notify | None = None,
    source: str = "user",
) -> Submission:
    """Submit input inside a commit: deduplicated by ``request_id``; placed at once when the
    conversation is idle; otherwise queued (``steer``: interrupts the running run's tool
    calls in this commit and is answered next by the same run, see :mod:`.steering`;
    ``follow_up``: after the run) or refused (``reject`` -> ``unanswered``)."""
    if not isinstance(content, str) or not content:
        raise ConversationError("content must be a non-empty string")
    existing = read_submission(tx, cid, request_id)
    if existing is not None:
        return existing
    head = read_head(tx, cid)
    submission = Submission(
        id=request_id,
        conversation=cid,
        content=content,
        when_busy=when_busy,
        notify=notify,
        source=source,
        created_at=tx.now(),
    )
    if head.run is None:
        start_run(agent, tx, cid, submission)
        return submission.model_copy(update={"status": "placed"})
    if when_busy == "reject":
        settle(tx, submission, "unanswered", error="the conversation is busy")
        return submission.model_copy(update={"status": "unanswered"})
    write_submission(tx, submission)
    write_head(tx, head.model_copy(update={"queue": [*head.queue, request_id]}))
    if when_busy == "steer":
        interrupt_round(tx, head)
    return submission


class Conversations:
    """The host's commands on an agent's conversations in one session's harness."""

    def __init__(self, harness: Harness, agent: Agent) -> None:
        self.harness = harness
        self.agent = agent
        agent.check_tool_names()
        for kind in agent.task_kinds():
            if harness._defs.get((kind.name, kind.version)) is not kind:
                harness.register(kind)

    async def create(self, cid: str | None = None, *, system: str | None = None) -> str:
        """Create a conversation (idempotent by id); its id."""
        conversation_id = cid or self.harness.ids.new_id("c-")
        self.harness._apply(
            lambda d: create_conversation(HostTx(self.harness, d), conversation_id, system=system)
        )
        return conversation_id

    async def submit(
        self,
        cid: str,
        content: str,
        *,
        request_id: str | None = None,
        when_busy: WhenBusy = "follow_up",
    ) -> Submission:
        """Submit user input (see :func:`submit_in`)."""
        rid = request_id or self.harness.ids.new_id("r-")
        return self.harness._apply(
            lambda d: submit_in(
                self.agent,
                HostTx(self.harness, d),
                cid,
                content,
                request_id=rid,
                when_busy=when_busy,
            )
        )

    async def stop(self, cid: str, reason: str = "stopped") -> bool:
        """Stop: abort the running generation and with it its tool calls and subagents."""
        head = self.head(cid)
        if head.run is None:
            return False
        return await self.harness.abort(head.run, reason)

    def head(self, cid: str) -> ConversationHead:
        """The conversation's head document."""
        return read_head(self.harness, cid)

    def entries(self, cid: str) -> list[dict[str, Any]]:
        """The transcript."""
        return [doc.body for doc in self.harness.list_docs(f"conv/{cid}/e/")]

    def submission(self, cid: str, request_id: str) -> Submission | None:
        """A submission by request id."""
        return read_submission(self.harness, cid, request_id)
