"""What the sealed-memo-page tests share (``test_memo_page_cache``, ``test_memo_page_listing``,
``test_memo_page_listing_dynamodb``): a store wrapper that counts the requests reading sealed
pages, a workflow body called once and run until parked, a worker gone cold (nothing of the
task's pages cached), a body whose webhook its later steps seal into a page, and a bare record
that counts its pages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from test_workflow_support import Note, Tools

from bide.engine import memo_pages
from bide.engine.memo_pages import PageCache
from bide.engine.records import TaskRecord
from bide.engine.state import Pending
from bide.service.hooks import live_webhooks
from bide.testing import StoreWrapper
from bide.tools.webhook_keys import keys_of
from bide.workflow import define_workflow_tool

Body = Callable[[Any, Any], Awaitable[Any]]


class PageReads(StoreWrapper):
    """Counts the store requests that read sealed memo pages: ``gets``, the keys read one by
    one; ``listings``, each listing of a task's pages as ``(start_after, limit)``; ``reads``,
    every page read either way, by key."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.gets: list[str] = []
        self.listings: list[tuple[str | None, int | None]] = []
        self.reads: Counter[str] = Counter()

    def clear(self) -> None:
        """Count from nothing again."""
        self.gets, self.listings = [], []
        self.reads.clear()

    def get_doc(self, session_id: str, key: str) -> Any:
        if key.startswith(memo_pages.PREFIX):
            self.gets.append(key)
            self.reads[key] += 1
        return self.inner.get_doc(session_id, key)

    def list_docs(self, session_id: str, prefix: str, *, start_after=None, limit=None) -> Any:
        found = self.inner.list_docs(session_id, prefix, start_after=start_after, limit=limit)
        if prefix.startswith(memo_pages.PREFIX):
            self.listings.append((start_after, limit))
            self.reads.update(doc.key for doc in found)
        return found


async def parked(
    body: Body, *, store: Any = None, name: str = "w", min_pages: int = 1
) -> tuple[Tools, str, int]:
    """A workflow tool ``name`` running ``body`` on a fresh harness over ``store`` (a fresh
    SQLite store when None), called once and run until parked, having sealed at least
    ``min_pages`` pages (0: any number): the tools, the call's task id and its page count."""
    t = await Tools(define_workflow_tool(name, "", Note, body), store=store).start()
    call = await t.call(name, {})
    await t.h.run_until_parked()
    pages = t.h.task(call).memo_pages
    assert pages >= min_pages, pages
    return t, call, pages


async def go_cold(t: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """``t`` as a worker that cached nothing runs it: a fresh process cache of sealed pages
    (its first invocation in a process, or after the cache dropped them), a fresh harness."""
    monkeypatch.setattr(memo_pages, "PAGES", PageCache(max_pages=2048, max_bytes=8 << 20))
    await t.reopen()


def hooked(steps: int) -> Body:
    """A body that makes a webhook named ``callback`` as its first operation, then takes
    ``steps`` steps (which seal that operation into a page), then waits on the webhook."""

    async def body(args, ctx):
        hook = await ctx.webhook(name="callback")
        for i in range(steps):
            await ctx.step(lambda i=i: i, name=f"s{i}")
        return await hook

    return body


def listed_hooks(t: Tools) -> list[dict[str, Any]]:
    """The session's live webhooks as the webhook listing answers them."""
    return live_webhooks(t.h, "http://127.0.0.1:1", keys_of(t.h.services))


def page_record(pages: int = 1, created_at: float = 100.0) -> TaskRecord:
    """A pending record of task ``t-1`` in session ``s1`` that has sealed ``pages`` pages."""
    return TaskRecord(
        id="t-1",
        session_id="s1",
        kind="k",
        version=1,
        state=Pending(checkpoint="p"),
        created_at=created_at,
        memo_pages=pages,
    )
