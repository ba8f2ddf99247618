"""On the DynamoDB store (moto and DynamoDB Local): a cold replay of a long workflow body reads
its sealed pages with one Query of the task's page range, where it made one GetItem a page.
A strongly consistent Query returns at most 1 MB a response and is continued from its
LastEvaluatedKey (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html),
so one listing of ~30 pages of at most 32 KB each is one or a few requests."""

from __future__ import annotations

from typing import Any

from aws_fixtures import FaultyClient, aws_bench  # noqa: F401  (a fixture)
from kit import ANSWER, run
from memo_page_kit import go_cold, parked

from bide.aws.table import DOC_PREFIX, SORT_KEY
from bide.engine import memo_pages

PAGE_ITEMS = DOC_PREFIX + memo_pages.PREFIX


def _page_requests(client: FaultyClient) -> tuple[int, int]:
    """(GetItem calls of a sealed page, Query calls of a task's pages) made through ``client``."""
    gets = queries = 0
    for op, kwargs in client.calls:
        if op == "get_item" and kwargs["Key"][SORT_KEY]["S"].startswith(PAGE_ITEMS):
            gets += 1
        values: dict[str, Any] = kwargs.get("ExpressionAttributeValues", {})
        if op == "query" and values.get(":prefix", {}).get("S", "").startswith(PAGE_ITEMS):
            queries += 1
    return gets, queries


def test_a_cold_replay_on_dynamodb_reads_its_pages_in_one_query(aws_bench, monkeypatch):  # noqa: F811
    async def body(args, ctx):
        got = [await ctx.step(lambda i=i: i * i, name=f"s{i}") for i in range(160)]
        await ctx.wait_for(ANSWER, "go")
        return str(sum(got))

    client = FaultyClient(aws_bench.ddb)

    async def go():
        t, call, _ = await parked(body, store=aws_bench.store(client), min_pages=4)
        await go_cold(t, monkeypatch)
        client.calls.clear()
        assert await t.h.signal(call, ANSWER, "go", ANSWER.schema(text="v")) == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).text == str(sum(i * i for i in range(160)))
        assert _page_requests(client) == (0, 1), client.calls

    run(go())
