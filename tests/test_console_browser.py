"""The dev console in a real browser: headless Chromium (Debian's package: ``make chromium``)
driven by Playwright, against the local stack started in-process with
``examples/console_app.py``. A person sends a message, sees the question the workflow tool
asks, answers it on the page and sees the run finish; copies a webhook URL and decides an
approval from the page.

Without the browser these tests fail, saying how to install it: they never skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack_kit import local_stack

from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack
from examples.console_app import build_app
from scripts.chromium import browser_page, missing

WAIT_MS = 15_000


@pytest.fixture(name="stack")
def browser_stack(tmp_path: Path) -> Iterator[BackgroundStack]:
    """The console app's local stack, once Chromium is there to drive its page."""
    why = missing()
    if why is not None:
        pytest.fail(f"the console's browser test needs Chromium: {why}")
    with local_stack(build_app(), tmp_path) as s:
        yield s


def submissions(stack: BackgroundStack, sid: str) -> list[dict[str, Any]]:
    body = ApiClient(stack.url).request("GET", f"/sessions/{sid}").body
    return list(body["submissions"])


def test_a_question_is_answered_on_the_page_and_the_run_finishes(stack: BackgroundStack) -> None:
    from playwright.sync_api import expect

    client = ApiClient(stack.url)
    assert client.request("POST", "/sessions", {"session_id": "s-browser"}).status == 201
    with browser_page(origin=stack.url) as page:
        page.goto(f"{stack.url}/_console")
        page.locator(".session-item", has_text="s-browser").click()
        expect(page.locator(".session-head h2")).to_have_text("s-browser")

        # The message goes through the sessions API; the model calls deploy, which asks.
        page.locator("#message").fill("Please deploy api")
        page.get_by_role("button", name="Send", exact=True).click()
        card = page.locator(".card.ask")
        expect(card).to_contain_text("Deploy api? The plan: 3 pods, 1 migration.", timeout=WAIT_MS)
        expect(page.locator(".session-item.selected")).to_contain_text("needs you")
        tree = page.locator("#tasks")
        expect(tree).to_contain_text('tool deploy(service="api")')
        expect(tree).to_contain_text("waits for your answer to")
        expect(tree.locator(".progress")).to_contain_text("waiting for approval")
        [ask] = client.request("GET", "/sessions/s-browser/workflow").body["asks"]
        assert ask["status"] == "open"

        card.locator("input.answer-text").fill("ship it")
        card.get_by_role("button", name="Deploy").click()
        expect(page.locator("#notices")).to_contain_text(
            f"question {ask['id']} answered: delivered", timeout=WAIT_MS
        )
        expect(page.locator("#transcript")).to_contain_text(
            'Done: {"deployed": true, "url": "https://api.example/v2", "note": "ship it"}',
            timeout=WAIT_MS,
        )
        expect(tree).to_contain_text("No live tasks", timeout=WAIT_MS)
        expect(page.locator("#asks .card")).to_have_count(0)
        expect(page.locator(".session-item.selected")).to_contain_text("idle")

    # The answer reached the tool through the API: the run's result carries it.
    [submission] = submissions(stack, "s-browser")
    assert submission["status"] == "done"
    assert '"note": "ship it"' in submission["answer"]
    assert client.request("GET", "/sessions/s-browser/workflow").body["asks"] == []


def test_a_webhook_url_is_copied_and_an_approval_decided_on_the_page(
    stack: BackgroundStack,
) -> None:
    from playwright.sync_api import expect

    client = ApiClient(stack.url)
    for sid, text in [("s-ci", "Fix the flaky test"), ("s-branch", "Please delete feature-x")]:
        client.request("POST", "/sessions", {"session_id": sid})
        client.request("POST", f"/sessions/{sid}/inputs", {"content": text, "request_id": "r1"})
    assert stack.settle(10)
    [hook] = client.request("GET", "/sessions/s-ci/hooks").body["items"]

    with browser_page(origin=stack.url) as page:
        page.goto(f"{stack.url}/_console#s-ci")
        url = page.locator(".hook-url")
        expect(url).to_have_text(hook["url"], timeout=WAIT_MS)
        expect(page.locator("#tasks")).to_contain_text("until ")
        expect(page.locator("#schedule")).to_contain_text("parked until a deadline")
        page.get_by_role("button", name="copy webhook URL").click()
        expect(page.get_by_role("button", name="copy webhook URL")).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == hook["url"]

        page.locator(".session-item", has_text="s-branch").click()
        card = page.locator(".card.approval")
        expect(card).to_contain_text('"branch": "feature-x"', timeout=WAIT_MS)
        card.get_by_role("button", name="Approve").click()
        expect(page.locator("#transcript")).to_contain_text(
            "Done: deleted branch feature-x", timeout=WAIT_MS
        )
        expect(page.locator("#tasks")).to_contain_text("No live tasks", timeout=WAIT_MS)
    [submission] = submissions(stack, "s-branch")
    assert submission["answer"] == "Done: deleted branch feature-x"
