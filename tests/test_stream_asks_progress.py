"""Workflow questions and progress in the session event stream (bide.engine.events,
bide.engine.progress): ``ask_opened`` in the commit that publishes a question, ``ask_answered``
and ``ask_closed`` in the commit that settles it; ``progress`` coalesced per run (at most one
event per interval, the latest value winning) with the last value always written in the
commit that parks or ends the run. On the SQLite store with a manual clock."""

from __future__ import annotations

import pytest
from kit import HOUR, run
from test_workflow_support import Note, Tools

from bide import SQLiteStore
from bide.engine.events import read_events
from bide.engine.progress import PROGRESS_INTERVAL
from bide.testing import Crash, FaultyStore
from bide.tools import Sleep, define_tool
from bide.workflow import answer_in, define_workflow_tool, pending_asks

OPTIONS = [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]


def events(t: Tools, *types: str) -> list[dict]:
    found = read_events(t.kit.store, "s1", limit=1000)
    return [e for e in found if not types or e["type"] in types]


async def confirm(args, ctx):
    answer = await ctx.ask(f"Ship {args.note}?", options=OPTIONS, display="select")
    return answer.option_id


def test_a_question_is_reported_when_asked_and_when_answered():
    async def go():
        t = await Tools(define_workflow_tool("ship", "", Note, confirm)).start()
        call = await t.call("ship", {"note": "v2"})
        await t.h.run_until_parked()
        [ask] = pending_asks(t.h)
        [opened] = events(t, "ask_opened")
        assert opened["ask"] == ask.id and opened["task_id"] == call
        shown = (opened["tool"], opened["prompt"], opened["display"])
        assert shown == ("ship", "Ship v2?", "select")
        assert [o["id"] for o in opened["options"]] == ["yes", "no"]
        assert opened["allow_freeform"] is False
        assert opened["answer_path"] == f"/sessions/s1/asks/{ask.id}/answer"
        assert answer_in(t.h, ask.id, option_id="maybe") == "invalid"  # nothing written
        assert answer_in(t.h, ask.id, option_id="no") == "delivered"
        assert answer_in(t.h, ask.id, option_id="yes") == "duplicate"  # no second event
        await t.h.run_until_parked()
        assert t.result(call).text == "no"
        assert [e["type"] for e in events(t, "ask_opened", "ask_answered", "ask_closed")] == [
            "ask_opened",
            "ask_answered",
        ]
        [answered] = events(t, "ask_answered")
        assert answered["ask"] == ask.id and answered["task_id"] == call
        assert answered["answer"] == {"option_id": "no", "text": None}
        # A replayed run does not publish the question again.
        assert len(events(t, "ask_opened")) == 1

    run(go())


def test_questions_withdrawn_when_their_run_ends_are_reported_closed_with_the_reason():
    async def abandon(args, ctx):
        first = ctx.ask("Still there?", allow_freeform=True)
        second = ctx.ask("Really?", allow_freeform=True, name="again")
        result = await ctx.first(first, second, timeout=HOUR)
        if args.note == "raise":
            raise RuntimeError("gave up")
        return "gave up" if result.timed_out else "answered"

    async def go():
        t = await Tools(define_workflow_tool("abandon", "", Note, abandon)).start()
        returns = await t.call("abandon", {}, key="returns")
        raises = await t.call("abandon", {"note": "raise"}, key="raises")
        cancelled = await t.call("abandon", {}, key="cancelled")
        await t.h.run_until_parked()
        asks = {}
        for a in pending_asks(t.h):
            asks.setdefault(a.task_id, []).append(a.id)
        await t.h.abort(cancelled, "stop")
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        closed = {e["task_id"]: e for e in events(t, "ask_closed")}
        assert set(closed) == {returns, raises, cancelled}  # one event per run's end
        assert {task: e["reason"] for task, e in closed.items()} == {
            returns: "completed",
            raises: "failed",
            cancelled: "cancelled",
        }
        for task, e in closed.items():
            assert sorted(e["asks"]) == sorted(asks[task])
        # An answer after the end is refused and reports nothing.
        assert answer_in(t.h, asks[returns][0], text="late") == "closed"
        assert len(events(t, "ask_closed")) == 3 and events(t, "ask_answered") == []

    run(go())


