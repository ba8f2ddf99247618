"""The process's cache of sealed memo pages (``bide.engine.memo_pages.PAGES``): a warm
process replays a long workflow body without reading its pages again and still finds a
changed argument deep in it; the cache keeps at most its bound; pages of two stores, or of
two tasks that share an id (a session id reused after expiry), never stand for each other;
a page sealed by a commit that failed never enters it; and what a body changes in a value it
got from a page does not change the page."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from kit import ANSWER, run
from memo_page_kit import PageReads, hooked, listed_hooks, page_record, parked

from bide import SQLiteStore
from bide.engine import memo_pages
from bide.engine.memo_pages import PageCache, SealedCache
from bide.testing import Crash, FaultyStore


def _cached_pages(store: Any, task_id: str) -> list[Any]:
    """The cached pages of ``task_id`` read from ``store`` (a harness's store object)."""
    scope = memo_pages.store_scope(store)
    return [k for k in memo_pages.PAGES.held() if k[0][0] == scope and k[1] == task_id]  # type: ignore[index]


def _waiter(total: int, version: dict[str, int], changed_at: int):
    """Waits on k0, k1, ... k(total-1), then returns "done"."""

    async def body(args, ctx):
        for i in range(total):
            timeout = 60.0 if version["v"] == 2 and i == changed_at else None
            await ctx.wait_for(ANSWER, f"k{i}", timeout=timeout)
        return "done"

    return body


async def _history(waits: int, version: dict[str, int], changed_at: int, store, total: int):
    """A body that waited on k0..k(waits-1) and is parked on k(waits), on a fresh harness."""
    t, call, _ = await parked(_waiter(total, version, changed_at), store=store, min_pages=0)
    for i in range(waits):
        assert await t.h.signal(call, ANSWER, f"k{i}", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
    assert t.status(call) == "sleeping" and t.h.task(call).memo_pages > 0
    await t.reopen()
    return t, call


def test_a_warm_process_replays_a_long_history_without_reading_its_pages_and_still_checks_it():
    waits, version = 1_000, {"v": 1}
    store = PageReads(SQLiteStore())

    async def go():
        t, call = await _history(waits, version, changed_at=2, store=store, total=waits + 10)
        pages = t.h.task(call).memo_pages
        assert len(_cached_pages(t.h.store, call)) == pages  # read once by the runs that built it
        store.reads.clear()
        # One more round on a fresh harness: the history replays from the cache.
        assert await t.h.signal(call, ANSWER, f"k{waits}", ANSWER.schema(text="v")) == ("delivered")
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping" and not store.reads, store.reads
        # The body changed: the timeout of its third wait. Found from the warm cache.
        await t.reopen()
        version["v"] = 2
        assert await t.h.signal(call, ANSWER, f"k{waits + 1}", ANSWER.schema(text="v")) == (
            "delivered"
        )
        await t.h.run_until_parked()
        assert not store.reads, store.reads
        result = t.result(call)
        assert result.is_error and "non-determinism at operation 3" in result.text
        assert result.details["nondeterminism"]["reason"] == "arguments"

    run(go())


def test_a_cache_bounded_at_k_pages_keeps_at_most_k(monkeypatch):
    cache = PageCache(max_pages=3, max_bytes=10**6)
    for n in range(5):
        cache.put(n, {"m": n})
        assert len(cache) <= 3
    assert cache.held() == [2, 3, 4]
    assert cache.get(2) == {"m": 2}  # used: the least recently used is now 3
    cache.put(5, {"m": 5})
    assert cache.held() == [4, 2, 5] and cache.get(3) is None
    by_bytes = PageCache(max_pages=100, max_bytes=40)
    for n in range(10):
        by_bytes.put(n, {"m": "x" * 10})  # 16 bytes of JSON each
        assert by_bytes.bytes <= 40
    assert len(by_bytes) == 2
    by_bytes.put("big", {"m": "x" * 100})  # more than the whole bound: not kept
    assert by_bytes.get("big") is None and len(by_bytes) == 2
    with pytest.raises(ValueError, match="bounds must be >= 0"):
        PageCache(max_pages=-1, max_bytes=1)

    # In use: a long body replays right on a cache of 2 pages, which holds 2.
    small = PageCache(max_pages=2, max_bytes=10**6)
    monkeypatch.setattr(memo_pages, "PAGES", small)
    version = {"v": 1}

    async def go():
        t, call = await _history(150, version, changed_at=-1, store=None, total=151)
        assert t.h.task(call).memo_pages > 2
        assert await t.h.signal(call, ANSWER, "k150", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).text == "done"

    run(go())
    assert len(small) == 2


def _stepper(label: str):
    async def body(args, ctx):
        got = [await ctx.step(lambda i=i: f"{label}{i}", name=f"s{i}") for i in range(80)]
        await ctx.wait_for(ANSWER, "go")
        return ",".join(got[:3])

    return body


def test_two_stores_with_the_same_ids_never_share_pages():
    # Same session id, task ids (sequential) and created times (manual clock): only the
    # store tells their pages apart.
    async def one(label: str) -> str:
        t, call, _ = await parked(_stepper(label))
        await t.reopen()
        assert await t.h.signal(call, ANSWER, "go", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(one("a")) == "a0,a1,a2"
    assert run(one("b")) == "b0,b1,b2"


def test_a_task_id_used_again_after_its_session_expired_never_gets_the_old_pages():
    # A session id may start afresh once its session expired (bide.aws.retention); a keyed
    # task then has the same id again, created later.
    cache = PageCache(max_pages=10, max_bytes=10**6)
    first, later = page_record(created_at=100.0), page_record(created_at=200.0)
    bodies = {"old": {"memos": {"m": "old"}}, "new": {"memos": {"m": "new"}}}
    old = SealedCache(lambda key: bodies["old"], scope=(1, "s1"), pages=cache)
    assert old.find(first, "m") == "old"
    new = SealedCache(lambda key: bodies["new"], scope=(1, "s1"), pages=cache)
    assert new.find(later, "m") == "new"
    again = SealedCache(lambda key: None, scope=(1, "s1"), pages=cache)  # served by the cache
    assert again.find(first, "m") == "old"
    assert again.find(later, "m") == "old"  # this invocation read page 0 already
    assert SealedCache(lambda key: None, scope=(1, "s1"), pages=cache).find(later, "m") == ("new")


def test_a_page_sealed_by_a_commit_that_failed_never_enters_the_cache():
    def seals(writes):
        return any(r.memo_pages == 1 for r in writes)

    store = FaultyStore(SQLiteStore(), match=seals, when="before")
    version = {"v": 1}

    async def go():
        t, call, _ = await parked(_waiter(60, version, -1), store=store, min_pages=0)
        with contextlib.suppress(Crash):
            for i in range(60):
                await t.h.signal(call, ANSWER, f"k{i}", ANSWER.schema(text="v"))
                await t.h.run_until_parked()
        assert store.crashed
        assert not _cached_pages(t.h.store, call)  # the draft's page was never cached
        store.disarm()
        await t.reopen()
        await t.h.run_until_parked()
        for i in range(61):
            await t.h.signal(call, ANSWER, f"k{i}", ANSWER.schema(text="v"))
            await t.h.run_until_parked()
        assert t.result(call).text == "done"
        assert _cached_pages(t.h.store, call)

    run(go())


def test_what_a_body_changes_in_a_value_from_a_page_does_not_change_the_page():
    seen: list[Any] = []

    async def body(args, ctx):
        data = await ctx.step(lambda: {"items": [1]}, name="data")
        seen.append(list(data["items"]))
        data["items"].append(99)  # the body's own copy
        for i in range(40):  # seals the step's memos into a page
            await ctx.step(lambda i=i: i, name=f"s{i}")
        for key in ("a", "b"):
            await ctx.wait_for(ANSWER, key)
        return "done"

    async def go():
        t, call, _ = await parked(body)
        for key in ("a", "b"):
            await t.reopen()
            assert await t.h.signal(call, ANSWER, key, ANSWER.schema(text="v")) == "delivered"
            await t.h.run_until_parked()
        assert t.result(call).text == "done"
        assert _cached_pages(t.h.store, call)

    run(go())
    assert seen == [[1], [1], [1]]  # the first run, then two replays from the cache


def test_a_page_is_cached_at_the_size_its_seal_recorded_and_an_older_one_is_measured():
    cache = PageCache(max_pages=10, max_bytes=10**6)
    bodies = {
        memo_pages.page_key("t-1", 0): {"memos": {"a": "x" * 50}, "bytes": 7},
        memo_pages.page_key("t-1", 1): {"memos": {"b": 1}},  # sealed before sizes were kept
        memo_pages.page_key("t-1", 2): {"memos": {"c": 2}, "bytes": True},  # not a count
    }
    sealed = SealedCache(bodies.get, scope=(1, "s1"), pages=cache)
    record = page_record(3)
    assert sealed.find(record, "c") == 2
    assert cache.bytes == 7 + len('{"b":1}') + len('{"c":2}')


def test_the_webhook_listing_reads_sealed_pages_through_the_process_cache():
    store = PageReads(SQLiteStore())

    async def go():
        t, _, _ = await parked(hooked(memo_pages.PAGE_MEMOS), store=store, name="hooked")
        listed = []
        for _ in range(2):
            await t.reopen()  # a new harness: its own document cache is empty
            store.clear()
            listed.append(listed_hooks(t))
            assert not store.reads, store.reads  # the run cached its pages as it sealed them
        return listed

    first, second = run(go())
    assert [h["name"] for h in first] == ["callback"] and first == second
