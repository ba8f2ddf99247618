"""Durable promises (design 002): first terminal write wins, hard deadline vs await timeout,
one key per await interval, delivery to every open await, scope, producer notices, restarts."""

from __future__ import annotations

import pytest
from kit import HOUR, Kit, run
from pydantic import BaseModel

from bide import Completed, InvalidPark, Sleeping, Terminal, WakeExpired, define_task
from bide.promises import (
    PROMISE,
    PROMISE_CANCELLED,
    AwaitTimedOut,
    NoticeRoute,
    PromiseDoc,
    PromiseError,
    Promises,
    PromiseSettled,
    ResolveResult,
    await_key,
    await_promise,
    create_promise,
    decide_resolution,
    promise_task_kinds,
    promise_tools,
    read_promise,
    register_waiter,
)
from bide.tools import ToolRegistry, ToolResult, define_tool, result_of

NOW = 1000.0


def doc(**changes) -> PromiseDoc:
    return PromiseDoc(id="p1", created_at=NOW).model_copy(update=changes)


# --- the rules, as pure functions --------------------------------------------------------------


def test_first_terminal_write_wins():
    first = decide_resolution(doc(), "resolved", 1, None, NOW, "a")
    assert first.result == ResolveResult.SETTLED and first.doc.status == "resolved"
    second = decide_resolution(first.doc, "rejected", None, "boom", NOW + 1, "b")
    assert second.result == ResolveResult.IGNORED and second.doc is None


def test_a_late_success_never_revives_a_cancelled_promise():
    cancelled = decide_resolution(doc(), "cancelled", None, "not needed", NOW, "host").doc
    late = decide_resolution(cancelled, "resolved", {"ok": True}, None, NOW + 5, "producer")
    assert late.result == ResolveResult.IGNORED and late.doc is None
    assert cancelled.status == "cancelled" and cancelled.value is None


def test_a_write_after_the_hard_deadline_ends_the_promise_expired():
    late = decide_resolution(doc(deadline=NOW), "resolved", 42, None, NOW, "producer")
    assert late.result == ResolveResult.EXPIRED
    assert late.doc.status == "expired" and late.doc.value is None
    early = decide_resolution(doc(deadline=NOW + 1), "resolved", 42, None, NOW, "producer")
    assert early.result == ResolveResult.SETTLED and early.doc.value == 42


def test_unknown_promise_and_non_terminal_writes():
    assert decide_resolution(None, "resolved", 1, None, NOW, "a").result == "not_found"
    with pytest.raises(ValueError, match="terminal write"):
        decide_resolution(doc(), "open", None, None, NOW, "a")


def test_await_keys_are_fresh_per_interval():
    assert await_key("p1", 0) == "p1#0" and await_key("p1", 1) == "p1#1"
    with pytest.raises(ValueError):
        await_key("p1", -1)


# --- promises in a session ---------------------------------------------------------------------


class Job(BaseModel):
    name: str
    deadline_hours: float | None = None


async def start_job(args: Job, api) -> ToolResult:
    """Creates a promise that the host resolves later; returns its handle."""
    pid = f"p-{args.name}"
    until = None if args.deadline_hours is None else api.now() + args.deadline_hours * HOUR
    await api.write(lambda tx: create_promise(tx, pid, deadline=until, label=args.name))
    return ToolResult.of_text(pid)


def session(*extra_kinds):
    registry = ToolRegistry([define_tool("start_job", "", Job, start_job), *promise_tools()])
    k = Kit(registry.task, *promise_task_kinds(), *extra_kinds)
    return k, registry


async def call(k, registry, name, arguments):
    return await k.h.create_task(registry.task, registry.call(name, arguments))


async def start(k, registry, name, **extra):
    t = await call(k, registry, "start_job", {"name": name, **extra})
    await k.h.run_until_parked()
    return result_of(k.h.outcome(t)).text


