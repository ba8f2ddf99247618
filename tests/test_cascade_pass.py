"""An ownership cascade that the scheduler passes on (owner ended, grandchildren parked) is
finished within one ``run_until_parked``: the pass that marks a task runs another pass, so the
call never returns while ``wake().active`` is still true."""

from __future__ import annotations

from kit import SLEEPER, Kit, run

from bide import Completed, Sleeping, Terminal, define_task


async def _middle(task, rt):
    def build(tx):
        tx.create_task(SLEEPER, {"keys": ["k"]})
        return Sleeping(checkpoint="idle", until=rt.now() + 10**9)

    await rt.commit(build)


MIDDLE = define_task("test.middle", 1, lambda _: "start", {"start": _middle})


async def _top(task, rt):
    if task.checkpoint["phase"] == "start":

        def build(tx):
            tx.create_task(MIDDLE)
            return Sleeping(checkpoint="end", until=rt.now() + 5)

        await rt.commit(build)
    else:
        await rt.commit(Terminal(outcome=Completed()))


TOP = define_task("test.top", 1, lambda _: "start", {"start": _top, "end": _top})


def test_a_three_level_owner_end_is_finished_in_one_run():
    async def go():
        k = Kit(SLEEPER, MIDDLE, TOP)
        await k.h.open()
        top = await k.h.create_task(TOP)
        await k.h.run_until_parked()
        assert len(k.h.live_tasks) == 3
        k.clock.advance(5)
        wake = await k.h.run_until_parked()
        assert wake.active is False and k.h.live_tasks == {}
        assert k.h.outcome(top).status == "completed"

    run(go())


async def _waiter(task, rt):
    from bide import Waiting

    if task.checkpoint["phase"] == "start":

        def build(tx):
            owned = tx.create_task(TOP, owner=None)
            return Waiting(checkpoint="done", on=(owned,))

        await rt.commit(build)
    else:
        await rt.commit(Terminal(outcome=Completed(result="woke")))


WAITER = define_task("test.waiter", 1, lambda _: "start", {"start": _waiter, "done": _waiter})


def test_settling_a_completing_task_wakes_its_waiter_in_the_same_run():
    async def go():
        k = Kit(SLEEPER, MIDDLE, TOP, WAITER)
        await k.h.open()
        waiter = await k.h.create_task(WAITER)
        await k.h.run_until_parked()
        k.clock.advance(5)  # TOP ends while MIDDLE and its sleeper are live: it is completing
        wake = await k.h.run_until_parked()
        assert wake.active is False and k.h.outcome(waiter).result == "woke"

    run(go())
