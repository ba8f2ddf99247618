"""A signal's wake carries its task's sealed memo page count, and the worker's targeted read
fetches the pages its process's cache lacks with the task (``bide.engine.partial``): a cold
worker replays a long workflow body with no listing of its pages.

On moto, through the bench's stack (``bench/bench_aws_requests.py``: the signal function's
``deliver``, SQS, the worker's entry point), counting the requests Bide makes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from bench_aws_requests import APP, REPLY, Looper, Napper, NoArgs, Stack, build_stack, fake_aws

from bide import Harness, RandomIds, SQLiteStore, TaskRecord
from bide.app import App
from bide.aws.dynamodb import DynamoDBStore
from bide.aws.sqs import wake_body, wake_focus, wake_pages, whole_session
from bide.engine import memo_pages
from bide.engine.state import Pending, Terminal
from bide.engine.store.base import Doc
from bide.service import signals
from bide.tools import ToolRegistry
from bide.workflow import define_workflow_tool

# --- the wake's page count --------------------------------------------------------------------


def test_a_wake_carries_the_page_count_and_created_at_round_trip() -> None:
    body = wake_body("s", "signal", task="t", owner="o", pages=(3, 12.5))
    assert wake_pages(body) == (3, 12.5)
    assert wake_focus(body) == ("t", "o")  # the focus reads as ever
    assert wake_pages(wake_body("s", "signal", task="t", pages=(0, 7))) == (0, 7.0)
    # Absent: no count given, a wake of the whole session, a body from before wakes had one.
    assert wake_pages(wake_body("s", "signal", task="t", owner="o")) is None
    assert wake_pages(wake_body("s", "alarm")) is None
    assert wake_pages(json.dumps({"session_id": "s", "reason": "signal", "task": "t"})) is None
    # Only a wake naming a task carries them.
    assert "pages" not in json.loads(wake_body("s", "api", pages=(3, 1.0)))
    # A redriven wake runs the whole session: its task's pages go with the task.
    assert json.loads(whole_session(body)) == {"session_id": "s", "reason": "signal"}


@pytest.mark.parametrize(
    "pages, created_at",
    [
        ("3", 1.0),
        (3.0, 1.0),
        (True, 1.0),
        (-1, 1.0),
        (None, 1.0),
        ([3], 1.0),
        (3, "1.0"),
        (3, None),
        (3, True),
        (3, [1.0]),
    ],
)
def test_a_malformed_page_count_is_taken_as_absent(pages: Any, created_at: Any) -> None:
    data = {"session_id": "s", "reason": "signal", "task": "t", "owner": "o"}
    body = json.dumps({**data, "pages": pages, "created_at": created_at})
    assert wake_pages(body) is None
    assert wake_focus(body) == ("t", "o")  # the wake itself still runs the task
    assert wake_pages("not json") is None
    assert wake_pages(json.dumps([1, 2])) is None
    assert wake_pages(json.dumps({"pages": 3, "created_at": 1.0})) is None  # no task
    assert wake_pages('{"task": "t", "pages": 3, "created_at": NaN}') is None


# --- DynamoDB refuses a read too large: the documents are shed ----------------------------------


class Refusing:
    """A DynamoDB client that refuses a ``TransactGetItems`` of more than ``limit`` items,
    as DynamoDB "rejects the entire TransactGetItems request if ... the aggregate size of the
    items in the transaction exceeded 4 MB"
    (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html);
    the item count stands in for the size here. Everything else passes through."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.limit, self.refused = inner, limit, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transact_get_items(self, **kw: Any) -> Any:
        if len(kw["TransactItems"]) > self.limit:
            self.refused += 1
            error = {"Code": "ValidationException", "Message": "Transaction is too large"}
            raise ClientError({"Error": error}, "TransactGetItems")  # type: ignore[arg-type]
        return self.inner.transact_get_items(**kw)


def _pending() -> Pending:
    return Pending(checkpoint={"phase": "a"})


@pytest.fixture
def aws() -> Iterator[Stack]:
    with fake_aws():
        yield build_stack()


