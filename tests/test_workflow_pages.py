"""``GET /sessions/{id}/workflow`` is bounded: the view holds the first page of each of its lists
(questions, sign-ins, background tasks, approvals, non-determinism failures) with the cursor
that continues it on ``GET /sessions/{id}/workflow/{name}``; following ``next`` reads each item
once, in order; an item over the page bound is a stub; cursors are checked (400 naming the
field); another principal gets 403; the CLI and ``bide watch`` follow every page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("page_kit")
from page_kit import (  # noqa: E402
    ENVELOPE_BYTES,
    DirectClient,
    get,
    new_session,
    read_pages,
    sqlite_deps,
)

from bide.engine.records import TaskRecord  # noqa: E402
from bide.engine.state import Sleeping  # noqa: E402
from bide.engine.store.base import MAX_COMMIT_ITEMS, Doc  # noqa: E402
from bide.local.watch import read_snapshot  # noqa: E402
from bide.service.deps import Deps  # noqa: E402
from bide.service.pages import MAX_PAGE_BYTES, MAX_PAGE_LIMIT  # noqa: E402
from bide.workflow.index import index_key  # noqa: E402
from bide.workflow.nondeterminism import NONDETERMINISM_PREFIX  # noqa: E402
from bide.workflow.requests import ask_key  # noqa: E402

BACKGROUND = 600  # more than the largest page
ASKS = 130
FAILED = 70
BIG = 300 * 1024  # every hundredth task's result: a page holds only a few of these
HUGE_TASK = 345  # its result is larger than a whole page: served as a stub
ASKER = "asker"  # the live task the questions belong to


@pytest.fixture
def deps() -> Iterator[Deps]:
    with sqlite_deps() as made:
        yield made


def result_of(n: int) -> str:
    if n == HUGE_TASK:
        return "y" * (MAX_PAGE_BYTES + 10)
    # Five large results early on: the view's first page stops at its byte bound.
    large = n % 100 == 50 or (n < 50 and n % 10 == 5)
    return f"done {n}" + (" " + "x" * BIG if large else "")


def write(deps: Deps, sid: str, records: list[TaskRecord], docs: list[Doc]) -> None:
    store = deps.store
    for start in range(0, len(docs), MAX_COMMIT_ITEMS - 1):
        first = start == 0
        store.commit(
            sid,
            store.head(sid),
            records if first else [],
            docs[start : start + MAX_COMMIT_ITEMS - 1],
        )
    if not docs:
        store.commit(sid, store.head(sid), records, [])


def fill(deps: Deps, sid: str, first: int, count: int, *, asker: bool = True) -> None:
    """Background tasks, open questions and non-determinism failures numbered ``first..``, as
    the workflow writes them (one document each); the questions' task is live."""
    records = []
    if asker:
        records.append(
            TaskRecord(
                id=ASKER,
                session_id=sid,
                kind="napper",
                version=1,
                state=Sleeping(checkpoint={"phase": "asked"}),
                created_at=1000.0,
            )
        )
    docs = []
    for n in range(first, first + count):
        info = {
            "id": f"b{n:04d}",
            "tool": "deploy",
            "status": "completed",
            "created_at": 2000.0 + n,
            "result": result_of(n),
        }
        docs.append(Doc(index_key(f"b{n:04d}"), info))
    for n in range(first, first + min(count, ASKS)):
        ask = {
            "id": f"a{n:04d}",
            "task_id": ASKER,
            "tool": "deploy",
            "prompt": f"ok {n}?",
            "status": "open",
        }
        docs.append(Doc(ask_key(f"a{n:04d}"), {**ask, "created_at": 3000.0 + n}))
    for n in range(first, first + min(count, FAILED)):
        failed = {"task_id": f"b{n:04d}", "reason": "changed", "detected_at": 4000.0 + n}
        docs.append(Doc(f"{NONDETERMINISM_PREFIX}b{n:04d}", failed))
    write(deps, sid, records, docs)


def read_all(
    deps: Deps, sid: str, name: str, cursor: str | None, limit: int = MAX_PAGE_LIMIT
) -> tuple[list[Any], str | None]:
    path = f"/sessions/{sid}/workflow/{name}"
    return read_pages(deps, path, cursor, limit=limit, same={"name": name})


def ids(items: list[dict[str, Any]], field: str = "id") -> list[str]:
    return [item.get(field, "omitted" if item.get("omitted") else "?") for item in items]