class CrashAtAsk(FaultyStore):
    """Dies at the commit that writes a question with ``status`` (before or after it is
    stored): ``open`` publishes it, ``answered`` answers it."""

    def __init__(self, inner, when, status="open"):
        super().__init__(inner, when=when)
        self.armed = True
        self.status = status

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        if self.armed and any(
            d.key.startswith("ask/") and d.body["status"] == self.status for d in docs
        ):
            self.armed = False
            self.fail_at = self.commits + 1
        return super().commit(session_id, expected_seq, writes, docs, absent=absent)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_the_asking_commit_never_reports_a_question_not_asked(when):
    async def go():
        store = CrashAtAsk(SQLiteStore(), when)
        t = await Tools(define_workflow_tool("ship", "", Note, confirm), store=store).start()
        await t.call("ship", {"note": "v3"})
        with pytest.raises(Crash):
            await t.h.run_until_parked()
        asked = store.list_docs("s1", "ask/")
        opened = [e for e in read_events(store, "s1", limit=100) if e["type"] == "ask_opened"]
        # Exactly as the question: both written or neither.
        assert bool(asked) == bool(opened) == (when == "after")
        await t.reopen()
        await t.h.run_until_parked()
        [ask] = pending_asks(t.h)
        opened = [e for e in read_events(store, "s1", limit=100) if e["type"] == "ask_opened"]
        assert [e["ask"] for e in opened] == [ask.id]  # once, after the restart too

    run(go())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_the_answering_commit_reports_the_answer_only_if_it_was_stored(when):
    async def go():
        store = CrashAtAsk(SQLiteStore(), when, status="answered")
        t = await Tools(define_workflow_tool("ship", "", Note, confirm), store=store).start()
        call = await t.call("ship", {"note": "v4"})
        await t.h.run_until_parked()
        [ask] = pending_asks(t.h)
        with pytest.raises(Crash):
            answer_in(t.h, ask.id, option_id="yes")
        stored = store.get_doc("s1", f"ask/{ask.id}").body["status"] == "answered"
        answered = [e for e in read_events(store, "s1", limit=100) if e["type"] == "ask_answered"]
        assert stored == bool(answered) == (when == "after")
        await t.reopen()
        if when == "before":  # the person tries again
            assert answer_in(t.h, ask.id, option_id="yes") == "delivered"
        await t.h.run_until_parked()
        assert t.result(call).text == "yes"
        answered = [e for e in read_events(store, "s1", limit=100) if e["type"] == "ask_answered"]
        assert len(answered) == 1

    run(go())


# --- progress --------------------------------------------------------------------------------


def counting(clocks: list, reports: int, per_second: int):
    """A tool that reports ``reports`` values, letting a second pass every ``per_second``
    (on the clock in ``clocks``, set once the kit exists)."""

    async def count(args: Note, api):
        for i in range(reports):
            api.progress(f"{i}")
            if i % per_second == per_second - 1:
                clocks[0].advance(1)
        return "counted"

    return define_tool("count", "", Note, count, replay="safe")


def test_progress_is_coalesced_to_one_event_per_interval_and_the_last_is_kept():
    async def go():
        clocks: list = []
        t = Tools(counting(clocks, 100, 10))
        clocks.append(t.kit.clock)
        await t.start()
        call = await t.call("count", {})
        await t.h.run_until_parked()
        assert t.result(call).text == "counted"
        seen = events(t, "progress")
        # 100 reports over 10 seconds: the first at once, one more per 5 s, and the last
        # with the commit that ended the call.
        assert PROGRESS_INTERVAL == 5.0
        assert [(e["value"], e["final"]) for e in seen] == [
            ("0", False),
            ("50", False),
            ("99", True),
        ]
        assert all(e["task_id"] == call and e["tool"] == "count" for e in seen)
        assert seen[1]["at"] - seen[0]["at"] >= PROGRESS_INTERVAL

    run(go())


class Recording(FaultyStore):
    """Keeps the documents and records of every commit."""

    def __init__(self, inner):
        super().__init__(inner)
        self.log: list[tuple[list, list]] = []

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        self.log.append((list(writes), list(docs)))
        return super().commit(session_id, expected_seq, writes, docs, absent=absent)


