"""What a deployed app registers so ``bide smoke`` can check it end to end.

:data:`SMOKE_TOOL` (``bide_smoke``) parks its call on a capability webhook with a short alarm
(``wait_seconds``): a request to the webhook resumes the call with "webhook delivered", the
alarm with "alarm fired". :data:`SMOKE_SIGNAL` is the signal the webhook delivers. An app adds
both (``App(signals=[..., SMOKE_SIGNAL], tools=ToolRegistry([..., SMOKE_TOOL]))``) and its
model calls the tool when asked; with a scripted model, :func:`smoke_reply` does it
deterministically (the repository's example app does). A smoke session touches every part of
the deployed path: the API and signal functions, the wake queue and its event source mapping,
the worker, the webhook key, and EventBridge Scheduler delivering an alarm to the queue.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from ..agent.providers import ModelRequest, ModelResponse, ToolResultMessage, UserMessage
from ..agent.providers.scripted import call_tool, reply
from ..engine.signals import SignalValue, define_signal
from ..tools import Sleep, ToolResult, define_tool
from ..tools.webhooks import mint_webhook

#: What the smoke client submits: ``bide smoke: wait <seconds>s (<why>)``.
SMOKE_PROMPT = "bide smoke: wait {seconds}s ({why})"
WEBHOOK_DELIVERED = "smoke: webhook delivered"
ALARM_FIRED = "smoke: alarm fired"
MAX_WAIT_SECONDS = 900
_PROMPT = re.compile(r"^bide smoke: wait (\d+)s\b")


class SmokePing(BaseModel):
    """What the smoke client posts to the webhook."""

    model_config = {"extra": "allow"}

    ping: str = Field(max_length=200)


class SmokeArgs(BaseModel):
    """``bide_smoke``'s parameters."""

    wait_seconds: int = Field(ge=1, le=MAX_WAIT_SECONDS, description="how long to wait")


SMOKE_SIGNAL = define_signal("bide.smoke-ping", 1, SmokePing)


async def _smoke(args: SmokeArgs, api: Any) -> ToolResult | Sleep:
    state = await api.read_signal(SMOKE_SIGNAL, "ping")
    if isinstance(state, SignalValue):
        return ToolResult.of_text(f"{WEBHOOK_DELIVERED}: {state.value.ping}")
    if state is not None:  # the key expired: the alarm came first
        return ToolResult.of_text(ALARM_FIRED)
    # A rerun finds the same webhook (mint_webhook memoizes it).
    await mint_webhook(api, SMOKE_SIGNAL, "ping")
    return Sleep(
        checkpoint={"waiting": args.wait_seconds},
        signals=[SMOKE_SIGNAL.key("ping")],
        until=api.now() + args.wait_seconds,
    )


SMOKE_TOOL = define_tool(
    "bide_smoke",
    "Deployment self-test: wait on a webhook for up to wait_seconds. Call it when the user's "
    "message starts with 'bide smoke: wait <N>s', with wait_seconds=N, and reply with its "
    "result text.",
    SmokeArgs,
    _smoke,
    replay="safe",
)


def smoke_reply(request: ModelRequest) -> ModelResponse | None:
    """For a scripted model: the smoke turn's answer (call ``bide_smoke``, then repeat its
    result), or None when the conversation's last turn is not a smoke prompt."""
    last = request.messages[-1] if request.messages else None
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    if not users:
        return None
    match = _PROMPT.match(users[-1].text)
    if match is None:
        return None
    if isinstance(last, ToolResultMessage):
        return reply(last.text)
    seconds = min(int(match.group(1)), MAX_WAIT_SECONDS)
    return call_tool("bide_smoke", {"wait_seconds": seconds}, id=f"call_smoke_{len(users)}")
