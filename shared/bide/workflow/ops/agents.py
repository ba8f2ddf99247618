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
from ...engine.signals import SignalExpired, SignalValue
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

    def arguments(self) -> Any:
        return {"target": self._target, "message": self._message}

    def params(self) -> dict[str, Any]:
        # "stream": the settlement goes to the first open key wf.<seq>.<i>, so a race that
        # woke at a deadline (expiring the key it listed) leaves the subagent awaitable.
        return {"target": self._target, "conversation": self._conversation, "notify": "stream"}

    def _notify_key(self, record: dict[str, Any]) -> str:
        # Records from before streams carry no "notify": their settlement goes to wf.<seq>.
        return seq_key(self.seq) + (".*" if record.get("notify") == "stream" else "")

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
            notify=Notify(task_id=ctx.task_id, key=self._notify_key(record)),
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
        if record.get("notify") != "stream":
            state = await rt.read_signal(SUBMISSION_SETTLED, seq_key(self.seq))
            if isinstance(state, SignalExpired):
                raise WorkflowError(f"the wait for subagent {self.name!r} expired at a deadline")
            return Pending(keys=(SUBMISSION_SETTLED.key(seq_key(self.seq)),))
        index = 0
        while True:  # the first member no deadline expired: the settlement lands there
            key = seq_key(self.seq, index)
            state = await rt.read_signal(SUBMISSION_SETTLED, key)
            if isinstance(state, SignalValue):  # the settlement's own signal: it is the truth
                settled = SUBMISSION_SETTLED.dump(state.value)
                return Ready({k: settled.get(k) for k in ("status", "answer", "error")})
            if state is None:
                return Pending(keys=(SUBMISSION_SETTLED.key(key),))
            index += 1

    def decode(self, stored: dict[str, Any]) -> str:
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

    def arguments(self) -> Any:
        return {"text": self._text}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx = self._ctx

        def build(tx: Any, _record: dict[str, Any]) -> None:
            ctx._host.post_message(tx, self._text, f"m{self.seq}")

        return Ready(build=build)
