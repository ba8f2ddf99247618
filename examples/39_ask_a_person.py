"""39: ask a person. A task sleeps on an answer signal with a four-hour deadline.

Nothing runs while it waits: the session only tells its host, through ``harness.wake()``,
when it must run again (``at``, the deadline) and whether it must run now (``active``).
The example shows:

1. a question answered in time: the task wakes with reason ``signal`` and reads the answer;
2. a question nobody answers: the deadline passes, the task wakes with reason ``expired``,
   and a late answer is ``closed``;
3. a question without a deadline: a session parked on signals alone has no ``at`` (no alarm);
4. a restart: the process holding the harness goes away while the task sleeps; a new harness
   on the same SQLite file delivers the answer and the task finishes.

Run it from the repository root:  PYTHONPATH=shared python examples/39_ask_a_person.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from datetime import UTC, datetime

from pydantic import BaseModel

from bide import (
    DAY,
    HOUR,
    MINUTE,
    Completed,
    Harness,
    ManualClock,
    SequentialIds,
    SignalResult,
    SignalValue,
    Sleeping,
    SQLiteStore,
    TaskRuntime,
    TaskView,
    Terminal,
    Wake,
    define_signal,
    define_task,
)

# --- README: begin ----------------------------------------------------------------------------


class Answer(BaseModel):
    text: str


class Question(BaseModel):
    question: str
    deadline_hours: float | None = 4  # None: wait for the answer however long it takes


ANSWER = define_signal("app.answer", 1, Answer)


async def ask(task: TaskView, rt: TaskRuntime) -> None:
    # Show the question to a person somewhere (a UI, a chat), then sleep. Nothing runs now.
    q = Question.model_validate(task.input)
    until = None if q.deadline_hours is None else rt.now() + q.deadline_hours * HOUR
    await rt.commit(Sleeping(checkpoint="answered", signals=(ANSWER.key("answer"),), until=until))


async def answered(task: TaskView, rt: TaskRuntime) -> None:
    # task.wake says why we run again: a signal on "answer", or "expired" at the deadline.
    state = await rt.read_signal(ANSWER, "answer")
    text = state.value.text if isinstance(state, SignalValue) else None
    why = task.wake.reason if task.wake is not None else None
    await rt.commit(Terminal(outcome=Completed(result={"text": text, "wake": why})))


AskPerson = define_task(
    "app.ask-person",
    1,
    initial=lambda _input: "ask",
    phases={"ask": ask, "answered": answered},
    input_type=Question,
)

# The host side, e.g. the webhook behind the UI's "Send" button:
#     await harness.signal(task_id, ANSWER, "answer", {"text": "yes"})

# --- README: end ------------------------------------------------------------------------------


def when(at: float | None) -> str:
    if at is None:
        return "None"
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(wake: Wake) -> str:
    return f"wake(): active={wake.active}, at={when(wake.at)}"


def step(title: str) -> None:
    print(f"\n== {title}")


async def main() -> None:
    clock = ManualClock()  # starts at 2026-01-01 00:00 UTC
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bide.sqlite")
        store = SQLiteStore(path)
        harness = Harness(store, "session-39", [AskPerson], clock=clock, ids=SequentialIds())
        await harness.open()
        print(f"time is {when(clock.now())}; the session lives in a SQLite file")

        step("1. A question answered in time")
        t1 = await harness.create_task(AskPerson, {"question": "Deploy to production?"})
        asked_at = clock.now()
        wake = await harness.run_until_parked()
        record = harness.task(t1)
        assert record is not None and record.status == "sleeping"
        print(f"  task {t1} asked and is {record.status}")
        print(f"  {describe(wake)}   (nothing runs; the host arms one alarm at the deadline)")
        assert wake == Wake(active=False, at=asked_at + 4 * HOUR)

        clock.advance(25 * MINUTE)
        result = await harness.signal(t1, ANSWER, "answer", {"text": "yes, go ahead"})
        print(f"  25 minutes later the person answers -> {result}")
        assert result is SignalResult.DELIVERED
        print(f"  {describe(harness.wake())}   (runnable now)")
        assert harness.wake().active

        wake = await harness.run_until_parked()
        outcome = harness.outcome(t1)
        print(f"  task {t1} ended: {outcome!r}")
        print(f"  {describe(wake)}   (no alarm left)")
        assert outcome == Completed(result={"text": "yes, go ahead", "wake": "signal"})
        assert wake == Wake(active=False, at=None)

        step("2. A question nobody answers within 4 hours")
        t2 = await harness.create_task(AskPerson, {"question": "Rotate the API keys?"})
        deadline = clock.now() + 4 * HOUR
        wake = await harness.run_until_parked()
        print(f"  task {t2} asked; {describe(wake)}")
        assert wake == Wake(active=False, at=deadline)

        clock.advance(4 * HOUR + MINUTE)
        print(f"  the clock moves past the deadline to {when(clock.now())}")
        print(f"  {describe(harness.wake())}   (the alarm fires: run now)")
        assert harness.wake() == Wake(active=True, at=deadline)
        result = await harness.signal(t2, ANSWER, "answer", {"text": "sorry, was away"})
        print(f"  a late answer before the worker ran -> {result}   (its deadline passed)")
        assert result is SignalResult.CLOSED

        wake = await harness.run_until_parked()
        outcome = harness.outcome(t2)
        print(f"  task {t2} ended: {outcome!r}")
        assert outcome == Completed(result={"text": None, "wake": "expired"})
        result = await harness.signal(t2, ANSWER, "answer", {"text": "sorry, was away"})
        print(f"  a late answer after the task ended -> {result}")
        assert result is SignalResult.CLOSED
        print(f"  {describe(wake)}")
        assert wake == Wake(active=False, at=None)

        step("3. A question without a deadline: parked on a signal alone")
        t3 = await harness.create_task(
            AskPerson, {"question": "Which logo do you prefer?", "deadline_hours": None}
        )
        wake = await harness.run_until_parked()
        print(f"  task {t3} asked; {describe(wake)}   (no alarm at all)")
        assert wake == Wake(active=False, at=None)
        clock.advance(3 * DAY)
        print(f"  three days later: {describe(harness.wake())}   (still nothing to run)")
        assert harness.wake() == Wake(active=False, at=None)
        result = await harness.signal(t3, ANSWER, "answer", {"text": "the blue one"})
        wake = await harness.run_until_parked()
        outcome = harness.outcome(t3)
        print(f"  the answer -> {result}; task {t3} ended: {outcome!r}")
        assert outcome == Completed(result={"text": "the blue one", "wake": "signal"})

        step("4. A restart while the task sleeps")
        t4 = await harness.create_task(AskPerson, {"question": "Merge the release branch?"})
        deadline = clock.now() + 4 * HOUR
        wake = await harness.run_until_parked()
        print(f"  task {t4} asked; {describe(wake)}")
        # The process goes away: no close(), no goodbye. The sleeping task is only in the file.
        store.close()
        del harness, store
        print("  the process holding the harness exits while the task sleeps")

        clock.advance(HOUR)
        store = SQLiteStore(path)
        harness = Harness(store, "session-39", [AskPerson], clock=clock)
        await harness.open()
        record = harness.task(t4)
        assert record is not None
        print(f"  an hour later a new harness opens the same file: task {t4} is {record.status}")
        print(f"  {describe(harness.wake())}   (the same alarm as before the restart)")
        assert record.status == "sleeping"
        assert harness.wake() == Wake(active=False, at=deadline)
        result = await harness.signal(t4, ANSWER, "answer", {"text": "merge it"})
        print(f"  the answer reaches the task -> {result}")
        assert result is SignalResult.DELIVERED
        wake = await harness.run_until_parked()
        outcome = harness.outcome(t4)
        print(f"  task {t4} ended: {outcome!r}")
        assert outcome == Completed(result={"text": "merge it", "wake": "signal"})
        assert wake == Wake(active=False, at=None)
        await harness.close()
        store.close()

    print("\nok: answered once, expired once, no alarm for a signal-only sleep, survived a restart")


if __name__ == "__main__":
    asyncio.run(main())
