"""Small task kinds and helpers the engine tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from pydantic import BaseModel

from bide import (
    HOUR,
    Completed,
    Harness,
    ManualClock,
    SequentialIds,
    SignalValue,
    Sleeping,
    SQLiteStore,
    Store,
    TaskDefinition,
    TaskRuntime,
    TaskView,
    Terminal,
    define_signal,
    define_task,
)

T = TypeVar("T")


class Answer(BaseModel):
    text: str


ANSWER = define_signal("test.answer", 1, Answer)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def sleeper(name: str = "test.sleeper") -> TaskDefinition:
    """Sleeps on the keys and deadline in its input, then completes with what woke it."""

    async def sleep(task: TaskView, rt: TaskRuntime) -> None:
        keys = tuple(ANSWER.key(k) for k in task.input.get("keys", []))
        until = task.input.get("for")
        await rt.commit(
            Sleeping(
                checkpoint="woke",
                signals=keys,
                until=None if until is None else rt.now() + until,
            )
        )

    async def woke(task: TaskView, rt: TaskRuntime) -> None:
        values = {}
        for k in task.input.get("keys", []):
            state = await rt.read_signal(ANSWER, k)
            values[k] = (
                state.value.text if isinstance(state, SignalValue) else (state and "expired")
            )
        wake = task.wake.to_dict() if task.wake else None
        await rt.commit(Terminal(outcome=Completed(result={"wake": wake, "values": values})))

    return define_task(name, 1, lambda _: "sleep", {"sleep": sleep, "woke": woke})


SLEEPER = sleeper()


class Kit:
    """A harness on a store with a manual clock and predictable ids."""

    def __init__(self, *kinds: TaskDefinition, store: Store | None = None) -> None:
        self.store: Store = store or SQLiteStore()
        self.clock = ManualClock()
        self.ids = SequentialIds()
        self.kinds = kinds
        self.h = self.harness()

    def harness(self) -> Harness:
        return Harness(self.store, "s1", self.kinds, clock=self.clock, ids=self.ids)

    async def reopen(self) -> Harness:
        """A crash: drop the harness without closing it, open a new one on the same store."""
        self.h = self.harness()
        await self.h.open()
        return self.h


__all__ = ["ANSWER", "HOUR", "SLEEPER", "Answer", "Kit", "run", "sleeper"]
