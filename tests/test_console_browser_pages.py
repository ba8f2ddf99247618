"""The dev console follows the workflow view's pages: a session with more open questions than
the view's first page shows a card for every one (headless Chromium, as
``test_console_browser``; without the browser this fails, saying how to install it)."""

from __future__ import annotations

from test_console_browser import WAIT_MS, browser_stack

from bide.engine.records import TaskRecord
from bide.engine.state import Sleeping
from bide.engine.store.base import Doc
from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack
from bide.service.workflow import VIEW_LIMIT
from bide.workflow.requests import ask_key
from scripts.chromium import browser_page

ASKS = VIEW_LIMIT + 25  # more than the view's first page

__all__ = ["browser_stack"]  # the fixture, imported for pytest to find


def test_the_console_shows_every_page_of_open_questions(stack: BackgroundStack) -> None:
    from playwright.sync_api import expect

    client = ApiClient(stack.url)
    assert client.request("POST", "/sessions", {"session_id": "s-many"}).status == 201
    store = stack.stack.deps.store
    asker = TaskRecord(
        id="asker",
        session_id="s-many",
        kind="bide.workflow",
        version=1,
        state=Sleeping(checkpoint={"phase": "asked"}),
        created_at=1000.0,
    )
    docs = [
        Doc(
            ask_key(f"a{n:03d}"),
            {
                "id": f"a{n:03d}",
                "task_id": "asker",
                "tool": "deploy",
                "prompt": f"question {n:03d}?",
                "status": "open",
                "allow_freeform": True,
                "created_at": 2000.0 + n,
            },
        )
        for n in range(ASKS)
    ]
    store.commit("s-many", store.head("s-many"), [asker], docs)
    first = client.request("GET", "/sessions/s-many/workflow").body
    assert len(first["asks"]) == VIEW_LIMIT and first["asks_more"]
    with browser_page(origin=stack.url) as page:
        page.goto(f"{stack.url}/_console#s-many")
        expect(page.locator(".session-head h2")).to_have_text("s-many")
        cards = page.locator("#asks .card")
        expect(cards).to_have_count(ASKS, timeout=WAIT_MS)
        expect(cards.last).to_contain_text(f"question {ASKS - 1:03d}?")
