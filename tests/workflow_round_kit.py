"""What the woken-workflow-round tests share (``test_workflow_held_resolution``,
``test_workflow_wait_commits``): a tool called once and parked on its first wait, an answer
delivered to that wait, the commits of one round counted, a crash at a chosen commit of a run
and the recovery after it, and a body that dies on every run driven to its end."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kit import ANSWER, run
from test_workflow_support import Tools

from bide import SQLiteStore
from bide.engine.harness import DEFAULT_RESTART_LIMIT
from bide.testing import Crash, FaultyStore


async def parked_call(tool: Any, *, store: Any = None) -> tuple[Tools, str]:
    """A fresh harness over ``store`` (a fresh SQLite store when None) running ``tool``,
    called once with no arguments and run until parked: the tools and the call's task id."""
    t = await Tools(tool, store=store).start()
    call = await t.call(tool.name, {})
    await t.h.run_until_parked()
    return t, call


async def deliver(t: Tools, task_id: str, key: str, text: str | None = None) -> None:
    """Send ``task_id`` the answer ``key`` (its text ``text``, else ``key`` upper-cased), which
    it must be waiting for: the signal is ``delivered``, not kept for later."""
    body = {"text": key.upper() if text is None else text}
    assert await t.h.signal(task_id, ANSWER, key, body) == "delivered"


async def woken(tool: Any, *, store: Any = None, background: bool = False) -> tuple[Tools, str]:
    """:func:`parked_call`, then the answer ``a`` delivered to the task whose body waits for
    it: the call's, or for a background tool (``lifetime="task"``) the task its receipt names.
    The tools and that task's id; its woken round is not run yet."""
    t, call = await parked_call(tool, store=store)
    task_id = t.result(call).details["task_id"] if background else call
    await deliver(t, task_id, "a")
    return t, task_id


def round_commits(start: Callable[[FaultyStore], Awaitable[tuple[Tools, str]]]) -> int:
    """The commits the harness makes for one round (counted, not assumed): ``start`` sets
    the round up over a fresh counting store and gives the tools and the woken task's id;
    the round runs until parked, which leaves that task asleep on its next wait."""

    async def go() -> int:
        store = FaultyStore(SQLiteStore())
        t, task_id = await start(store)
        before = store.commits
        await t.h.run_until_parked()
        assert t.status(task_id) == "sleeping"
        return store.commits - before

    return run(go())


async def crash_and_recover(t: Tools, store: FaultyStore, at: int, task_id: str) -> None:
    """Run until the ``at``-th commit from here kills the process (it must), then recover
    as a fresh process would (reopen, run until parked): ``task_id`` is asleep again."""
    store.fail_at = store.commits + at
    with contextlib.suppress(Crash):
        await t.h.run_until_parked()
    assert store.crashed
    await t.reopen()
    await t.h.run_until_parked()
    assert t.status(task_id) == "sleeping"


async def crash_until_terminal(t: Tools, task_id: str) -> tuple[str, str | None]:
    """Run ``task_id``, whose body dies on every run, and recover after each death (recovery
    counts a restart, or ends the task past the limit) until it is terminal; a few runs past
    the limit at most. Its outcome's type name and error."""
    for _ in range(DEFAULT_RESTART_LIMIT + 3):
        if t.status(task_id) == "terminal":
            break
        with contextlib.suppress(Crash):
            await t.h.run_until_parked()
        await t.reopen()
    outcome = t.h.outcome(task_id)
    return type(outcome).__name__, getattr(outcome, "error", None)