def test_promise_await_parks_until_the_host_resolves_it():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "a")
        waiter = await call(k, registry, "promise_await", {"promise_id": pid})
        wake = await k.h.run_until_parked()
        assert k.h.task(waiter).status == "sleeping"
        assert wake.at == k.clock.now() + 600  # the await's own timeout
        assert await Promises(k.h).resolve(pid, {"rows": 3}) == ResolveResult.SETTLED
        await k.h.run_until_parked()
        result = result_of(k.h.outcome(waiter))
        assert result.text == f'promise {pid} resolved: {{"rows": 3}}' and not result.is_error
        assert k.h.live_tasks == {}  # the keeper ended with the promise

    run(go())


def test_await_timeout_leaves_the_promise_open_and_the_hard_deadline_ends_it():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "slow", deadline_hours=2)
        waiter = await call(
            k, registry, "promise_await", {"promise_id": pid, "timeout_seconds": 60}
        )
        wake = await k.h.run_until_parked()
        assert wake.at == k.clock.now() + 60
        k.clock.advance(60)
        await k.h.run_until_parked()
        text = result_of(k.h.outcome(waiter)).text
        assert "still open after waiting 60s" in text
        assert Promises(k.h).get(pid).status == "open"  # the timeout ended one interval only
        assert k.h.wake().at == k.clock.now() - 60 + 2 * HOUR  # the keeper's hard deadline

        later = await call(k, registry, "promise_await", {"promise_id": pid, "timeout_seconds": 0})
        await k.h.run_until_parked()
        assert "is still open" in result_of(k.h.outcome(later)).text

        third = await call(
            k, registry, "promise_await", {"promise_id": pid, "timeout_seconds": 3600 * 5}
        )
        await k.h.run_until_parked()
        k.clock.advance(2 * HOUR)
        await k.h.run_until_parked()
        expired = result_of(k.h.outcome(third))
        assert expired.is_error and "expired: the hard deadline was reached" in expired.text
        assert Promises(k.h).get(pid).status == "expired"
        assert Promises(k.h).get(pid).settled_by.startswith("t-")  # the keeper wrote it
        late = await Promises(k.h).resolve(pid, "finally")
        assert late == ResolveResult.IGNORED and Promises(k.h).get(pid).value is None
        assert k.h.live_tasks == {}

    run(go())


def test_resolution_reaches_every_open_await():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "shared")
        a = await call(k, registry, "promise_await", {"promise_id": pid})
        b = await call(k, registry, "promise_await", {"promise_id": pid, "timeout_seconds": 30})
        await k.h.run_until_parked()
        assert [w.task for w in Promises(k.h).get(pid).waiters] == [a, b]
        await Promises(k.h).reject(pid, "the job crashed")
        await k.h.run_until_parked()
        for t in (a, b):
            r = result_of(k.h.outcome(t))
            assert r.is_error and r.text == f"promise {pid} rejected: the job crashed"

    run(go())


def test_an_outcome_before_the_await_is_read_from_the_document():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "quick")
        await Promises(k.h).resolve(pid, "done")
        t = await call(k, registry, "promise_await", {"promise_id": pid})
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(t)).text == f"promise {pid} resolved: done"
        bad = await call(k, registry, "promise_await", {"promise_id": "p-nope"})
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(bad)).text == "no promise 'p-nope' in this session"

    run(go())


def test_cancel_ignores_a_late_success_and_wakes_the_waiter():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "c")
        waiter = await call(k, registry, "promise_await", {"promise_id": pid})
        await k.h.run_until_parked()
        cancel = await call(k, registry, "promise_cancel", {"promise_id": pid, "reason": "moot"})
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(cancel)).text == f"promise {pid} cancelled"
        assert result_of(k.h.outcome(waiter)).text == f"promise {pid} cancelled: moot"
        assert await Promises(k.h).resolve(pid, "success!") == ResolveResult.IGNORED
        assert Promises(k.h).get(pid).status == "cancelled"
        again = await call(k, registry, "promise_cancel", {"promise_id": pid})
        await k.h.run_until_parked()
        assert "already ended cancelled" in result_of(k.h.outcome(again)).text

    run(go())


