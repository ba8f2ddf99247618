"""bide.testing.deliver_webhook's other routes: a failure (``{url}/failure`` or the
``$failure`` envelope, or a ``SignalFailure`` as the body) reaches the parked call as a failure,
not as a value; ``{url}/heartbeat`` moves ``beat_by`` (signed like a value on a signed
binding), and a missed beat wakes the call."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from bide import (
    HOUR,
    Harness,
    ManualClock,
    SequentialIds,
    SignalFailed,
    SignalFailure,
    SignalResult,
    SQLiteStore,
    define_signal,
)
from bide.app import App
from bide.service.webhooks import mint_webhook
from bide.testing import deliver_webhook
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool, result_of
from bide.tools.webhooks import WebhookRejected, sign


class Verdict(BaseModel):
    ok: bool


class Args(BaseModel):
    signed: bool = False


VERDICT = define_signal("test.render-verdict", 1, Verdict)
SECRET = "s3cret-for-the-hmac"
BEAT = 300.0


async def render(args: Args, api: Any) -> ToolResult | Sleep:
    state = await api.read_signal(VERDICT, "done")
    if isinstance(state, SignalFailed):
        return ToolResult.of_text(f"failed {state.type}: {state.message} {state.data}")
    if state is not None and hasattr(state, "value"):
        return ToolResult.of_text(f"ok={state.value.ok}")
    if api.wake is not None:
        return ToolResult.of_text(f"woke: {api.wake.reason}")
    hook = await mint_webhook(api, VERDICT, "done", hmac_secret=SECRET if args.signed else None)
    await api.write(lambda tx: tx.put_doc("hook", {"url": hook.url}))
    return Sleep(
        checkpoint={"waiting": True},
        signals=[VERDICT.key("done")],
        until=api.now() + HOUR,
        heartbeat=BEAT,
    )


TOOLS = ToolRegistry([define_tool("render", "render and report", Args, render)])
APP = App(signals=[VERDICT], tools=TOOLS)


def run(scenario: Any, *, signed: bool = False) -> None:
    """Park one call, then ``await scenario(harness, call_id, webhook_url)``."""

    async def go() -> None:
        harness = Harness(
            SQLiteStore(),
            "s-1",
            [TOOLS.task],
            clock=ManualClock(),
            ids=SequentialIds(),
            services={"webhook_base_url": "https://hooks.test/"},
        )
        await harness.open()
        call = await harness.create_task(TOOLS.task, TOOLS.call("render", {"signed": signed}))
        await harness.run_until_parked()
        await scenario(harness, call, harness.get_doc("hook")["url"])
        await harness.close()

    asyncio.run(go())


async def text_of(harness: Harness, call: str) -> str:
    await harness.run_until_parked()
    outcome = harness.outcome(call)
    assert outcome is not None
    return result_of(outcome).text


@pytest.mark.parametrize(
    ("suffix", "body"),
    [
        ("/failure", {"type": "RenderFailed", "message": "out of memory", "data": {"gb": 9}}),
        ("", {"$failure": {"type": "RenderFailed", "message": "out of memory", "data": {"gb": 9}}}),
        ("/failure", SignalFailure("RenderFailed", "out of memory", {"gb": 9})),
        ("", SignalFailure("RenderFailed", "out of memory", {"gb": 9})),
    ],
)
def test_a_failure_reaches_the_call_as_a_failure(suffix: str, body: Any) -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        decision = await deliver_webhook(harness, APP, url + suffix, body)
        assert decision.result is SignalResult.DELIVERED
        assert await text_of(harness, call) == "failed RenderFailed: out of memory {'gb': 9}"

    run(check)


def test_a_malformed_failure_is_refused_400_and_nothing_is_stored() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        with pytest.raises(WebhookRejected, match="type") as bad:
            await deliver_webhook(harness, APP, url + "/failure", {"type": "", "message": "m"})
        assert bad.value.status == 400
        with pytest.raises(WebhookRejected, match="reserved") as mixed:
            await deliver_webhook(harness, APP, url, {"$failure": {}, "ok": True})
        assert mixed.value.status == 400
        ok = await deliver_webhook(harness, APP, url, {"ok": True})  # the key is still free
        assert ok.result is SignalResult.DELIVERED
        assert await text_of(harness, call) == "ok=True"

    run(check)


def test_beats_move_beat_by_and_a_missed_one_wakes_the_call() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        clock = harness.clock
        assert isinstance(clock, ManualClock)
        start = clock.now()
        assert harness.task(call).state.beat_by == start + BEAT
        clock.advance(BEAT - 1)
        beat = await deliver_webhook(harness, APP, url + "/heartbeat")
        assert beat.result is SignalResult.DELIVERED
        assert harness.task(call).state.beat_by == clock.now() + BEAT
        assert harness.task(call).status == "sleeping"  # a beat is not a value
        clock.advance(BEAT - 1)
        await harness.run_until_parked()
        assert harness.outcome(call) is None  # the beat kept it alive past the first beat_by
        clock.advance(1)
        assert await text_of(harness, call) == "woke: heartbeat"
        late = await deliver_webhook(harness, APP, url + "/heartbeat")
        assert late.result is SignalResult.CLOSED

    run(check)


def test_a_signed_binding_needs_the_signature_on_failures_and_beats() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        timestamp = str(int(harness.clock.now()))

        def signed(raw: bytes) -> dict[str, str]:
            return {"X-Bide-Timestamp": timestamp, "X-Bide-Signature": sign(SECRET, timestamp, raw)}

        with pytest.raises(WebhookRejected) as unsigned:
            await deliver_webhook(harness, APP, url + "/heartbeat")
        assert unsigned.value.status == 401
        beat = await deliver_webhook(harness, APP, url + "/heartbeat", headers=signed(b""))
        assert beat.result is SignalResult.DELIVERED
        failure = SignalFailure("RenderFailed", "out of memory")
        with pytest.raises(WebhookRejected) as unsigned_failure:
            await deliver_webhook(harness, APP, url + "/failure", failure)
        assert unsigned_failure.value.status == 401
        raw = json.dumps(failure.to_json()).encode()
        decision = await deliver_webhook(
            harness, APP, url + "/failure", failure, headers=signed(raw)
        )
        assert decision.result is SignalResult.DELIVERED
        assert await text_of(harness, call) == "failed RenderFailed: out of memory None"

    run(check, signed=True)
