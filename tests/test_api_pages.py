"""The sessions API serves a long session by page: ``GET /sessions/{id}`` is a bounded summary,
``/transcript``, ``/tasks`` and ``/submissions`` continue it by opaque cursor, every response
stays under its bound, and cursors are checked. On the SQLite store and on DynamoDB (moto)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("aws_fixtures", "handler_fixtures", "page_kit")
from handler_fixtures import (  # noqa: E402
    PRINCIPAL,
    Bench,
    aws_fixture,
    make_bench,
)
from page_kit import (  # noqa: E402
    PAGE_RESPONSE_BYTES,
    call,
    local_deps,
    new_session,
    read_pages,
    sqlite_deps,
)

from bide import SQLiteStore  # noqa: E402
from bide.agent.conversation import entry_key  # noqa: E402
from bide.aws import offload  # noqa: E402
from bide.engine.harness import Harness  # noqa: E402
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc  # noqa: E402
from bide.service.deps import Deps  # noqa: E402
from bide.service.pages import MAX_PAGE_BYTES, MAX_PAGE_LIMIT  # noqa: E402
from bide.service.sessions import create_session  # noqa: E402

__all__ = ["aws_fixture"]

ENTRIES = 5_000
BIG = 300 * 1024  # a large entry: a page holds only a few of these
HUGE = MAX_PAGE_BYTES + 10  # larger than a whole page: served as a stub


@pytest.fixture(params=["sqlite", "dynamodb"])
def deps(request: pytest.FixtureRequest) -> Iterator[Deps]:
    if request.param == "sqlite":
        with sqlite_deps() as made:
            yield made
    else:
        bench = make_bench(request.getfixturevalue("aws"))
        BENCHES[id(bench.deps)] = bench
        yield bench.deps
        BENCHES.pop(id(bench.deps))


#: The moto bench behind a DynamoDB-backed Deps (to write test data in bulk).
BENCHES: dict[int, Bench] = {}


def entry(n: int) -> dict[str, Any]:
    text = f"entry {n}"
    if n % 100 == 50:
        text += " " + "x" * BIG
    if n == 2_345:
        text += " " + "y" * HUGE
    return {"type": "user", "text": text, "n": n}


def append_entries(deps: Deps, sid: str, first: int, last: int) -> None:
    """Entries ``first..last`` written straight to the store (as the agent writes them: one
    document each), the conversation head's count kept in step."""
    store = deps.store
    head = store.get_doc(sid, "conv/main")
    assert head is not None
    numbers = list(range(first, last + 1))
    bench = BENCHES.get(id(deps))
    if bench is not None and len(numbers) > MAX_COMMIT_ITEMS:
        # moto takes seconds per transaction of 99 items: write the documents' items as the
        # store lays them out (S3 offload included) in batches, then count them in one commit.
        docs = [Doc(entry_key("main", n), entry(n)) for n in numbers]
        bulk_put(bench, sid, docs)
        store.commit(sid, store.head(sid), [], [Doc("conv/main", {**head.body, "entries": last})])
        return
    step = MAX_COMMIT_ITEMS - 1
    for start in range(0, len(numbers), step):
        chunk = numbers[start : start + step]
        docs = [Doc(entry_key("main", n), entry(n)) for n in chunk]
        counted = Doc("conv/main", {**head.body, "entries": chunk[-1]})
        store.commit(sid, store.head(sid), [], [*docs, counted])


def bulk_put(bench: Bench, sid: str, docs: list[Doc]) -> None:
    store = bench.store
    found = offload.prepare(
        sid, [], docs, offload_threshold=store.offload_threshold, bucket=store.bucket
    )
    for prepared in found:
        if prepared.offload:
            store._offload.put(prepared)
    seq = store.head(sid)
    items = [offload.to_item(sid, p, seq, store.bucket) for p in found]
    for start in range(0, len(items), 25):  # BatchWriteItem takes 25 puts
        puts = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        assert not bench.ddb.batch_write_item(RequestItems={bench.table: puts})["UnprocessedItems"]


def numbers(items: list[dict[str, Any]]) -> list[Any]:
    return [item.get("n", "omitted" if item.get("omitted") else None) for item in items]