# A task that awaits the same promise in several intervals, each with a 10-second timeout.
def looping_awaiter():
    async def wait(task, rt):
        n = int(task.checkpoint.get("interval", 0))
        state = await rt.read_signal(PROMISE, await_key(task.input["promise"], n))
        if state is not None and hasattr(state, "value"):
            await rt.commit(Terminal(outcome=Completed(result={"intervals": n + 1})))
            return
        if isinstance(task.wake, WakeExpired):
            n += 1  # the timed-out key is expired for good: the next interval needs a new one
        key = await_key(task.input["promise"], n)

        def build(tx):
            register_waiter(tx, task.input["promise"], task.id, key)
            return Sleeping(
                checkpoint={"phase": "wait", "interval": n},
                signals=(PROMISE.key(key),),
                until=rt.now() + 10,
            )

        await rt.commit(build)

    return define_task("test.looping-awaiter", 1, lambda _: "wait", {"wait": wait})


def test_each_await_interval_uses_a_fresh_key_and_a_reused_expired_key_is_refused():
    async def go():
        loop = looping_awaiter()
        k, registry = session(loop)
        await k.h.open()
        pid = await start(k, registry, "loop")
        t = await k.h.create_task(loop, {"promise": pid})
        await k.h.run_until_parked()
        for _ in range(2):
            k.clock.advance(10)
            await k.h.run_until_parked()
        keys = [w.key for w in Promises(k.h).get(pid).waiters]
        assert keys == [f"{pid}#0", f"{pid}#1", f"{pid}#2"]
        await Promises(k.h).resolve(pid, 7)
        await k.h.run_until_parked()
        assert k.h.outcome(t).result == {"intervals": 3}

    run(go())

    # and the engine refuses a sleep on an expired key, which is why the intervals differ
    from bide.engine.records import SignalSlot, TaskRecord
    from bide.engine.rules import check_sleep
    from bide.engine.slots import nothing_moved
    from bide.engine.state import Running

    record = TaskRecord(
        id="t",
        session_id="s",
        kind="k",
        version=1,
        state=Running(checkpoint="x"),
        created_at=0,
        signals={PROMISE.key("p#0").slot: SignalSlot(expired=True)},
    )
    with pytest.raises(InvalidPark, match="expired"):
        check_sleep(
            record, Sleeping(checkpoint="x", signals=(PROMISE.key("p#0"),)), moved=nothing_moved
        )


def test_a_scoped_promise_is_cancelled_when_its_scope_ends_and_the_producer_is_told():
    producer_log = []

    async def scope_phase(task, rt):
        if task.checkpoint["phase"] == "start":

            def build(tx):
                create_promise(
                    tx,
                    "p-scoped",
                    scope=task.id,
                    notice=NoticeRoute(task=task.input["producer"], key="job-1"),
                )
                return Sleeping(checkpoint="finish", until=rt.now() + 5)

            await rt.commit(build)
        else:
            await rt.commit(Terminal(outcome=Completed()))

    async def produce(task, rt):
        notice = await rt.read_signal(PROMISE_CANCELLED, "job-1")
        if notice is not None:
            producer_log.append(notice.value.model_dump())
            await rt.commit(Terminal(outcome=Completed()))
            return
        await rt.commit(Sleeping(checkpoint="produce", signals=(PROMISE_CANCELLED.key("job-1"),)))

    scoped = define_task(
        "test.scope", 1, lambda _: "start", {"start": scope_phase, "finish": scope_phase}
    )
    producer = define_task("test.producer", 1, lambda _: "produce", {"produce": produce})

    async def go():
        k, _registry = session(scoped, producer)
        await k.h.open()
        p = await k.h.create_task(producer)
        s = await k.h.create_task(scoped, {"producer": p})
        await k.h.run_until_parked()
        assert Promises(k.h).get("p-scoped").status == "open"
        k.clock.advance(5)
        await k.h.run_until_parked()
        assert k.h.outcome(s).status == "completed"
        promise = Promises(k.h).get("p-scoped")
        assert promise.status == "cancelled" and "owner ended" in promise.error
        assert producer_log == [
            {
                "promise_id": "p-scoped",
                "key": "result",
                "status": "cancelled",
                "reason": "owner ended",
                "invocation": None,
                "correlation": None,
            }
        ]
        assert k.h.live_tasks == {}

    run(go())


