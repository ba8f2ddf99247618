"""Questions to a person: ``ctx.ask(...)`` publishes an :class:`~bide.workflow.InputRequest`
with the record of its wait and resolves when it is answered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...engine.failures import SignalFailed
from ..errors import WorkflowError
from ..history import derived_id
from ..requests import AskAnswer, AskOption, Display, InputRequest, ask_key, ask_opened_in
from .base import Op, Outcome, Pending, Ready, failed, raise_failure

if TYPE_CHECKING:
    from ..context import WorkflowContext


class AskOp(Op[AskAnswer]):
    """``ctx.ask(...)``: publish a question to the session and wait for its answer."""

    kind = "ask"

    def __init__(
        self,
        ctx: WorkflowContext,
        prompt: str,
        display: Display,
        options: Sequence[AskOption],
        allow_freeform: bool,
        name: str,
    ) -> None:
        super().__init__(ctx, name)
        self._request = InputRequest(
            id=derived_id("ask-", ctx.task_id, self.seq),
            task_id=ctx.task_id,
            tool=ctx.tool_name,
            call_id=ctx.call_id,
            prompt=prompt,
            display=display,
            options=list(options),
            allow_freeform=allow_freeform,
        )

    @property
    def ask_id(self) -> str:
        """The question's id (what an answer names)."""
        return self._request.id

    def arguments(self) -> Any:
        # Defaults left out: a field a later version adds to AskOption (with a default)
        # must not change the digest of questions asked before it existed.
        return self._request.model_dump(
            mode="json",
            include={"prompt", "display", "options", "allow_freeform"},
            exclude_defaults=True,
        )

    def params(self) -> dict[str, Any]:
        return {"doc": ask_key(self._request.id)}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        if tx.get_doc(record["doc"]) is None:
            request = self._request.model_copy(update={"created_at": tx.now()})
            tx.put_doc(record["doc"], request.model_dump(mode="json"))
            ask_opened_in(tx, request)

    async def poll(self, record: dict[str, Any]) -> Outcome:
        body = self._ctx._rt.get_doc(record["doc"]) or {}
        if body.get("status") == "answered":
            return Ready(body["answer"])
        if body.get("status") == "failed":  # a failure instead of an answer: raise it
            return failed(SignalFailed(**body["failure"]))
        if body.get("status") != "open":
            raise WorkflowError(f"question {self._request.id!r} was withdrawn")
        return Pending(bells=(record["doc"],))

    def decode(self, stored: dict[str, Any]) -> AskAnswer:
        raise_failure(stored)
        return AskAnswer.model_validate(stored["v"])
