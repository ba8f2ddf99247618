"""Operations that talk to conversations: ``ctx.agent(key=, target=, message=)`` (a subagent
in a conversation the run owns) and ``task.post_message(text)`` (a message to the parent)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...agent.conversation import (
    SUBMISSION_SETTLED,
    Notify,
    create_conversation,
    owned_conversation_id,
    read_submission,
)
from ...engine.signals import SignalExpired
from ..errors import SubagentFailed, WorkflowError
from ..history import seq_key
from .base import Op, Outcome, Pending, Ready

if TYPE_CHECKING:
    from ..context import WorkflowContext


class AgentOp(Op[str]):
    """``ctx.agent(key=, target=, message=)``: a subagent in a conversation owned by this
    run; its answer, or :class:`SubagentFailed`."""

    kind = "agent"

    def __init__(self, ctx: WorkflowContext, key: str, target: str, message: str) -> None:
        super().__init__(ctx, key)
        self._target = target
        self._message = message
        self._conversation = owned_conversation_id(ctx.task_id, f"agent:{key}")
        self._request_id = f"wf:{ctx.task_id}:{key}"

    def params(self) -> dict[str, Any]:
        return {"target": self._target, "conversation": self._conversation}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        from ...agent.agent import submit_in

        ctx = self._ctx
        agent = ctx._host.agent_for(self._target)
        create_conversation(tx, self._conversation, owner_task=ctx.task_id)
        submit_in(
            agent,
            tx,
            self._conversation,
            self._message,
            request_id=self._request_id,
            notify=Notify(task_id=ctx.task_id, key=seq_key(self.seq)),
            source=f"task:{ctx.task_id}",
        )

    async def poll(self, record: dict[str, Any]) -> Outcome:
        rt = self._ctx._rt
        submission = read_submission(rt, record["conversation"], self._request_id)
        if submission is not None and submission.status in ("done", "unanswered"):
            return Ready(
                {
                    "status": submission.status,
                    "answer": submission.answer,
                    "error": submission.error,
                }
            )
        state = await rt.read_signal(SUBMISSION_SETTLED, seq_key(self.seq))
        if isinstance(state, SignalExpired):
            raise WorkflowError(f"the wait for subagent {self.name!r} expired at a deadline")
        return Pending(keys=(SUBMISSION_SETTLED.key(seq_key(self.seq)),))

    async def decode(self, stored: dict[str, Any]) -> str:
        value = stored["v"]
        if value["status"] != "done":
            raise SubagentFailed(self.name, value["status"], value.get("error"))
        return str(value.get("answer") or "")


class MessageOp(Op[None]):
    """``await task.post_message(text)``: one message to the parent, sent once."""

    kind = "message"
    waits = False

    def __init__(self, ctx: WorkflowContext, text: str) -> None:
        super().__init__(ctx, "post_message")
        self._text = text

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx = self._ctx

        def build(tx: Any, _record: dict[str, Any]) -> None:
            ctx._host.post_message(tx, self._text, f"m{self.seq}")

        return Ready(build=build)
