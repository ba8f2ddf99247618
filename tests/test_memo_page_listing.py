"""A worker that holds none of a task's sealed memo pages (its first invocation in a process,
or after the cache dropped them) reads the committed pages it lacks in ONE listing of the
task's page prefix, not one read per page; a page the listing returns past the count the
adopted record gives (a later commit's) is neither used nor cached."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from kit import ANSWER, run
from memo_page_kit import PageReads, go_cold, hooked, listed_hooks, page_record, parked

from bide import SQLiteStore
from bide.engine import memo_pages
from bide.engine.memo_pages import MISSING, PageCache, SealedCache
from bide.engine.store.base import Doc


def test_a_cold_replay_of_a_long_body_reads_its_pages_in_one_listing(monkeypatch):
    stamps = itertools.count()
    first_run: list[str] = []

    async def body(args, ctx):
        # Each step's value differs on every call: a replay returns it only from its memo.
        got = [await ctx.step(lambda i=i: f"{i}-{next(stamps)}", name=f"s{i}") for i in range(300)]
        if not first_run:
            first_run.extend(got)
        await ctx.wait_for(ANSWER, "go")
        return ",".join(got)

    store = PageReads(SQLiteStore())

    async def go():
        t, call, pages = await parked(body, store=store, min_pages=8)
        await go_cold(t, monkeypatch)
        store.clear()
        assert await t.h.signal(call, ANSWER, "go", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).text == ",".join(first_run)
        assert store.listings == [(None, pages)] and not store.gets, (store.listings, store.gets)
        assert len(memo_pages.PAGES) == pages  # every committed page cached, once

    run(go())


class Pages:
    """A session's documents, listed as a store lists them (key order, after
    ``start_after``, at most ``limit``), counting requests."""

    def __init__(self, numbers: list[int]) -> None:
        self.docs = {
            memo_pages.page_key("t-1", n): {"task": "t-1", "page": n, "memos": {f"m{n}": n}}
            for n in numbers
        }
        self.listings: list[tuple[str | None, int | None]] = []
        self.gets: list[str] = []

    def get_doc(self, key: str) -> Any:
        self.gets.append(key)
        return self.docs.get(key)

    def list_docs(self, prefix: str, *, start_after=None, limit=None) -> list[Doc]:
        self.listings.append((start_after, limit))
        keys = sorted(k for k in self.docs if k.startswith(prefix))
        keys = [k for k in keys if start_after is None or k > start_after]
        return [Doc(k, self.docs[k]) for k in keys[:limit]]


def test_a_listed_page_past_the_adopted_count_is_not_used_or_cached():
    # Pages 0 and 2 are in the store, page 1 is not (a store lost it): listing the first two
    # committed pages returns 0 and 2, and 2 is a later commit's as far as this record goes.
    cache = PageCache(max_pages=10, max_bytes=10**6)
    store = Pages([0, 2])
    sealed = SealedCache(store.get_doc, (1, "s1"), cache, list_docs=store.list_docs)
    with pytest.raises(LookupError, match="sealed memo page 1 of task 't-1' is missing"):
        sealed.among(page_record(3), 2, "m2")  # a draft sealed page 2; 2 pages are committed
    assert store.listings == [(None, 2)]
    assert store.gets == [memo_pages.page_key("t-1", 1)]  # the one the listing lacked
    assert [key[-1] for key in cache.held()] == [0]  # type: ignore[index]


def test_a_page_sealed_by_a_later_commit_stays_unread_until_a_record_counts_it():
    cache = PageCache(max_pages=10, max_bytes=10**6)
    store = Pages([0, 1, 2])
    sealed = SealedCache(store.get_doc, (1, "s1"), cache, list_docs=store.list_docs)
    assert sealed.find(page_record(2), "m2") is MISSING  # the adopted record counts two pages
    assert [key[-1] for key in cache.held()] == [0, 1]  # type: ignore[index]
    assert sealed.find(page_record(3), "m2") == 2  # a later record counts page 2: read then
    assert store.listings == [(None, 2), (memo_pages.page_key("t-1", 1), 1)]
    assert not store.gets


def test_only_the_pages_the_cache_lacks_are_listed():
    cache = PageCache(max_pages=10, max_bytes=10**6)
    store = Pages([0, 1, 2, 3, 4])
    warm = SealedCache(store.get_doc, (1, "s1"), cache, list_docs=store.list_docs)
    assert warm.find(page_record(2), "m1") == 1  # caches pages 0 and 1
    store.listings.clear()
    cold = SealedCache(store.get_doc, (1, "s1"), cache, list_docs=store.list_docs)
    assert cold.every(page_record(5)) == {f"m{n}": n for n in range(5)}
    assert store.listings == [(memo_pages.page_key("t-1", 1), 3)] and not store.gets


def test_a_cold_webhook_listing_reads_the_sealed_pages_in_one_listing(monkeypatch):
    store = PageReads(SQLiteStore())

    async def go():
        t, _, pages = await parked(
            hooked(3 * memo_pages.PAGE_MEMOS), store=store, name="hooked", min_pages=3
        )
        await go_cold(t, monkeypatch)
        store.clear()
        assert [h["name"] for h in listed_hooks(t)] == ["callback"]
        assert store.listings == [(None, pages)] and not store.gets, (store.listings, store.gets)

    run(go())
