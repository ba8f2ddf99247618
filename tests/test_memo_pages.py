"""Memos in sealed pages (bide.engine.memo_pages): a long workflow body's record stays
bounded, each page is written once, a fresh harness replays from the pages, a crash around
the sealing commit loses and doubles nothing, and a sealed memo is never overwritten."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit import HOUR, Kit, run
from test_workflow_support import Note, Tools

from bide import SQLiteStore, define_task
from bide.engine import memo_pages
from bide.engine.state import Completed, Terminal
from bide.testing import Crash, FaultyStore
from bide.testing import StoreWrapper as _Wrapper
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool


class Counting(_Wrapper):
    """Counts the writes of every document key and keeps each commit's record sizes."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.doc_writes: Counter[str] = Counter()
        self.record_bytes: dict[str, int] = {}

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        for doc in docs:
            self.doc_writes[doc.key] += 1
        for record in writes:
            size = len(record.to_json())
            self.record_bytes[record.id] = max(self.record_bytes.get(record.id, 0), size)
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)


def long_body(n: int, runs: Counter[str]):
    """A body of ``n`` steps (each with a small payload), then a sleep, then a last step."""

    async def body(args, ctx):
        total = 0
        for i in range(n):

            def work(i=i):
                runs[f"s{i}"] += 1
                return {"i": i, "pad": "x" * 40}

            total += (await ctx.step(work, name=f"s{i}"))["i"]
        await ctx.sleep(hours=1)
        last = await ctx.step(lambda: runs.update(["last"]) or "ok", name="last")
        return f"{total}/{last}"

    return body


def _run_long(n: int):
    runs: Counter[str] = Counter()
    store = Counting(SQLiteStore())

    async def go():
        t = Tools(define_workflow_tool("long", "", Note, long_body(n, runs)), store=store)
        await t.start()
        call = await t.call("long", {})
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"
        await t.reopen()  # a fresh harness: no page in any cache
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        return t, call

    t, call = run(go())
    return t, call, store, runs


def test_a_long_body_keeps_a_bounded_record_and_writes_each_page_once():
    bounds = []
    for n in (150, 300):
        t, call, store, runs = _run_long(n)
        assert t.result(call).text == f"{sum(range(n))}/ok"
        # Every step ran once: the resume on a fresh harness read them from the pages.
        assert all(runs[f"s{i}"] == 1 for i in range(n)) and runs["last"] == 1
        body_task = max(store.record_bytes, key=store.record_bytes.__getitem__)
        bounds.append(store.record_bytes[body_task])
        pages = {k: c for k, c in store.doc_writes.items() if k.startswith(memo_pages.PREFIX)}
        assert len(pages) >= (2 * n) // memo_pages.PAGE_MEMOS
        assert set(pages.values()) == {1}, "a sealed page was written more than once"
    # The largest record the body's task ever had does not grow with the history.
    assert bounds[1] < 1.2 * bounds[0] and bounds[1] < 24 * 1024, bounds


def test_a_crash_around_the_sealing_commit_loses_and_doubles_no_operation():
    for when in ("before", "after"):
        runs: Counter[str] = Counter()

        def seals(writes):
            return any(r.memo_pages == 1 for r in writes)

        store = FaultyStore(SQLiteStore(), match=seals, when=when)
        registry = ToolRegistry([define_workflow_tool("long", "", Note, long_body(80, runs))])

        async def go(store=store, registry=registry):
            k = Kit(registry.task, *_kinds(registry), store=store)
            await k.h.open()
            call = await k.h.create_task(registry.task, registry.call("long", {}), key="c")
            with contextlib.suppress(Crash):
                await k.h.run_until_parked()
            assert store.crashed
            await k.reopen()
            await k.h.run_until_parked()
            k.clock.advance(HOUR)
            await k.h.run_until_parked()
            return k.h.outcome(call).result["content"][0]["text"]

        assert run(go()) == f"{sum(range(80))}/ok", when
        # The step whose record the crash cut off ran again ("before": nothing was written,
        # at least once); "after": its record and the page were written, nothing ran twice.
        again = [name for name, count in runs.items() if count > 1]
        assert len(again) <= (1 if when == "before" else 0), (when, again)
        assert all(runs[f"s{i}"] >= 1 for i in range(80))


def _kinds(registry):
    from bide.workflow import workflow_kinds

    return workflow_kinds(registry)


def test_a_sealed_memo_is_never_overwritten_and_a_fresh_harness_finds_it():
    n = 3 * memo_pages.PAGE_MEMOS
    seen: dict[str, object] = {}

    async def fill(task, rt):
        for i in range(n):
            await rt.memo(f"m.{i}", i)
        seen["again"] = await rt.memo("m.0", "second writer")  # sealed by now

        def in_commit(tx):
            seen["in_tx"] = tx.memo("m.1", "second writer")

        await rt.commit(in_commit)
        seen["absent"] = await rt.memo("m.unknown")
        await rt.commit(Terminal(outcome=Completed(result=None)))

    kind = define_task("test.memos", 1, lambda _: "fill", {"fill": fill})
    store = Counting(SQLiteStore())

    async def go():
        k = Kit(kind, store=store)
        await k.h.open()
        task = await k.h.create_task(kind, {})
        await k.h.run_until_parked()
        assert k.h.outcome(task) is not None

    run(go())
    assert seen == {"again": 0, "in_tx": 1, "absent": None}
    pages = [k for k in store.doc_writes if k.startswith(memo_pages.PREFIX)]
    assert len(pages) >= 2 and set(store.doc_writes[k] for k in pages) == {1}