def test_the_last_progress_of_a_run_is_written_with_the_commit_that_parks_it():
    async def go():
        clocks: list = []

        async def slow(args: Note, api):
            clock = clocks[0]
            if api.wake is not None:
                return "woke"
            api.progress("starting")  # written at once (in a commit of its own)
            api.progress("half")  # inside the interval: waits
            clock.advance(PROGRESS_INTERVAL)
            await api.write(lambda tx: tx.put_doc("mark", 1))  # "half" rides along
            api.progress("parking")  # inside the interval again: waits for the park
            return Sleep(checkpoint={"n": 1}, until=clock.now() + 60)

        store = Recording(SQLiteStore())
        t = Tools(define_tool("slow", "", Note, slow, replay="safe"), store=store)
        clocks.append(t.kit.clock)
        await t.start()
        call = await t.call("slow", {})
        await t.h.run_until_parked()
        assert t.status(call) == "sleeping"
        seen = events(t, "progress")
        assert [(e["value"], e["final"]) for e in seen] == [
            ("starting", False),
            ("half", False),
            ("parking", True),
        ]
        by_event = {}
        for writes, docs in store.log:
            for d in docs:
                if d.key.startswith("event/") and d.body.get("type") == "progress":
                    by_event[d.body["value"]] = (writes, [x.key for x in docs])
        assert by_event["starting"][0] == []  # alone: no task record changed
        assert "mark" in by_event["half"][1]  # with the run's next commit
        parked = by_event["parking"][0]
        assert [r.state.status for r in parked if r.id == call] == ["sleeping"]

    run(go())


def test_workflow_progress_reaches_the_stream_once_per_value_across_replays():
    async def stages(args, ctx):
        ctx.progress({"stage": "fetching"})
        await ctx.sleep(60)
        ctx.progress({"stage": "done", "n": float("nan")})  # not JSON: kept as its text
        return "ok"

    async def go():
        t = await Tools(define_workflow_tool("stages", "", Note, stages)).start()
        call = await t.call("stages", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(60)
        await t.h.run_until_parked()
        assert t.result(call).text == "ok"
        seen = events(t, "progress")
        assert [e["value"] for e in seen] == [
            {"stage": "fetching"},
            str({"stage": "done", "n": float("nan")}),
        ]  # the replay after the sleep reported "fetching" to nobody
        assert all(e["tool"] == "stages" and e["task_id"] == call for e in seen)
        assert t.progress.last(call)["stage"] == "done"  # the in-memory sink still hears it

    run(go())


def test_a_background_workflow_reports_progress_and_its_questions_too():
    async def chores(args, ctx, task):
        ctx.progress("sweeping")
        ctx.progress("mopping")  # inside the interval: written when the run parks
        answer = await ctx.ask("Windows too?", allow_freeform=True)
        ctx.progress(f"windows: {answer.text}")
        return "clean"

    async def go():
        t = await Tools(define_workflow_tool("chores", "", Note, chores, lifetime="task")).start()
        call = await t.call("chores", {})
        await t.h.run_until_parked()
        worker = t.result(call).details["task_id"]
        [ask] = pending_asks(t.h)
        assert answer_in(t.h, ask.id, text="yes") == "delivered"
        await t.h.run_until_parked()
        seen = events(t, "progress", "ask_opened", "ask_answered")
        assert [(e["type"], e.get("value"), e.get("final")) for e in seen] == [
            ("progress", "sweeping", False),
            ("ask_opened", None, None),
            ("progress", "mopping", True),  # with the commit that parked on the question
            ("ask_answered", None, None),
            ("progress", "windows: yes", False),  # a new run: at once
        ]
        assert {e["task_id"] for e in seen} == {worker}

    run(go())


class FakeTx:
    """A commit's tx for the progress stream alone."""

    def __init__(self) -> None:
        self.docs: dict = {}

    def now(self) -> float:
        return 0.0

    def get_doc(self, key):
        return self.docs.get(key)

    def put_doc(self, key, body):
        self.docs[key] = body


def test_a_final_value_a_full_commit_has_no_room_for_is_written_after_it():
    from bide.engine.progress import ProgressStream
    from bide.engine.store.base import MAX_COMMIT_ITEMS

    flushed: list = []
    stream = ProgressStream("t-1", lambda: 100.0, flushed.append)
    stream.report("first")  # the first report is due: flushed at once
    assert len(flushed) == 1
    stream.report("last")  # inside the interval: waits
    full = FakeTx()
    stream.stage(full, final=True, items=MAX_COMMIT_ITEMS - 1)
    assert full.docs == {} and stream.leftover is not None  # the event and head do not fit
    after = FakeTx()
    stream.write_leftover(after)
    [event] = [b for k, b in after.docs.items() if k.startswith("event/")]
    assert (event["value"], event["final"]) == ("last", True)
    roomy = FakeTx()
    stream.stage(roomy, final=True, items=MAX_COMMIT_ITEMS - 2)
    assert stream.leftover is None and len(roomy.docs) == 2
