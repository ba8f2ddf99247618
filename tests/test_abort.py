"""Abort: a durable mark; owned work first; parked tasks stop waiting at once."""

from __future__ import annotations

from kit import ANSWER, HOUR, Kit, run

from bide import Aborted, Completed, Sleeping, Terminal, Waiting, define_task

log: list[str] = []


def _sleep_long(label: str):
    async def sleep(task, rt):
        await rt.commit(
            Sleeping(checkpoint="never", signals=(ANSWER.key("x"),), until=rt.now() + 7 * 24 * HOUR)
        )

    async def abort(task, rt):
        log.append(f"abort {label} {task.input} reason={task.abort_reason}")
        await rt.commit(Terminal(outcome=Aborted(reason=task.abort_reason)))

    return sleep, abort


_s, _a = _sleep_long("leaf")
LEAF = define_task("test.leaf", 1, lambda _: "sleep", {"sleep": _s}, abort=_a)


async def _spawn(task, rt):
    def build(tx):
        ids = [tx.create_task(LEAF, {"i": i}, key=str(i)) for i in range(2)]
        return Waiting(checkpoint="never", on=tuple(ids))

    await rt.commit(build)


async def _root_abort(task, rt):
    outcomes = [(await rt.outcome(c)).status for c in task_children[task.id]]
    log.append(f"abort root; children {outcomes}")
    await rt.commit(Terminal(outcome=Aborted(reason=task.abort_reason)))


task_children: dict[str, list[str]] = {}
ROOT = define_task("test.root", 1, lambda _: "spawn", {"spawn": _spawn}, abort=_root_abort)


def test_abort_sleeping_task_runs_handler_at_once_without_waiting_for_deadline():
    async def go():
        log.clear()
        k = Kit(LEAF)
        await k.h.open()
        t = await k.h.create_task(LEAF, {"i": 9})
        wake = await k.h.run_until_parked()
        assert wake.at is not None and not wake.active
        assert await k.h.abort(t, "Stop") is True
        assert k.h.wake().active is True  # runnable for its abort handler now
        wake = await k.h.run_until_parked()
        assert k.h.outcome(t) == Aborted(reason="Stop")
        assert log == ["abort leaf {'i': 9} reason=Stop"]
        assert wake.active is False and wake.at is None  # the deadline is gone with the task
        assert await k.h.abort(t) is False  # already ended

    run(go())


def test_abort_waiting_task_aborts_owned_work_first():
    async def go():
        log.clear()
        k = Kit(ROOT, LEAF)
        await k.h.open()
        root = await k.h.create_task(ROOT)
        await k.h.run_until_parked()
        kids = [r.id for r in k.h.live_tasks.values() if r.owner == root]
        task_children[root] = kids
        assert len(kids) == 2
        await k.h.abort(root, "Stop")
        for kid in kids:
            assert await k.h.signal(kid, ANSWER, "x", {"text": "late"}) == "closed"
        await k.h.run_until_parked()
        assert sorted(log[:2]) == [
            "abort leaf {'i': 0} reason=Stop",
            "abort leaf {'i': 1} reason=Stop",
        ]
        assert log[2] == "abort root; children ['aborted', 'aborted']"
        assert k.h.outcome(root).status == "aborted"
        assert k.h.live_tasks == {}

    run(go())


def test_abort_of_a_running_task_refuses_its_next_commit():
    seen: list[str] = []

    async def go():
        k = Kit()

        async def phase(task, rt):
            await k.h.abort(task.id, "from outside")
            assert rt.aborted
            try:
                await rt.commit(Terminal(outcome=Completed(result="should not land")))
            except BaseException as exc:  # InvocationEnded is a BaseException on purpose
                seen.append(type(exc).__name__)
                raise

        kind = define_task("test.self-abort", 1, lambda _: "go", {"go": phase})
        k.h.register(kind)
        await k.h.open()
        t = await k.h.create_task(kind)
        await k.h.run_until_parked()
        assert seen == ["InvocationEnded"]
        assert k.h.outcome(t) == Aborted(reason="from outside")

    run(go())


def test_abort_handler_that_does_not_end_the_task_faults_it():
    async def bad_abort(task, rt):
        return None

    async def go():
        kind = define_task("test.bad-abort", 1, lambda _: "sleep", {"sleep": _s}, abort=bad_abort)
        k = Kit(kind)
        await k.h.open()
        t = await k.h.create_task(kind, {"i": 1})
        await k.h.run_until_parked()
        await k.h.abort(t)
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "faulted"

    run(go())


def test_abort_survives_a_restart():
    async def go():
        log.clear()
        k = Kit(LEAF)
        await k.h.open()
        t = await k.h.create_task(LEAF, {"i": 3})
        await k.h.run_until_parked()
        await k.h.abort(t, "durable")
        h2 = await k.reopen()  # crash before the abort handler ran
        await h2.run_until_parked()
        assert h2.outcome(t) == Aborted(reason="durable")

    run(go())