def test_the_view_holds_bounded_first_pages_and_next_reads_each_item_once(deps: Deps) -> None:
    sid = new_session(deps)
    fill(deps, sid, 0, BACKGROUND)
    status, view, size = get(deps, f"/sessions/{sid}/workflow")
    assert status == 200, view
    assert size <= 5 * MAX_PAGE_BYTES + ENVELOPE_BYTES, size
    for name in ("tasks", "asks", "nondeterminism"):
        assert view[f"{name}_more"] is True and view[f"{name}_next"], name
        assert 0 < len(view[name]) <= 50
        assert len(json.dumps(view[name]).encode()) <= MAX_PAGE_BYTES, name
    assert len(view["tasks"]) < 50  # stopped at the byte bound, not the count
    assert view["authorizations"] == [] and view["authorizations_more"] is False
    assert view["approvals"] == [] and view["approvals_more"] is False

    tasks, kept = read_all(deps, sid, "tasks", view["tasks_next"])
    expected = [f"b{n:04d}" for n in range(BACKGROUND)]
    expected[HUGE_TASK] = "omitted"  # larger than a page: a stub stands in its place
    assert ids(view["tasks"] + tasks) == expected
    stub = tasks[HUGE_TASK - len(view["tasks"])]
    assert stub["bytes"] > MAX_PAGE_BYTES and "page bound" in stub["reason"]
    assert all(t["result"] == result_of(int(t["id"][1:])) for t in tasks if "id" in t)

    asks, _ = read_all(deps, sid, "asks", view["asks_next"], limit=7)
    assert ids(view["asks"] + asks) == [f"a{n:04d}" for n in range(ASKS)]
    failed, _ = read_all(deps, sid, "nondeterminism", view["nondeterminism_next"], limit=9)
    assert ids(view["nondeterminism"] + failed, "task_id") == [f"b{n:04d}" for n in range(FAILED)]

    # From the start, a page at a time, the same items; a kept cursor later reads only what
    # was added since.
    again, _ = read_all(deps, sid, "tasks", None, limit=37)
    assert ids(again) == expected
    fill(deps, sid, BACKGROUND, 2, asker=False)
    later, _ = read_all(deps, sid, "tasks", kept)
    assert ids(later) == [f"b{BACKGROUND:04d}", f"b{BACKGROUND + 1:04d}"]


def test_cursors_and_list_names_are_checked(deps: Deps) -> None:
    sid, other = new_session(deps), new_session(deps)
    fill(deps, sid, 0, 60)
    _, page, _ = get(deps, f"/sessions/{sid}/workflow/tasks", {"limit": "5"})
    status, body, _ = get(deps, f"/sessions/{other}/workflow/tasks", {"cursor": page["next"]})
    assert (
        status == 400 and body["error"].startswith("cursor:") and "another session" in body["error"]
    )
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/asks", {"cursor": page["next"]})
    assert status == 400 and body["error"].startswith("cursor:") and "another list" in body["error"]
    # The session view's live-task cursor is another list than the task index.
    _, live, _ = get(deps, f"/sessions/{sid}/tasks", {"limit": "1"})
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/tasks", {"cursor": live["next"]})
    assert status == 400 and "another list" in body["error"]
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/tasks", {"cursor": "garbage"})
    assert status == 400 and body["error"].startswith("cursor:")
    tampered = page["next"][:-1] + ("0" if page["next"][-1] != "0" else "1")
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/tasks", {"cursor": tampered})
    assert status == 400 and "altered" in body["error"]
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/everything")
    assert status == 422 and body["detail"][0]["loc"][-1] == "name"
    status, body, _ = get(deps, f"/sessions/{sid}/workflow/tasks", {"limit": "0"})
    assert status == 422 and body["detail"][0]["loc"][-1] == "limit"


def test_another_principal_gets_403_on_the_pages(deps: Deps) -> None:
    sid = new_session(deps)
    fill(deps, sid, 0, 10)
    for path in (f"/sessions/{sid}/workflow", f"/sessions/{sid}/workflow/asks"):
        status, body, _ = get(deps, path, principal="arn:aws:iam::123456789012:user/mallory")
        assert status == 403 and "ok 0?" not in json.dumps(body)


def test_the_cli_and_watch_follow_every_page(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from bide import cli

    sid = new_session(deps)
    fill(deps, sid, 0, BACKGROUND)
    direct = DirectClient(deps)
    monkeypatch.setattr(cli, "_client", lambda args, timeout=None: direct)
    assert cli.main(["show", sid]) == 0
    shown = capsys.readouterr().out
    assert all(f"ok {n}?" in shown for n in range(ASKS))

    snapshot = read_snapshot(direct, sid)  # type: ignore[arg-type]
    assert ids(snapshot.workflow["asks"]) == [f"a{n:04d}" for n in range(ASKS)]
    assert len(snapshot.workflow["tasks"]) == BACKGROUND
    assert len(snapshot.workflow["nondeterminism"]) == FAILED
    assert any("/workflow/tasks?" in p for p in direct.paths)
