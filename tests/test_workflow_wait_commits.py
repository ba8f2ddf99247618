"""A wait with no side writes (``ctx.wait_for``, ``ctx.sleep``) has its record written with
the park (or its resolution), not in a commit of its own (``Runtime.stage_memo``): a crash at
any commit of a signal -> next wait round, before or after it lands, still ends the body with
every value read once and every deadline as first fixed."""

from __future__ import annotations

import pytest
from kit import ANSWER, HOUR, run
from test_workflow_support import Note
from workflow_round_kit import crash_and_recover, deliver, parked_call, round_commits, woken

from bide import SQLiteStore
from bide.testing import FaultyStore
from bide.workflow import WaitTimeout, define_workflow_tool
from bide.workflow.history import op_memo

ROUND_COMMITS = 2  # the worker's commits of one round: the claim, the park (with the resolution)


async def body(args, ctx):
    seen = []
    for key in ("a", "b", "c"):
        try:
            seen.append((await ctx.wait_for(ANSWER, key, timeout=HOUR)).text)
        except WaitTimeout:
            seen.append("-")
    return "".join(seen)


def test_one_round_makes_two_commits():
    tool = define_workflow_tool("w", "", Note, body)
    assert round_commits(lambda store: woken(tool, store=store)) == ROUND_COMMITS


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", range(1, ROUND_COMMITS + 1))
def test_a_crash_at_any_commit_of_a_round_reads_each_value_once(at: int, when: str):
    async def go():
        store = FaultyStore(SQLiteStore(), when=when)  # type: ignore[arg-type]
        t, call = await parked_call(define_workflow_tool("w", "", Note, body), store=store)
        parked = t.memos(call)[op_memo(1)]
        await deliver(t, call, "a")
        await crash_and_recover(t, store, at, call)
        memos = t.memos(call)
        assert memos[op_memo(1)] == parked  # the first wait's deadline, as first fixed
        second = memos[op_memo(2)]
        # The second wait's record is durable with its park: its deadline is the one the
        # park sleeps until, and stays so however often the body is replayed.
        assert t.h.task(call).state.until == second["until"]
        t.kit.clock.advance(HOUR / 2)
        await t.reopen()
        await t.h.run_until_parked()
        assert t.memos(call)[op_memo(2)] == second
        await deliver(t, call, "b")
        await t.h.run_until_parked()
        t.kit.clock.advance(2 * HOUR)  # "c" never comes: its wait times out
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(go()) == "AB-"
