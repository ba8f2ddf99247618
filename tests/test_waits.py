"""Waiting on tasks: all_settled, fail_fast, any; invalid waits; completing owners."""

from __future__ import annotations

import pytest
from kit import ANSWER, SLEEPER, Kit, run

from bide import (
    Completed,
    Failed,
    InvalidWait,
    Sleeping,
    Terminal,
    Waiting,
    define_task,
)


async def _finish_by_signal(task, rt):
    await rt.commit(Sleeping(checkpoint="end", signals=(ANSWER.key("go"),)))


async def _end(task, rt):
    state = await rt.read_signal(ANSWER, "go")
    text = state.value.text
    outcome = Failed(error=text) if text == "fail" else Completed(result=text)
    await rt.commit(Terminal(outcome=outcome))


CHILD = define_task("test.child", 1, lambda _: "start", {"start": _finish_by_signal, "end": _end})


def parent(policy: str, n: int = 3):
    async def spawn(task, rt):
        def build(tx):
            ids = [tx.create_task(CHILD, {"i": i}, key=f"c{i}") for i in range(n)]
            return Waiting(checkpoint="woke", on=tuple(ids), policy=policy)

        await rt.commit(build)

    async def woke(task, rt):
        ended = list(task.wake.ended)
        await rt.commit(Terminal(outcome=Completed(result={"ended": ended})))

    return define_task(
        f"test.parent.{policy}", 1, lambda _: "spawn", {"spawn": spawn, "woke": woke}
    )


def keyed_child(k, pid, key):
    from bide.engine.ids import keyed_id

    return keyed_id("t-", "s1", pid, key)


def children(k, pid):
    return sorted(
        (r for r in k.h.live_tasks.values() if r.owner == pid), key=lambda r: r.input["i"]
    )


async def waiting_parent(policy: str) -> tuple[Kit, str, list[str]]:
    """A session whose parent waits, under ``policy``, on three children that each sleep
    until told how to end; the parent's id and its children's ids."""
    kind = parent(policy)
    k = Kit(kind, CHILD)
    await k.h.open()
    p = await k.h.create_task(kind)
    await k.h.run_until_parked()
    return k, p, [r.id for r in children(k, p)]


@pytest.mark.parametrize("policy", ["all_settled", "fail_fast", "any"])
def test_wait_policies(policy):
    async def go():
        k, p, kids = await waiting_parent(policy)
        assert len(kids) == 3
        assert k.h.wake().active is False

        await k.h.signal(kids[1], ANSWER, "go", {"text": "ok"})
        await k.h.run_until_parked()
        if policy == "any":
            assert k.h.outcome(p).result == {"ended": [kids[1]]}
            return
        assert k.h.outcome(p) is None

        await k.h.signal(kids[0], ANSWER, "go", {"text": "fail"})
        await k.h.run_until_parked()
        if policy == "fail_fast":
            assert k.h.outcome(p).result == {"ended": [kids[0], kids[1]]}
            return
        assert k.h.outcome(p) is None

        await k.h.signal(kids[2], ANSWER, "go", {"text": "ok"})
        await k.h.run_until_parked()
        assert k.h.outcome(p).result == {"ended": kids}

    run(go())


def test_any_wake_lists_every_ended_member():
    async def go():
        k, p, kids = await waiting_parent("any")
        # two children end before the parent is reserved again
        await k.h.signal(kids[2], ANSWER, "go", {"text": "ok"})
        await k.h.signal(kids[0], ANSWER, "go", {"text": "ok"})
        await k.h.run_until_parked()
        # the children run and end first; the parent's wake lists both (in its `on` order)
        assert k.h.outcome(p).result["ended"] in ([kids[0], kids[2]], [kids[2]], [kids[0]])

    run(go())