def test_a_refused_read_with_documents_is_made_again_without_them(aws: Stack) -> None:
    store = aws.deps.store.inner  # the ObservedStore's
    assert isinstance(store, DynamoDBStore)
    record = TaskRecord(
        id="a", session_id="s1", kind="k", version=1, state=_pending(), created_at=1.0
    )
    store.commit("s1", 0, [record], [Doc("p/0", {"memos": {}}), Doc("p/1", 1)])
    refusing = Refusing(store._ddb, limit=3)
    store._ddb = refusing
    # Head, task and two documents: 4 items, refused; read again as head and task alone.
    assert store.tasks_at_head("s1", ["a"], ["p/0", "p/1"]) == (1, {"a": record}, {})
    assert refusing.refused == 1
    found = store.tasks_at_head("s1", ["a"], ["p/0"])[2]  # 3 items: read
    assert found == {"p/0": Doc("p/0", {"memos": {}})}
    # A reader deciding on a document's absence (an owner's) is never answered "absent".
    refusing.limit = 2
    with pytest.raises(ClientError):
        store.task_and_doc_at_head("s1", "a", "p/1")
    # Nor is a read without documents retried: the refusal is not about them.
    refusing.limit = 1
    with pytest.raises(ClientError):
        store.tasks_at_head("s1", ["a"], [])


# --- a cold worker replays a long workflow body ------------------------------------------------

WAITS = 70  # two memos a wait, 64 memos a page: the body seals two pages before its end


async def collect(args: Any, ctx: Any) -> Any:
    """Wait for k0 .. k69 and return every reply's text: the early ones come from sealed
    pages when the body replays."""
    texts = []
    for n in range(WAITS):
        reply = await ctx.wait_for(REPLY, f"k{n}")
        texts.append(reply.text)
    return {"texts": texts}


TOOLS = ToolRegistry(
    [*APP.tools.tools, define_workflow_tool("collect", "Collect replies", NoArgs, collect)]
)
PAGED_APP = App(tasks=[Looper, Napper], signals=[REPLY], tools=TOOLS)
# The worker's requests for a signal -> next wait of a workflow body
# (tests/test_request_counts_workflow.py says what each one is for).
PINNED = Counter(
    {"dynamodb:TransactGetItems": 2, "dynamodb:TransactWriteItems": 2, "sqs:SendMessage": 1}
)


async def parked_body(stack: Stack, session_id: str, waits: int) -> str:
    """The ``collect`` body after ``waits`` replies (built on SQLite, uncounted, then its
    record and sealed pages committed to the stack's store), run once whole by the worker
    (a worker's first run of a session is whole: ``bide.service.whole_runs``)."""
    stack.deps = replace(stack.deps, app=PAGED_APP)
    sqlite = SQLiteStore()
    h = Harness(sqlite, session_id, PAGED_APP.task_kinds(), clock=stack.clock, ids=RandomIds())
    await h.attach()
    task_id = await h.create_task(TOOLS.task, TOOLS.call("collect", {}))
    await h.run_until_parked()
    for n in range(waits):
        await h.deliver(task_id, REPLY, f"k{n}", {"text": f"v{n}"})
        await h.run_until_parked()
    record = sqlite.get_task(session_id, task_id)
    assert record is not None and record.state.status == "sleeping", record
    pages = sqlite.list_docs(session_id, memo_pages.task_prefix(task_id))
    stack.deps.store.commit(session_id, 0, [record], pages)
    sqlite.close()
    stack.deps.queue.wake(session_id, "api")
    await stack.worker()
    return task_id


class Listings:
    """The store's ``list_docs`` calls under a sealed-page prefix, by ``start_after``."""

    def __init__(self, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str | None] = []
        store = stack.deps.store
        real = store.list_docs

        def list_docs(session_id: str, prefix: str, **kw: Any) -> Any:
            if prefix.startswith(memo_pages.PREFIX):
                self.calls.append(kw.get("start_after"))
            return real(session_id, prefix, **kw)

        monkeypatch.setattr(store, "list_docs", list_docs)


def by_bide(stack: Stack, tally: Any) -> Counter[str]:
    return Counter({op: n for (who, op), n in tally.requests.items() if who == "bide" and n})


async def cold_round(stack: Stack, session: str, task_id: str, n: int) -> None:
    """Signal ``k<n>`` (the signal function), then a worker with no sealed page cached."""
    decision = _deliver(stack, session, task_id, n)
    assert decision.result.value == "delivered", decision
    memo_pages.PAGES.clear()  # a worker that never read the task's pages
    await stack.worker()


def _deliver(stack: Stack, session: str, task_id: str, n: int) -> Any:
    return signals.deliver(stack.deps, session, task_id, REPLY.name, f"k{n}", {"text": f"v{n}"})


def texts_of(stack: Stack, session: str, task_id: str) -> Any:
    """The texts the ended ``collect`` body returned (its tool result's one text part)."""
    record = stack.deps.store.get_task(session, task_id)
    assert record is not None and isinstance(record.state, Terminal), record
    result = record.state.outcome.result  # type: ignore[union-attr]
    [part] = result["content"]
    return json.loads(part["text"])["texts"]


