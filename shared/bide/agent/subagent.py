"""A subagent tool (design 001 ch. VII): delegate to a child conversation and park until its
answer settles, holding nothing in memory meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..engine.signals import SignalValue
from ..tools.define import ToolDefinition, define_tool
from ..tools.results import Sleep, ToolResult
from .conversation import (
    SUBMISSION_SETTLED,
    Notify,
    create_conversation,
    owned_conversation_id,
)

if TYPE_CHECKING:
    from .agent import Agent


class SubagentArgs(BaseModel):
    """What the model passes: the task for the subagent."""

    task: str = Field(description="What the subagent should do, in full sentences")


def subagent_tool(
    agent: Agent | Callable[[], Agent],
    *,
    name: str = "subagent",
    description: str = "Delegate a task to a subagent and get its answer back",
    system: str | None = None,
) -> ToolDefinition:
    """A tool that creates a conversation owned by its call, submits the task with
    ``notify``, and parks on :data:`SUBMISSION_SETTLED`. The settlement and the signal are
    one commit; an answer that comes before the park wakes it at once; a rerun finds the
    same child (stable conversation id and request id)."""

    def resolve() -> Agent:
        return agent() if callable(agent) and not hasattr(agent, "task") else agent  # type: ignore[return-value]

    async def execute(args: SubagentArgs, api: Any) -> Any:
        state = await api.read_signal(SUBMISSION_SETTLED, "answered")
        if isinstance(state, SignalValue):
            settled = state.value
            if settled.status != "done":
                return ToolResult.of_text(
                    f"Subagent ended {settled.status}: {settled.error}", is_error=True
                )
            return ToolResult.of_text(settled.answer or "")
        child = owned_conversation_id(api.task_id)
        child_agent = resolve()

        def start(tx: Any) -> None:
            from .agent import submit_in

            create_conversation(tx, child, owner_task=api.task_id, system=system)
            submit_in(
                child_agent,
                tx,
                child,
                args.task,
                request_id=f"subagent:{api.task_id}",
                notify=Notify(task_id=api.task_id, key="answered"),
                source=f"task:{api.task_id}",
            )

        await api.write(start)
        return Sleep(
            checkpoint={"conversation": child}, signals=[SUBMISSION_SETTLED.key("answered")]
        )

    return define_tool(name, description, SubagentArgs, execute, replay="safe")