def test_wait_any_with_terminal_member_counts_as_active():
    async def go():
        k, _, kids = await waiting_parent("any")
        kid = kids[0]
        await k.h.signal(kid, ANSWER, "go", {"text": "ok"})
        assert k.h.wake().active is True  # the child is runnable (signal holds an unused value)

    run(go())


def _waiter(on_of):
    errors: list[str] = []

    async def wait(task, rt):
        def build(tx):
            return Waiting(checkpoint="never", on=tuple(on_of(task, tx)), policy="all_settled")

        try:
            await rt.commit(build)
        except InvalidWait as exc:
            errors.append(str(exc))
            await rt.commit(Terminal(outcome=Completed()))

    return wait, errors


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("empty", "at least one task"),
        ("self", "itself"),
        ("missing", "no task"),
        ("owner", "owns this task"),
        ("cycle", "cycle"),
        ("twice", "twice"),
    ],
)
def test_invalid_waits_are_rejected(case, message):
    async def go():
        k = Kit()
        state: dict = {}

        def on_of(task, tx):
            if case == "empty":
                return []
            if case == "self":
                return [task.id]
            if case == "missing":
                return ["t-nobody"]
            if case == "twice":
                return [state["other"], state["other"]]
            if case == "owner":
                return [task.owner]
            if case == "cycle":
                return [state["other"]]
            raise AssertionError(case)

        wait, errors = _waiter(on_of)

        async def wait_on_input(task, rt):
            await rt.commit(Waiting(checkpoint="never", on=(task.input["on"],)))

        async def spawn_child(task, rt):
            def build(tx):
                c = tx.create_task(inner, None)
                return Waiting(checkpoint="never", on=(c,))

            await rt.commit(build)

        inner = define_task("test.inner", 1, lambda _: "wait", {"wait": wait})
        outer = define_task("test.outer", 1, lambda _: "spawn", {"spawn": spawn_child})
        other = define_task("test.other", 1, lambda _: "wait", {"wait": wait_on_input})
        for kind in (inner, outer, other):
            k.h.register(kind)
        await k.h.open()
        if case == "owner":
            await k.h.create_task(outer)
        elif case == "cycle":
            # `other` waits on the outer task, whose child `inner` then waits on `other`
            o = await k.h.create_task(outer)
            state["other"] = await k.h.create_task(other, {"on": o})
            await k.h.run_until_parked()
        else:
            k.h.register(SLEEPER_FOR_WAITS)
            state["other"] = await k.h.create_task(SLEEPER_FOR_WAITS, {"keys": ["a"]})
            await k.h.create_task(inner)
        await k.h.run_until_parked()
        assert errors and message in errors[0]

    run(go())


SLEEPER_FOR_WAITS = SLEEPER


def test_owner_ending_with_live_children_is_completing_and_aborts_them():
    async def spawn_and_finish(task, rt):
        def build(tx):
            tx.create_task(CHILD, {"i": 0}, key="c")
            tx.create_task(CHILD, {"i": 1}, key="bg", background=True)
            return Terminal(outcome=Completed(result="done early"))

        await rt.commit(build)

    async def go():
        owner = define_task("test.owner", 1, lambda _: "go", {"go": spawn_and_finish})
        k = Kit(owner, CHILD)
        await k.h.open()
        p = await k.h.create_task(owner)
        await k.h.run_until_parked()
        rec = k.h.task(p)
        assert rec.status == "completing"
        # the ordinary child was abort-marked and has ended; background work is kept
        aborted_child = keyed_child(k, p, "c")
        assert k.h.outcome(aborted_child).status == "aborted"
        kids = children(k, p)
        assert [(c.input["i"], c.abort_marked) for c in kids] == [(1, False)]
        await k.h.signal(kids[0].id, ANSWER, "go", {"text": "bg done"})
        await k.h.run_until_parked()
        assert k.h.outcome(kids[0].id).result == "bg done"
        assert k.h.outcome(p).result == "done early"
        assert await k.h.signal(p, ANSWER, "x", {"text": "y"}) == "closed"

    run(go())