def test_a_cold_worker_reads_the_sealed_pages_with_the_task(
    aws: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = asyncio.run(parked_body(aws, "cold", WAITS - 2))
    listed = Listings(aws, monkeypatch)
    record = aws.deps.store.get_task("cold", task_id)
    assert record is not None and record.memo_pages >= 2, record
    # Signal -> next wait: the pinned requests, the pages in the worker's one
    # TransactGetItems (the signal function makes the other), no Query listing them.
    with aws.meter.counting() as tally:
        asyncio.run(cold_round(aws, "cold", task_id, WAITS - 2))
    assert by_bide(aws, tally) == PINNED
    assert listed.calls == []
    # The last reply ends the body: its result holds every reply, the sealed pages' too.
    asyncio.run(cold_round(aws, "cold", task_id, WAITS - 1))
    assert listed.calls == []
    assert texts_of(aws, "cold", task_id) == [f"v{n}" for n in range(WAITS)]


def test_a_stale_page_count_reads_the_missing_pages_as_before(
    aws: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = asyncio.run(parked_body(aws, "stale", WAITS - 1))
    record = aws.deps.store.get_task("stale", task_id)
    assert record is not None and record.memo_pages >= 2, record
    listed = Listings(aws, monkeypatch)
    queue, real_wake = aws.deps.queue, aws.deps.queue.wake

    def stale_wake(session_id: str, reason: str, **focus: Any) -> None:
        count, created = focus["pages"]
        real_wake(session_id, reason, **{**focus, "pages": (count - 1, created)})

    monkeypatch.setattr(queue, "wake", stale_wake)
    asyncio.run(cold_round(aws, "stale", task_id, WAITS - 1))
    # The page the wake did not count is read as before the wake counted: one listing, from
    # after the pages the targeted read brought; the record, never the wake, counts them.
    assert listed.calls == [memo_pages.page_key(task_id, record.memo_pages - 2)]
    assert texts_of(aws, "stale", task_id) == [f"v{n}" for n in range(WAITS)]


# --- which pages the read asks for, and what enters the cache ------------------------------------


def _record(pages: int, created_at: float = 5.0) -> TaskRecord:
    return TaskRecord(
        id="t",
        session_id="s",
        kind="k",
        version=1,
        state=_pending(),
        created_at=created_at,
        memo_pages=pages,
    )


def test_the_read_asks_only_for_pages_the_cache_lacks_up_to_the_bound() -> None:
    cache = memo_pages.PageCache(max_pages=500, max_bytes=10**9)
    scope = (1, "s")
    assert memo_pages.pages_to_read(scope, "t", (3, 5.0), cache) == [
        memo_pages.page_key("t", n) for n in range(3)
    ]
    cache.put((scope, "t", 5.0, 1), {"a": 1})
    # A warm worker holds them: asked for no more; another task's created_at is another task.
    assert memo_pages.pages_to_read(scope, "t", (3, 5.0), cache) == [
        memo_pages.page_key("t", 0),
        memo_pages.page_key("t", 2),
    ]
    assert len(memo_pages.pages_to_read(scope, "t", (3, 6.0), cache)) == 3
    assert memo_pages.pages_to_read(None, "t", (3, 5.0), cache) == []  # nothing to share into
    assert memo_pages.pages_to_read(scope, "t", None, cache) == []
    many = memo_pages.pages_to_read(scope, "t", (500, 5.0), cache)
    assert len(many) == memo_pages.AT_HEAD_PAGES and many[0] == memo_pages.page_key("t", 0)


def test_only_pages_the_record_counts_enter_the_cache() -> None:
    cache = memo_pages.PageCache(max_pages=500, max_bytes=10**9)
    scope = (1, "s")
    docs = {
        memo_pages.page_key("t", 0): Doc("x", {"memos": {"a": 1}, "bytes": 7}),
        memo_pages.page_key("t", 1): Doc("x", {"memos": "not memos"}),  # malformed: left out
        memo_pages.page_key("t", 2): Doc("x", {"memos": {"c": 3}}),  # not counted by the record
    }
    assert memo_pages.keep_read(scope, _record(2), docs, cache) == 1
    assert cache.held() == [(scope, "t", 5.0, 0)]
    assert cache.get((scope, "t", 5.0, 0)) == {"a": 1} and cache.bytes == 7