def test_a_fresh_harness_reads_sealed_memos_first_writer_wins():
    n = 2 * memo_pages.PAGE_MEMOS + 5
    seen: dict[str, object] = {}

    async def fill(task, rt):
        if await rt.memo("done") is None:
            for i in range(n):
                await rt.memo(f"m.{i}", i)
            await rt.memo("done", True)
            raise Crash("the process died after recording")
        seen["values"] = [await rt.memo(f"m.{i}", -1) for i in range(n)]
        await rt.commit(Terminal(outcome=Completed(result=None)))

    kind = define_task("test.memos2", 1, lambda _: "fill", {"fill": fill})

    async def go():
        k = Kit(kind)
        await k.h.open()
        task = await k.h.create_task(kind, {})
        with contextlib.suppress(Crash):
            await k.h.run_until_parked()
        assert k.h.task(task).memo_pages >= 2
        await k.reopen()
        await k.h.run_until_parked()
        assert k.h.outcome(task) is not None

    run(go())
    assert seen["values"] == list(range(n))


def test_a_workflow_webhook_whose_record_was_sealed_is_still_listed():
    """The session's webhook listing reads sealed memos too (bide.service.hooks)."""
    from bide.service.hooks import live_webhooks
    from bide.tools.webhook_keys import keys_of

    async def body(args, ctx):
        hook = await ctx.webhook(name="callback")  # operation 1: sealed by the steps after
        for i in range(memo_pages.PAGE_MEMOS):
            await ctx.step(lambda i=i: i, name=f"s{i}")
        return await hook

    async def go():
        t = Tools(define_workflow_tool("hooked", "", Note, body))
        await t.start()
        call = await t.call("hooked", {})
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping" and t.h.task(call).memo_pages >= 1
        return live_webhooks(t.h, "http://127.0.0.1:1", keys_of(t.h.services))

    hooks = run(go())
    assert [h["name"] for h in hooks] == ["callback"], hooks


def _exact_page(memos: dict[str, object], most: int, limit: int) -> dict[str, object] | None:
    """The rule a seal follows, measured memo by memo (its value's JSON and its name): no
    page while the memos are at most ``most`` and their sizes sum to at most ``limit``;
    else the oldest memos, up to a page."""
    import json

    sizes = {n: len(json.dumps(v, separators=(",", ":"))) + len(n) for n, v in memos.items()}
    if len(sizes) <= most and sum(sizes.values()) <= limit:
        return None
    page: dict[str, object] = {}
    used = 0
    for name, value in memos.items():
        if page and (len(page) >= most or used + sizes[name] > limit):
            break
        page[name] = value
        used += sizes[name]
    return page


def _sealable(memos: dict[str, object]):
    from bide.engine.records import TaskRecord
    from bide.engine.state import Pending

    state = Pending(checkpoint="p")
    return TaskRecord(id="t-1", session_id="s", kind="k", version=1, state=state,
                      created_at=0.0, memos=memos)  # fmt: skip


def test_a_seal_follows_the_memo_by_memo_rule_at_the_page_bound():
    # Eight memos of 4,092 characters: their sizes sum to the bound exactly (no page),
    # while the JSON of all of them at once is 33 bytes over it.
    memos: dict[str, object] = {f"m{i}": "x" * 4_092 for i in range(8)}
    assert memo_pages.seal(_sealable(memos)) is None
    assert _exact_page(memos, memo_pages.PAGE_MEMOS, memo_pages.PAGE_BYTES) is None
    memos["m7"] = "x" * 4_093  # one byte over: the seven oldest make the page
    sealed = memo_pages.seal(_sealable(memos))
    assert sealed is not None
    record, key, body = sealed
    assert list(body["memos"]) == [f"m{i}" for i in range(7)] and list(record.memos) == ["m7"]
    assert body["bytes"] == 7 * (4_092 + 2 + 2) and key == memo_pages.page_key("t-1", 0)


@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=6),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3)
                ),
                max_leaves=6,
            ),
        ),
        max_size=9,
    )
)
def test_a_seal_takes_the_page_the_memo_by_memo_rule_takes(pairs):
    memos = dict(pairs)
    with pytest.MonkeyPatch.context() as patch:  # small pages: the bound is often near
        patch.setattr(memo_pages, "PAGE_MEMOS", 4)
        patch.setattr(memo_pages, "PAGE_BYTES", 60)
        expected = _exact_page(memos, 4, 60)
        sealed = memo_pages.seal(_sealable(memos))
    if expected is None:
        assert sealed is None
        return
    assert sealed is not None
    record, _, body = sealed
    assert body["memos"] == expected and list(body["memos"]) == list(expected)
    assert record.memos == {n: v for n, v in memos.items() if n not in expected}