def test_a_long_transcript_is_served_in_bounded_pages_each_entry_once_in_order(
    deps: Deps,
) -> None:
    sid = new_session(deps)
    append_entries(deps, sid, 1, ENTRIES)
    status, summary, size = call(deps, "GET", f"/sessions/{sid}")
    assert status == 200 and size <= 4 * MAX_PAGE_BYTES
    assert summary["entries_total"] == ENTRIES and summary["entries_more"] is True
    assert numbers(summary["entries"]) == list(range(1, len(summary["entries"]) + 1))

    # From the summary's cursor to the end, at the largest page size.
    rest, last = read_pages(
        deps, f"/sessions/{sid}/transcript", summary["entries_next"], limit=MAX_PAGE_LIMIT
    )
    served = summary["entries"] + rest
    expected: list[Any] = list(range(1, ENTRIES + 1))
    expected[2_345 - 1] = "omitted"  # larger than a page: a stub stands in its place
    assert numbers(served) == expected
    stub = served[2_345 - 1]
    assert stub["bytes"] > MAX_PAGE_BYTES and "page bound" in stub["reason"]
    assert all(item["text"] == entry(item["n"])["text"] for item in served if "n" in item)

    # The cursor after the last page is stable: entries added later come after it.
    append_entries(deps, sid, ENTRIES + 1, ENTRIES + 3)
    later, _ = read_pages(deps, f"/sessions/{sid}/transcript", last)
    assert numbers(later) == [ENTRIES + 1, ENTRIES + 2, ENTRIES + 3]


def test_pages_stop_at_the_byte_bound_and_the_tail_is_read_by_entry_number(deps: Deps) -> None:
    sid = new_session(deps)
    append_entries(deps, sid, 1, 1_600)
    status, page, size = call(
        deps,
        "GET",
        f"/sessions/{sid}/transcript",
        query={"from_entry": "1000", "limit": str(MAX_PAGE_LIMIT)},
    )
    assert status == 200 and size <= PAGE_RESPONSE_BYTES
    # Every hundredth entry is 300 KiB: the page holds fewer than the limit, says more exist.
    assert page["more"] is True and numbers(page["items"])[0] == 1_000
    assert len(page["items"]) < MAX_PAGE_LIMIT
    status, tail, _ = call(deps, "GET", f"/sessions/{sid}/transcript", query={"from_entry": "1595"})
    assert numbers(tail["items"]) == [1_595, 1_596, 1_597, 1_598, 1_599, 1_600]
    assert tail["more"] is False


def test_a_session_growing_between_pages_is_still_read_once_in_order(deps: Deps) -> None:
    sid = new_session(deps)
    append_entries(deps, sid, 1, 30)
    status, first, _ = call(deps, "GET", f"/sessions/{sid}/transcript", query={"limit": "20"})
    assert status == 200 and numbers(first["items"]) == list(range(1, 21))
    append_entries(deps, sid, 31, 45)  # the session grows between two pages
    rest, _ = read_pages(deps, f"/sessions/{sid}/transcript", first["next"], limit=20)
    assert numbers(first["items"] + rest) == list(range(1, 46))


def test_live_tasks_and_submissions_are_served_by_page(deps: Deps) -> None:
    sid = new_session(deps)
    kind = next(k for k in deps.app.tasks if k.name == "test.napper")

    async def start_tasks() -> list[str]:
        harness = Harness(deps.store, sid, deps.app.task_kinds(), clock=deps.clock, ids=deps.ids)
        await harness.attach()
        made = []
        for _ in range(7):
            made.append(await harness.create_task(kind, {"rounds": [{"keys": ["k"]}]}))
            deps.clock.advance(1)  # type: ignore[attr-defined]
        return made

    created = asyncio.run(start_tasks())
    _, summary, _ = call(deps, "GET", f"/sessions/{sid}")
    assert summary["tasks_total"] == 7 and [t["id"] for t in summary["tasks"]] == created
    tasks, _ = read_pages(deps, f"/sessions/{sid}/tasks", limit=3)
    assert [t["id"] for t in tasks] == created

    for n in range(5):
        body = {"content": f"hello {n}", "request_id": f"r-{n}"}
        assert call(deps, "POST", f"/sessions/{sid}/inputs", body)[0] == 202
    submissions, _ = read_pages(deps, f"/sessions/{sid}/submissions", limit=2)
    assert [s["id"] for s in submissions] == [f"r-{n}" for n in range(5)]


