"""Workflow webhooks: ``await ctx.webhook()`` mints a capability URL (an action), and the
:class:`Webhook` handle it returns waits for its requests, one operation per request."""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...engine.signals import SignalExpired, SignalValue
from ...tools.webhooks import WebhookBinding, binding_key, make_token
from ..history import WEBHOOK, seq_key
from .base import Op, Outcome, Pending, Ready

if TYPE_CHECKING:
    from ..context import WorkflowContext


class WebhookOp(Op["Webhook"]):
    """``await ctx.webhook()``: mint a capability URL whose requests this run receives."""

    kind = "webhook"
    waits = False

    def __init__(self, ctx: WorkflowContext, name: str) -> None:
        super().__init__(ctx, name)
        self._handle: Webhook | None = None

    def params(self) -> dict[str, Any]:
        rt = self._ctx._rt
        # Two ids of the id source (256 random bits in production). The secret is kept in the
        # run's own memo; the session's binding document is stored under its hash only.
        seed = f"{rt.new_id('')}\x1f{rt.new_id('')}\x1f{rt.task_id}\x1f{self.seq}"
        return {"secret": hashlib.sha256(seed.encode()).hexdigest()}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx = self._ctx
        base = str(ctx._rt.services.get("webhook_base_url", "")).rstrip("/")

        def build(tx: Any, winner: dict[str, Any]) -> dict[str, str]:
            binding = WebhookBinding(
                session_id=ctx.session_id,
                task_id=ctx.task_id,
                signal=WEBHOOK.name,
                key=seq_key(self.seq) + ".*",  # a stream: request i goes to wf.<seq>.<i>
            )
            tx.put_doc(binding_key(winner["secret"]), binding.model_dump(mode="json"))
            token = make_token(ctx.session_id, winner["secret"])
            return {"url": f"{base}/hooks/{token}", "token": token}

        return Ready(build=build)

    async def decode(self, stored: dict[str, Any]) -> Webhook:
        # One handle per webhook: it knows which requests the body already took.
        if self._handle is None:
            self._handle = Webhook(self._ctx, self.seq, stored["v"]["url"], stored["v"]["token"])
        return self._handle


class NextRequestOp(Op[Any]):
    """The next request a :class:`Webhook` received (its JSON body)."""

    kind = "webhook.next"

    def __init__(self, ctx: WorkflowContext, hook: Webhook, name: str) -> None:
        super().__init__(ctx, name)
        self._hook = hook

    def params(self) -> dict[str, Any]:
        return {"hook": self._hook.seq, "from": self._hook._next}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        rt = self._ctx._rt
        index = record["from"]
        while True:
            key = seq_key(record["hook"], index)
            state = await rt.read_signal(WEBHOOK, key)
            if isinstance(state, SignalValue):
                return Ready({"index": index, "body": state.value})
            if isinstance(state, SignalExpired):  # a wait on it timed out; requests moved on
                index += 1
                continue
            return Pending(keys=(WEBHOOK.key(key),))

    async def decode(self, stored: dict[str, Any]) -> Any:
        self._hook._next = max(self._hook._next, stored["v"]["index"] + 1)
        return stored["v"]["body"]


@dataclass
class Webhook:
    """A capability URL whose requests this run receives, in order.

    ``await hook`` (or ``await hook.next()``) is the next request's JSON body; ``async for
    body in hook`` goes on for every request. The URL stays the same for the run's whole life
    (each request goes to its own key, so none is lost); once the run ended, requests are
    refused with ``closed``."""

    _ctx: WorkflowContext = field(repr=False)
    seq: int
    url: str
    token: str = field(repr=False)
    _next: int = 0

    def next(self, *, name: str | None = None) -> NextRequestOp:
        """The next request, as an operation (race it against a deadline if you like)."""
        return NextRequestOp(self._ctx, self, name or f"webhook.{self.seq}")

    def __await__(self) -> Generator[Any, None, Any]:
        return self.next().__await__()

    def __aiter__(self) -> Webhook:
        return self

    async def __anext__(self) -> Any:
        return await self.next()
