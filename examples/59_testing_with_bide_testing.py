"""59: testing an app with ``bide.testing``: hours pass in a line, and a process dies on cue.

The tests below are the README's "Testing your app with bide.testing" block, verbatim (a
test keeps the two identical). They test the ask-a-person task of example 39:

1. ``ManualClock``: the four-hour deadline passes with ``clock.advance(4 * HOUR)``, and the
   task wakes ``expired``;
2. ``FaultyStore`` and ``Crash``: the process dies right after the commit that parks the task
   (the write landed; the process never learned it); a new harness on the same store finds
   the task asleep, and the answer still reaches it.

Run it from the repository root:  PYTHONPATH=shared python examples/59_testing_with_bide_testing.py
Or put the block in a test file and run it with pytest.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

from bide import HOUR, Completed, Harness, ManualClock, SequentialIds, SQLiteStore
from bide.testing import Crash, FaultyStore

# The task and signal under test: example 39's AskPerson and ANSWER.
_spec = importlib.util.spec_from_file_location(
    "ask_a_person", Path(__file__).with_name("39_ask_a_person.py")
)
assert _spec is not None and _spec.loader is not None
_ask = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ask)
AskPerson, ANSWER = _ask.AskPerson, _ask.ANSWER

# --- README: begin ----------------------------------------------------------------------------


def test_an_unanswered_question_expires_after_four_hours() -> None:
    async def go() -> None:
        clock = ManualClock()  # time moves only when the test moves it
        harness = Harness(SQLiteStore(), "s1", [AskPerson], clock=clock, ids=SequentialIds())
        await harness.open()
        task_id = await harness.create_task(AskPerson, {"question": "Deploy?"})
        await harness.run_until_parked()
        assert harness.outcome(task_id) is None  # asleep: nothing runs

        clock.advance(4 * HOUR)  # four hours, in a line
        await harness.run_until_parked()
        assert harness.outcome(task_id) == Completed(result={"text": None, "wake": "expired"})

    asyncio.run(go())


def test_a_crash_right_after_the_park_loses_nothing() -> None:
    async def go() -> None:
        # Die right after the commit that parks the task: it is written, but the process
        # never learns so. Crash is a BaseException: no `except Exception` swallows it.
        store = FaultyStore(
            SQLiteStore(),
            match=lambda writes: any(r.status == "sleeping" for r in writes),
            when="after",
        )
        harness = Harness(store, "s1", [AskPerson], ids=SequentialIds())
        await harness.open()
        task_id = await harness.create_task(AskPerson, {"question": "Deploy?"})
        died = False
        try:
            await harness.run_until_parked()
        except Crash:
            died = True  # the simulated process death
        assert died and store.crashed

        # A new process on the same store: the task is asleep, the answer reaches it.
        harness = Harness(store, "s1", [AskPerson])
        await harness.open()
        assert harness.task(task_id).status == "sleeping"
        assert await harness.signal(task_id, ANSWER, "answer", {"text": "yes"}) == "delivered"
        await harness.run_until_parked()
        assert harness.outcome(task_id) == Completed(result={"text": "yes", "wake": "signal"})

    asyncio.run(go())


# --- README: end ------------------------------------------------------------------------------


if __name__ == "__main__":
    test_an_unanswered_question_expires_after_four_hours()
    print("ok: ManualClock: the question expired after four hours")
    test_a_crash_right_after_the_park_loses_nothing()
    print("ok: FaultyStore: the process died after the park; the answer still arrived")