def test_a_tampered_or_foreign_cursor_is_a_400_naming_the_field(deps: Deps) -> None:
    sid, other = new_session(deps), new_session(deps)
    for session in (sid, other):
        append_entries(deps, session, 1, 5)
    status, page, _ = call(deps, "GET", f"/sessions/{sid}/transcript", query={"limit": "2"})
    cursor = page["next"]
    assert status == 200 and cursor

    def refused(path: str, query: dict[str, str]) -> str:
        status, body, _ = call(deps, "GET", path, query=query)
        assert status == 400, body
        return str(body["error"])

    tampered = cursor[:5] + ("A" if cursor[5] != "A" else "B") + cursor[6:]
    assert refused(f"/sessions/{sid}/transcript", {"cursor": tampered}).startswith("cursor:")
    assert "cursor:" in refused(f"/sessions/{sid}/transcript", {"cursor": "garbage"})
    # A well-formed cursor whose position was edited (to skip ahead) keeps its old checksum.
    raw, check = cursor.split(".")
    payload = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    payload["a"] = payload["a"].replace("00000002", "00000004")
    edited = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    why = refused(f"/sessions/{sid}/transcript", {"cursor": f"{edited}.{check}"})
    assert why == "cursor: the cursor was altered or truncated"
    assert "another session" in refused(f"/sessions/{other}/transcript", {"cursor": cursor})
    assert "another list" in refused(f"/sessions/{sid}/tasks", {"cursor": cursor})
    assert "another list" in refused("/sessions", {"cursor": cursor})
    both = refused(f"/sessions/{sid}/transcript", {"cursor": cursor, "from_entry": "2"})
    assert both.startswith("from_entry:")
    # Out-of-range page sizes are 422s naming the parameter.
    for limit in ("0", str(MAX_PAGE_LIMIT + 1), "many"):
        status, body, _ = call(deps, "GET", f"/sessions/{sid}/transcript", query={"limit": limit})
        assert status == 422 and body["detail"][0]["loc"] == ["query", "limit"], body
    # Nothing about the session changed: the original cursor still reads on.
    status, page, _ = call(deps, "GET", f"/sessions/{sid}/transcript", query={"cursor": cursor})
    assert status == 200 and numbers(page["items"]) == [3, 4, 5]


def test_get_sessions_lists_the_callers_sessions_newest_first_by_page(deps: Deps) -> None:
    alice, bob = PRINCIPAL, "arn:aws:sts::123456789012:assumed-role/dev/bob"
    mine = []
    for _ in range(7):
        mine.append(new_session(deps, alice))
        deps.clock.advance(1)  # type: ignore[attr-defined]
    theirs = [new_session(deps, bob) for _ in range(2)]
    # An existing session created again is not listed twice.
    assert call(deps, "POST", "/sessions", {"session_id": mine[0]})[0] == 201

    listed, cursor = read_pages(deps, "/sessions", limit=3)
    assert [s["session_id"] for s in listed] == mine[::-1]
    assert all(isinstance(s["created_at"], float | int) for s in listed)
    status, page, _ = call(deps, "GET", "/sessions", principal=bob)
    assert status == 200 and {s["session_id"] for s in page["items"]} == set(theirs)
    # Alice's cursor names Alice: Bob cannot read on with it.
    status, body, _ = call(deps, "GET", "/sessions", query={"cursor": cursor}, principal=bob)
    assert status == 400 and "another session (or caller)" in body["error"]
    # A session created later is read with the last cursor, at the listing's end? No: the
    # listing is newest first, so it shows at the start of a fresh listing.
    deps.clock.advance(1)  # type: ignore[attr-defined]
    newest = new_session(deps, alice)
    status, page, _ = call(deps, "GET", "/sessions", query={"limit": "1"})
    assert [s["session_id"] for s in page["items"]] == [newest]


def test_sessions_made_without_an_owner_are_not_listed(deps: Deps) -> None:
    legacy = asyncio.run(create_session(deps, "s-legacy"))
    status, page, _ = call(deps, "GET", "/sessions")
    assert status == 200 and legacy not in {s["session_id"] for s in page["items"]}
    assert json.dumps(page).count("s-legacy") == 0


class CountingStore(SQLiteStore):
    """Counts the documents its listings return (what a page really read)."""

    read = 0

    def list_docs(self, session_id, prefix, *, start_after=None, limit=None):  # type: ignore[no-untyped-def]
        found = super().list_docs(session_id, prefix, start_after=start_after, limit=limit)
        self.read += len(found)
        return found


def test_a_page_of_large_entries_reads_little_more_than_it_serves() -> None:
    store = CountingStore()
    deps = local_deps(store)
    sid = new_session(deps)
    head = store.get_doc(sid, "conv/main")
    assert head is not None
    big = [Doc(entry_key("main", n), {"n": n, "text": "z" * BIG}) for n in range(1, 201)]
    for start in range(0, 200, 50):
        store.commit(sid, store.head(sid), [], big[start : start + 50])
    store.read = 0
    status, page, _ = call(
        deps, "GET", f"/sessions/{sid}/transcript", query={"limit": str(MAX_PAGE_LIMIT)}
    )
    assert status == 200 and page["more"] and len(page["items"]) == 3  # 1 MiB of 300 KiB
    # Every document read may be an S3 read on DynamoDB: not the 501 the limit allows.
    assert store.read <= 16, store.read
