"""Awaiting a promise from a tool: park on a signal key, wake on the outcome or the timeout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.signals import SignalExpired, SignalValue
from ..tools.api import ToolExecutionApi
from ..tools.results import Sleep
from .core import read_promise, register_waiter
from .model import PROMISE, PromiseDoc, PromiseError, PromiseSettled
from .rules import await_key


@dataclass(frozen=True)
class AwaitTimedOut:
    """The await's timeout ended this waiting interval; the promise itself is still open."""

    promise: PromiseDoc


async def await_promise(
    api: ToolExecutionApi,
    promise_id: str,
    *,
    timeout: float | None = None,
    interval: int = 0,
    checkpoint: Any = None,
) -> PromiseSettled | AwaitTimedOut | Sleep:
    """One await interval of a tool call on a promise.

    Returns the outcome once the promise is terminal, :class:`AwaitTimedOut` once ``timeout``
    seconds passed first (the promise stays open), or a :class:`Sleep` for ``execute()`` to
    return: the call parks on ``PROMISE.key("<id>#<interval>")`` and runs again on the outcome
    or at the timeout. The key is registered on the promise before the park, in its own commit,
    so an outcome that lands in between is stored early and wakes the park at once.

    A call that awaits the same promise again after a timeout passes the next ``interval``: the
    timed-out key is expired for good. Raises :class:`PromiseError` for an unknown promise.
    """
    key = await_key(promise_id, interval)
    state = await api.read_signal(PROMISE, key)
    if isinstance(state, SignalValue):
        return state.value
    doc = read_promise(api, promise_id)
    if doc is None:
        raise PromiseError(f"no promise {promise_id!r} in this session")
    if doc.terminal:
        # Ended before this await registered, or after its interval expired.
        return PromiseSettled.of(doc)
    if isinstance(state, SignalExpired):
        return AwaitTimedOut(doc)
    task_id = api.task_id
    seen: PromiseDoc = await api.write(lambda tx: register_waiter(tx, promise_id, task_id, key))
    if seen.terminal:
        return PromiseSettled.of(seen)
    until = None
    if timeout is not None:
        # Fixed once per interval: a rerun of a cut-off run sleeps to the same time.
        until = await api.memo(f"bide.promise.until.{key}", api.now() + timeout)
    return Sleep(checkpoint=checkpoint, signals=[PROMISE.key(key)], until=until)
