"""bide.testing.deliver_webhook: a tool's capability webhook driven in-process, with the checks
of the deployed webhook route (bound token, this session, signature, the app's signals)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from bide import HOUR, Harness, ManualClock, SequentialIds, SignalResult, SQLiteStore, define_signal
from bide.app import App
from bide.service.webhooks import mint_webhook
from bide.testing import deliver_webhook
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool, result_of
from bide.tools.webhooks import WebhookRejected, sign


class Verdict(BaseModel):
    ok: bool


class Args(BaseModel):
    signed: bool = False


VERDICT = define_signal("test.verdict", 1, Verdict)
SECRET = "s3cret-for-the-hmac"


async def wait_for_verdict(args: Args, api: Any) -> ToolResult | Sleep:
    state = await api.read_signal(VERDICT, "done")
    if state is not None:
        return ToolResult.of_text(f"ok={state.value.ok}")
    hook = await mint_webhook(api, VERDICT, "done", hmac_secret=SECRET if args.signed else None)
    await api.write(lambda tx: tx.put_doc("hook", {"url": hook.url}))
    return Sleep(
        checkpoint={"waiting": True}, signals=[VERDICT.key("done")], until=api.now() + HOUR
    )


TOOLS = ToolRegistry([define_tool("wait", "wait for a verdict", Args, wait_for_verdict)])
APP = App(signals=[VERDICT], tools=TOOLS)


def run(scenario: Any, *, session: str = "s-1", signed: bool = False) -> None:
    """Park one call of the tool, then ``await scenario(harness, call_id, webhook_url)``."""

    async def go() -> None:
        harness = Harness(
            SQLiteStore(),
            session,
            [TOOLS.task],
            clock=ManualClock(),
            ids=SequentialIds(),
            services={"webhook_base_url": "https://hooks.test/"},
        )
        await harness.open()
        call = await harness.create_task(TOOLS.task, TOOLS.call("wait", {"signed": signed}))
        await harness.run_until_parked()
        await scenario(harness, call, harness.get_doc("hook")["url"])
        await harness.close()

    asyncio.run(go())


def test_a_posted_value_resumes_the_parked_call() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        assert url.startswith("https://hooks.test/hooks/")
        decision = await deliver_webhook(harness, APP, url, {"ok": True})
        assert decision.result is SignalResult.DELIVERED
        await harness.run_until_parked()
        outcome = harness.outcome(call)
        assert outcome is not None and result_of(outcome).text == "ok=True"
        again = await deliver_webhook(harness, APP, url, {"ok": False})
        assert again.result is SignalResult.CLOSED

    run(check)


def test_invalid_and_duplicate_values_are_decided_as_the_route_decides() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        invalid = await deliver_webhook(harness, APP, url, {"ok": "maybe"})
        assert invalid.result is SignalResult.INVALID
        assert [e["field"] for e in invalid.errors] == ["ok"]
        assert (await deliver_webhook(harness, APP, url, {"ok": True})).result.value == "delivered"
        assert (await deliver_webhook(harness, APP, url, {"ok": False})).result.value == "duplicate"

    run(check)


def test_unknown_urls_and_undeliverable_signals_are_refused_with_the_routes_status() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        with pytest.raises(WebhookRejected) as unbound:
            await deliver_webhook(harness, APP, url[:-1] + ("1" if url.endswith("0") else "0"), {})
        assert unbound.value.status == 404
        with pytest.raises(WebhookRejected) as garbage:
            await deliver_webhook(harness, APP, "https://hooks.test/hooks/nope", {"ok": True})
        assert garbage.value.status == 404
        # An app that does not list the signal: the deployed route could not deliver it.
        with pytest.raises(WebhookRejected, match=r"App\(signals=") as missing:
            await deliver_webhook(harness, App(tools=TOOLS), url, {"ok": True})
        assert missing.value.status == 404

    run(check)


def test_a_url_of_another_session_is_unknown_here() -> None:
    urls: list[str] = []

    async def mint(harness: Harness, call: str, url: str) -> None:
        urls.append(url)

    async def post(harness: Harness, call: str, url: str) -> None:
        with pytest.raises(WebhookRejected, match="unknown webhook in session 's-2'"):
            await deliver_webhook(harness, APP, urls[0], {"ok": True})

    run(mint, session="s-1")
    run(post, session="s-2")


def test_a_signed_binding_needs_the_signature_over_the_json_body() -> None:
    async def check(harness: Harness, call: str, url: str) -> None:
        body = {"ok": True}
        with pytest.raises(WebhookRejected) as unsigned:
            await deliver_webhook(harness, APP, url, body)
        assert unsigned.value.status == 401
        timestamp = str(int(harness.clock.now()))
        headers = {
            "X-Bide-Timestamp": timestamp,
            "X-Bide-Signature": sign(SECRET, timestamp, json.dumps(body).encode()),
        }
        decision = await deliver_webhook(harness, APP, url, body, headers=headers)
        assert decision.result is SignalResult.DELIVERED

    run(check, signed=True)
