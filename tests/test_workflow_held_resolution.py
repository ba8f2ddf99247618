"""A woken workflow body's round: the claim, then the park on the next wait, which carries the
resolution of the wait the body was parked on (held, not a commit of its own: ``Op.holds``),
with no intent commit between them (a replay-safe workflow body needs none:
``tools.task._replays_itself``). What keeps that honest is tested here:

* a step's code runs only once the held resolution is durable, and a progress event is
  written with it;
* a crash at any commit of a round with a step in it ends the body with the value read once
  and every step seeing it;
* a body that crashes on every run still reaches the restart limit, after as many runs as
  with an intent commit;
* a cut-off run of a body whose tool turned replay-unsafe meanwhile ends ``interrupted``;
* only a park refused because a key's unread document exists runs the body again.
* a background task's workflow body (``lifetime="task"``) commits no intent either.
"""

from __future__ import annotations

import pytest
from kit import ANSWER, run
from test_workflow_support import Note, Tools
from workflow_round_kit import (
    crash_and_recover,
    crash_until_terminal,
    deliver,
    parked_call,
    round_commits,
    woken,
)

from bide import SQLiteStore
from bide.engine.harness import DEFAULT_RESTART_LIMIT
from bide.testing import Crash, FaultyStore
from bide.workflow import define_workflow_tool
from bide.workflow.history import op_memo, result_memo


def _durable_memos(t: Tools, task_id: str) -> dict:
    """The task's memos as the store holds them (not the harness's view)."""
    record = t.kit.store.get_task(t.h.session_id, task_id)
    assert record is not None
    return dict(record.memos)


def test_a_step_runs_once_the_resolution_it_may_use_is_durable():
    seen: list[bool] = []

    async def go():
        t: Tools

        async def body(args, ctx):
            got = (await ctx.wait_for(ANSWER, "a")).text

            def act():
                seen.append(result_memo(1) in _durable_memos(t, ctx.task_id))
                return got

            await ctx.step(act, name="act")
            return got + (await ctx.wait_for(ANSWER, "b")).text

        t, call = await woken(define_workflow_tool("w", "", Note, body))
        await t.h.run_until_parked()
        await deliver(t, call, "b")
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(go()) == "AB"
    assert seen == [True]


def test_a_progress_event_is_written_with_the_resolution_it_may_tell():
    async def go():
        async def body(args, ctx):
            got = (await ctx.wait_for(ANSWER, "a")).text
            ctx.progress(f"got {got}")  # the run's first report: written at once
            return got + (await ctx.wait_for(ANSWER, "b")).text

        store = FaultyStore(SQLiteStore())
        t, call = await woken(define_workflow_tool("w", "", Note, body), store=store)
        # Die at the park on "b": the progress event's commit came before it.
        store.match = lambda writes: any(r.state.status == "sleeping" for r in writes)
        with pytest.raises(Crash):
            await t.h.run_until_parked()
        events = [d.body for d in store.list_docs(t.h.session_id, "") if "got A" in str(d.body)]
        assert events, "the progress event was written"
        assert _durable_memos(t, call)[result_memo(1)] == {"v": {"text": "A"}}
        await t.reopen()
        await t.h.run_until_parked()
        await deliver(t, call, "b")
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(go()) == "AB"


async def _stepping_round(store: FaultyStore, steps: list[str]) -> tuple[Tools, str]:
    async def body(args, ctx):
        got = (await ctx.wait_for(ANSWER, "a")).text

        def act():
            steps.append(got)
            return got + "!"

        done = await ctx.step(act, name="act")
        return done + (await ctx.wait_for(ANSWER, "b")).text

    return await woken(define_workflow_tool("w", "", Note, body), store=store)


STEPPING_COMMITS = 4  # the claim, the held resolution (before the step), the step, the park


def test_a_round_with_a_step_makes_four_commits():
    assert round_commits(lambda store: _stepping_round(store, [])) == STEPPING_COMMITS


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", range(1, STEPPING_COMMITS + 1))
def test_a_crash_at_any_commit_of_a_round_with_a_step_reads_the_value_once(at: int, when: str):
    steps: list[str] = []

    async def go():
        store = FaultyStore(SQLiteStore(), when=when)  # type: ignore[arg-type]
        t, call = await _stepping_round(store, steps)
        await crash_and_recover(t, store, at, call)
        await deliver(t, call, "b")
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(go()) == "A!B"
    assert set(steps) == {"A"}  # every run of the step saw the value the wait first got
    # At least once, and twice only when the run died between the step's code and its
    # record (the third commit, before it landed).
    assert len(steps) == (2 if (at, when) == (3, "before") else 1)


def test_a_body_that_crashes_on_every_run_reaches_the_restart_limit():
    runs: list[int] = []

    async def go():
        async def body(args, ctx):
            await ctx.wait_for(ANSWER, "a")
            runs.append(1)
            raise Crash()  # the process dies while the woken body runs

        t, call = await woken(define_workflow_tool("w", "", Note, body))
        return await crash_until_terminal(t, call)

    assert run(go()) == ("Faulted", "restart limit reached")
    assert len(runs) == DEFAULT_RESTART_LIMIT + 1  # as many as with an intent commit


