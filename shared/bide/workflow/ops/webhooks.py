"""Workflow webhooks: ``await ctx.webhook()`` mints a capability URL (an action), and the
:class:`Webhook` handle it returns waits for its requests, one operation per request."""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...engine.failures import SignalFailed
from ...engine.signals import SignalExpired, SignalValue
from ...tools.webhook_keys import keys_of
from ...tools.webhooks import WebhookBinding, binding_key, token_of
from ..history import WEBHOOK, seq_key
from .base import Op, Outcome, Pending, Ready, failed, raise_failure

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
        # Two ids of the id source (256 random bits in production), hashed to a nonce: it names
        # the binding document and is stored; the token's secret part is derived from it under
        # the deployment's key and stored nowhere (bide.tools.webhooks).
        seed = f"{rt.new_id('')}\x1f{rt.new_id('')}\x1f{rt.task_id}\x1f{self.seq}"
        return {"nonce": hashlib.sha256(seed.encode()).hexdigest()[:32]}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        def build(tx: Any, winner: dict[str, Any]) -> dict[str, str]:
            # A run recorded by an earlier version holds a "secret": its hash is a nonce.
            legacy = hashlib.sha256(str(winner.get("secret")).encode()).hexdigest()[:32]
            binding = self._binding(winner.get("nonce") or legacy)
            tx.put_doc(binding_key(binding.nonce), binding.to_doc())
            # Only the nonce is recorded: the URL is derived again wherever it is needed.
            return {"nonce": binding.nonce}

        return Ready(build=build)

    def _binding(self, nonce: str) -> WebhookBinding:
        ctx = self._ctx
        return WebhookBinding(
            session_id=ctx.session_id,
            task_id=ctx.task_id,
            signal=WEBHOOK.name,
            key=seq_key(self.seq) + ".*",  # a stream: request i goes to wf.<seq>.<i>
            nonce=nonce,
        )

    def decode(self, stored: dict[str, Any]) -> Webhook:
        # One handle per webhook: it knows which requests the body already took.
        if self._handle is None and "nonce" not in stored["v"]:
            # Recorded by an earlier version (its URL held a stored secret: no longer accepted).
            v = stored["v"]
            self._handle = Webhook(self._ctx, self.seq, v["url"], v["token"])
        if self._handle is None:
            services = self._ctx._rt.services
            base = str(services.get("webhook_base_url", "")).rstrip("/")
            token = token_of(self._binding(stored["v"]["nonce"]), keys_of(services))
            self._handle = Webhook(self._ctx, self.seq, f"{base}/hooks/{token}", token)
        return self._handle


class NextRequestOp(Op[Any]):
    """The next request a :class:`Webhook` received (its JSON body)."""

    kind = "webhook.next"

    def __init__(self, ctx: WorkflowContext, hook: Webhook, name: str) -> None:
        super().__init__(ctx, name)
        self._hook = hook

    def arguments(self) -> Any:
        return {"hook": self._hook.seq}

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
            if isinstance(state, SignalFailed):  # a request said "failed": raise it
                return failed(state, index=index)
            if isinstance(state, SignalExpired):  # a wait on it timed out; requests moved on
                index += 1
                continue
            return Pending(keys=(WEBHOOK.key(key),))

    def decode(self, stored: dict[str, Any]) -> Any:
        taken = stored["v"] if "v" in stored else stored["error"]
        self._hook._next = max(self._hook._next, taken["index"] + 1)
        raise_failure(stored)
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
