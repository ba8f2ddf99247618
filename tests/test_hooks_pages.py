"""``GET /sessions/{id}/hooks`` by page: a session with many live webhooks is served in
bounded pages by opaque cursor, in task creation order; following ``next`` reads each webhook
once; a kept cursor later reads only what was minted since; the session view holds the first
page with the cursor that continues it; the CLI follows every page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from page_kit import DirectClient, get, new_session, read_pages, sqlite_deps

from bide.engine.records import TaskRecord
from bide.engine.state import Sleeping
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc
from bide.service.deps import Deps
from bide.service.pages import MAX_PAGE_LIMIT
from bide.tools.webhooks import WEBHOOK_MEMO_PREFIX, WebhookBinding, binding_key

TASKS = 120
HOOKS_PER_TASK = 5  # 600 webhooks: more than the largest page


@pytest.fixture
def deps() -> Iterator[Deps]:
    with sqlite_deps() as made:
        yield made


def mint(deps: Deps, sid: str, first_task: int, tasks: int) -> None:
    """Live tasks ``first_task..`` each listening on HOOKS_PER_TASK webhooks (memo and
    binding, as minting writes them), committed in full commits."""
    store = deps.store
    items: list[TaskRecord | Doc] = []
    for n in range(first_task, first_task + tasks):
        task_id = f"t{n:04d}"
        memos: dict[str, Any] = {}
        for h in range(HOOKS_PER_TASK):
            nonce = f"n{n:04d}-{h}"
            memos[f"{WEBHOOK_MEMO_PREFIX}app.reply/k{h}"] = nonce
            binding = WebhookBinding(
                session_id=sid, task_id=task_id, signal="app.reply", key=f"k{h}", nonce=nonce
            )
            items.append(Doc(binding_key(nonce), binding.to_doc()))
        items.append(
            TaskRecord(
                id=task_id,
                session_id=sid,
                kind="napper",
                version=1,
                state=Sleeping(checkpoint={"phase": "woke"}),
                created_at=1000.0 + n,
                memos=memos,
            )
        )
    for start in range(0, len(items), MAX_COMMIT_ITEMS):
        chunk = items[start : start + MAX_COMMIT_ITEMS]
        store.commit(
            sid,
            store.head(sid),
            [r for r in chunk if isinstance(r, TaskRecord)],
            [d for d in chunk if isinstance(d, Doc)],
        )


def read_all(deps: Deps, sid: str, cursor: str | None, limit: int) -> tuple[list[Any], str | None]:
    return read_pages(deps, f"/sessions/{sid}/hooks", cursor, limit=limit)


def test_many_webhooks_are_served_by_page_each_once_in_order(deps: Deps) -> None:
    sid = new_session(deps)
    mint(deps, sid, 0, TASKS)
    status, first, _ = get(deps, f"/sessions/{sid}/hooks")
    assert status == 200 and len(first["items"]) == 100 and first["more"]
    status, biggest, _ = get(deps, f"/sessions/{sid}/hooks", {"limit": str(MAX_PAGE_LIMIT)})
    assert len(biggest["items"]) == MAX_PAGE_LIMIT and biggest["more"]
    found, cursor = read_all(deps, sid, None, 37)
    assert len(found) == TASKS * HOOKS_PER_TASK
    assert [(h["task_id"], h["key"]) for h in found] == [
        (f"t{n:04d}", f"k{h}") for n in range(TASKS) for h in range(HOOKS_PER_TASK)
    ]
    assert len({h["url"] for h in found}) == len(found)
    # A cursor kept after the last page reads only what was minted since.
    mint(deps, sid, TASKS, 2)
    later, _ = read_all(deps, sid, cursor, 100)
    assert [h["task_id"] for h in later] == [f"t{TASKS:04d}"] * 5 + [f"t{TASKS + 1:04d}"] * 5


def test_the_session_view_holds_the_first_page_and_the_cursor(deps: Deps) -> None:
    sid = new_session(deps)
    mint(deps, sid, 0, TASKS)
    status, view, _ = get(deps, f"/sessions/{sid}")
    assert status == 200
    assert len(view["webhooks"]) == 50 and view["webhooks_more"]
    rest, _ = read_all(deps, sid, view["webhooks_next"], 200)
    assert len(view["webhooks"]) + len(rest) == TASKS * HOOKS_PER_TASK


def test_a_cursor_of_another_list_or_session_is_refused(deps: Deps) -> None:
    sid, other = new_session(deps), new_session(deps)
    mint(deps, sid, 0, 30)
    _, page, _ = get(deps, f"/sessions/{sid}/hooks", {"limit": "5"})
    status, body, _ = get(deps, f"/sessions/{other}/hooks", {"cursor": page["next"]})
    assert status == 400 and "another session" in body["error"]
    _, tasks, _ = get(deps, f"/sessions/{sid}/tasks", {"limit": "5"})
    status, body, _ = get(deps, f"/sessions/{sid}/hooks", {"cursor": tasks["next"]})
    assert status == 400 and "another list" in body["error"]


def test_the_cli_reads_every_page(deps: Deps, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from bide import cli

    sid = new_session(deps)
    mint(deps, sid, 0, TASKS)
    direct = DirectClient(deps)
    monkeypatch.setattr(cli, "_client", lambda args, timeout=None: direct)
    assert cli.main(["hooks", "-q", sid]) == 0
    urls = capsys.readouterr().out.split()
    assert len(urls) == len(set(urls)) == TASKS * HOOKS_PER_TASK
    assert len(direct.paths) == 2  # pages of 500
