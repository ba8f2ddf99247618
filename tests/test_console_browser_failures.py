"""The dev console draws a sleep's heartbeat (``beat by``) and a key holding a failure as a
failure, never as a value (headless Chromium, as ``test_console_browser``; without the browser
this fails, saying how to install it)."""

from __future__ import annotations

from test_console_browser import WAIT_MS, browser_stack

from bide.engine.records import SignalSlot, TaskRecord
from bide.engine.signals import define_signal
from bide.engine.state import Sleeping
from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack
from scripts.chromium import browser_page

__all__ = ["browser_stack"]  # the fixture, imported for pytest to find

RENDER = define_signal("test.render-done", 1, dict)


def test_the_console_shows_beat_by_and_a_held_failure(stack: BackgroundStack) -> None:
    from playwright.sync_api import expect

    client = ApiClient(stack.url)
    assert client.request("POST", "/sessions", {"session_id": "s-beats"}).status == 201
    store = stack.stack.deps.store
    render = TaskRecord(
        id="render",
        session_id="s-beats",
        kind="app.render",
        version=1,
        state=Sleeping(
            checkpoint={"phase": "rendering"},
            signals=(RENDER.key("done"),),
            until=9_000_000_000.0,
            heartbeat=300.0,
            beat_by=8_000_000_000.0,
        ),
        signals={
            "test.render-done/side": SignalSlot(
                version=1, has_value=True, failure={"type": "OutOfMemory", "message": "9 GB"}
            ),
            "test.render-done/other": SignalSlot(version=1, value={"ok": True}, has_value=True),
        },
        created_at=1000.0,
    )
    store.commit("s-beats", store.head("s-beats"), [render], [])
    (task,) = client.request("GET", "/sessions/s-beats").body["tasks"]
    assert task["beat_by"] == 8_000_000_000.0
    with browser_page(origin=stack.url) as page:
        page.goto(f"{stack.url}/_console#s-beats")
        detail = page.locator("#tasks .task-detail")
        expect(detail).to_contain_text("beat by", timeout=WAIT_MS)
        expect(detail).to_contain_text("(every 300s)")
        failure = page.locator("#tasks .held-failure")
        expect(failure).to_have_count(1)
        expect(failure).to_contain_text("failure on test.render-done/side: OutOfMemory: 9 GB")
        expect(detail).to_contain_text("holds value on test.render-done/other")