def test_the_close_task_is_aborted_once_every_promise_of_its_group_is_terminal():
    async def idle(task, rt):
        await rt.commit(Sleeping(checkpoint="idle", until=rt.now() + 100 * HOUR))

    execution = define_task("test.execution", 1, lambda _: "idle", {"idle": idle})

    async def go():
        k, _ = session(execution)
        await k.h.open()
        ex = await k.h.create_task(execution)
        group = ["p-a", "p-b"]
        for pid in group:
            await Promises(k.h).create(pid, group=group, close_task=ex, producer=ex)
        await k.h.run_until_parked()
        await Promises(k.h).resolve("p-a", 1)
        await k.h.run_until_parked()
        assert k.h.task(ex).live  # one promise is still open
        await Promises(k.h).cancel("p-b", "no longer needed")
        await k.h.run_until_parked()
        assert k.h.outcome(ex).status == "aborted"
        assert k.h.task(ex).abort_reason == "all its promises are terminal"

    run(go())


def test_a_deadline_in_the_past_is_refused():
    async def go():
        k, _ = session()
        await k.h.open()
        with pytest.raises(PromiseError, match="in the future"):
            await Promises(k.h).create("p-x", deadline=k.clock.now())
        assert Promises(k.h).get("p-x") is None

    run(go())


def test_a_parked_await_survives_a_crash_and_the_deadline_still_fires_after_restart():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "durable", deadline_hours=1)
        resolved = await start(k, registry, "other")
        waiter = await call(
            k, registry, "promise_await", {"promise_id": pid, "timeout_seconds": 7200}
        )
        other = await call(k, registry, "promise_await", {"promise_id": resolved})
        await k.h.run_until_parked()
        h = await k.reopen()  # the process died; a new one opens the same store
        assert h.task(waiter).status == "sleeping"
        assert await Promises(h).resolve(resolved, "after restart") == "settled"
        await h.run_until_parked()
        assert result_of(h.outcome(other)).text == f"promise {resolved} resolved: after restart"
        k.clock.advance(HOUR)
        h = await k.reopen()
        await h.run_until_parked()
        assert result_of(h.outcome(waiter)).text.startswith(f"promise {pid} expired")
        assert read_promise(h, pid).status == "expired"

    run(go())


def test_await_promise_returns_the_outcome_or_a_timeout_to_custom_tools():
    seen = []

    class Pid(BaseModel):
        pid: str

    async def custom(args: Pid, api):
        got = await await_promise(api, args.pid, timeout=5)
        if isinstance(got, PromiseSettled | AwaitTimedOut):
            seen.append(type(got).__name__)
            return "done"
        return got

    async def go():
        registry = ToolRegistry([define_tool("custom", "", Pid, custom, replay="safe")])
        k = Kit(registry.task, *promise_task_kinds())
        await k.h.open()
        await Promises(k.h).create("p1")
        await k.h.create_task(registry.task, registry.call("custom", {"pid": "p1"}))
        await k.h.run_until_parked()
        k.clock.advance(5)
        await k.h.run_until_parked()
        await k.h.create_task(registry.task, registry.call("custom", {"pid": "p1"}))
        await k.h.run_until_parked()
        await Promises(k.h).resolve("p1", "v")
        await k.h.run_until_parked()
        assert seen == ["AwaitTimedOut", "PromiseSettled"]

    run(go())