def test_a_cut_off_run_of_a_body_whose_tool_turned_replay_unsafe_ends_interrupted():
    runs: list[str] = []

    async def body(args, ctx):
        await ctx.wait_for(ANSWER, "a")
        runs.append("ran")
        if len(runs) == 1:
            raise Crash()
        return "done"

    async def go():
        t, call = await woken(define_workflow_tool("w", "", Note, body))
        with pytest.raises(Crash):
            await t.h.run_until_parked()
        # A deploy made the tool replay-unsafe while its run was cut off.
        unsafe = Tools(
            define_workflow_tool("w", "", Note, body, replay="unsafe"), store=t.kit.store
        )
        await unsafe.start()
        await unsafe.h.run_until_parked()
        return unsafe.h.outcome(call).result["code"]

    assert run(go()) == "interrupted"
    assert runs == ["ran"]  # the cut-off run never ran again


def test_only_a_park_refused_for_an_unread_document_runs_the_body_again():
    runs: list[int] = []

    async def go():
        async def body(args, ctx):
            runs.append(1)
            return await ctx.wait_for(ANSWER, "k.*")  # a stream key: no wait can name it

        t, call = await parked_call(define_workflow_tool("w", "", Note, body))
        return t.result(call)

    result = run(go())
    assert result.code == "invalid_park" and "names a stream" in result.text
    assert len(runs) == 1  # refused for no document: the body would decide the same


async def _background_round(store: FaultyStore, seen: list[str]) -> tuple[Tools, str]:
    async def body(args, ctx, task):
        got = ""
        for key in ("a", "b", "c"):
            got += (await ctx.wait_for(ANSWER, key)).text
            seen.append(got)
        return got

    tool = define_workflow_tool("bg", "", Note, body, lifetime="task")
    return await woken(tool, store=store, background=True)


def test_a_woken_background_body_commits_the_claim_and_the_park():
    assert round_commits(lambda store: _background_round(store, [])) == 2


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", [1, 2])
def test_a_crash_in_a_background_body_round_reads_each_value_once(at: int, when: str):
    seen: list[str] = []

    async def go():
        store = FaultyStore(SQLiteStore(), when=when)  # type: ignore[arg-type]
        t, task_id = await _background_round(store, seen)
        await crash_and_recover(t, store, at, task_id)
        for key in ("b", "c"):
            await deliver(t, task_id, key)
            await t.h.run_until_parked()
        return t.h.outcome(task_id)

    outcome = run(go())
    assert type(outcome).__name__ == "Completed"
    assert seen[-1] == "ABC" and set(seen) <= {"A", "AB", "ABC"}


def test_a_background_body_that_crashes_on_every_run_reaches_the_restart_limit():
    runs: list[int] = []

    async def go():
        async def body(args, ctx, task):
            await ctx.wait_for(ANSWER, "a")
            runs.append(1)
            raise Crash()

        tool = define_workflow_tool("bg", "", Note, body, lifetime="task")
        t, task_id = await woken(tool, background=True)
        return await crash_until_terminal(t, task_id)

    assert run(go()) == ("Faulted", "restart limit reached")
    assert len(runs) == DEFAULT_RESTART_LIMIT + 1


def test_held_memos_are_read_by_the_run_and_carried_by_a_memo_commit():
    from kit import Kit

    from bide import define_task

    seen: dict = {}

    async def phase(task, rt):
        rt.stage_memo("held", {"v": 1})
        seen["recorded"] = rt.recorded("held")
        seen["pair"] = rt.recorded_pair("op", "held")
        seen["read"] = await rt.memo("held")  # a read: as held, no commit
        seen["other"] = await rt.memo("other", 2)  # durable when it returns, with what is held
        seen["durable"] = dict(store.get_task("s1", task.id).memos)
        raise Crash()  # nothing else commits

    kind = define_task("test.held", 1, lambda _: "go", {"go": phase})
    store = FaultyStore(SQLiteStore())

    async def go():
        k = Kit(kind, store=store)
        await k.h.open()
        await k.h.create_task(kind, {})
        with pytest.raises(Crash):
            await k.h.run_until_parked()

    run(go())
    assert seen["recorded"] == {"v": 1} and seen["read"] == {"v": 1}
    assert seen["pair"] == (None, {"v": 1})
    assert seen["durable"]["held"] == {"v": 1} and seen["durable"]["other"] == 2


async def _sleeping_round(store: FaultyStore) -> tuple[Tools, str]:
    async def body(args, ctx):
        await ctx.sleep(60)
        return (await ctx.wait_for(ANSWER, "a")).text

    t, call = await parked_call(define_workflow_tool("w", "", Note, body), store=store)
    t.kit.clock.advance(60)  # the sleep's time is reached: a timed wake
    return t, call


def test_a_timed_wake_of_a_body_commits_the_claim_and_the_park():
    assert round_commits(_sleeping_round) == 2


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", [1, 2])
def test_a_crash_in_a_timed_wake_of_a_body_keeps_its_deadline(at: int, when: str):
    async def go():
        store = FaultyStore(SQLiteStore(), when=when)  # type: ignore[arg-type]
        t, call = await _sleeping_round(store)
        until = t.memos(call)[op_memo(1)]["until"]
        await crash_and_recover(t, store, at, call)
        assert t.memos(call)[op_memo(1)]["until"] == until
        assert t.memos(call)[result_memo(1)] == {"v": None}
        await deliver(t, call, "a")
        await t.h.run_until_parked()
        return t.result(call).text

    assert run(go()) == "A"
