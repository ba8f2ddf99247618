"""Racing waits: ``ctx.first(a, b, ..., timeout=)`` resolves with the first of its waits to
resolve (a :class:`RaceResult`: which one won and its value, or that the deadline came first);
``ctx.race(op, timeout=)`` is the older single-wait form (the value, or None at the deadline).

What can race: every operation that waits, i.e. ``ctx.sleep``, ``ctx.wait_for``, ``ctx.ask``,
``hook.next()`` (or a :class:`~bide.workflow.Webhook` handle's next request) and
``ctx.agent``. Steps, ``ctx.webhook()``, ``task.post_message`` and races themselves do not
wait and are refused when the race is created. A loser stays an operation of the run: await
or race it again later and it goes on waiting (a question stays open, a subagent keeps
working, a webhook's next request is still the next one, a sleep keeps its time, a
``wait_for`` still takes the value of its key): a race parks with
``expire_on_deadline=False``, so its deadline (or a raced sleep's) wakes the run and leaves the
keys open; a value sent after it is ``delivered`` and read when the ``wait_for`` is awaited
again (or wins the race, when it came before the run woke). One exception: when a raced
``wait_for`` has a ``timeout=`` of its own, the park expires its keys at its deadline as any
sleep does (design 001's deadline race: a sender is told ``closed``, never ``delivered`` for a
value reported timed out), and a ``wait_for`` whose key expired so raises
:class:`~bide.workflow.errors.WaitTimeout` when awaited again; wait on a new key instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ...engine.memo_pages import unshared
from ...engine.signals import SignalKey
from ..errors import WorkflowError
from ..history import result_memo
from .base import Op, Outcome, Pending, Raise, Ready

if TYPE_CHECKING:
    from ..context import WorkflowContext

T = TypeVar("T")


@dataclass(frozen=True)
class RaceResult(Generic[T]):
    """How a race ended: ``winner`` is the position of the operation that resolved first
    (in the order given to :meth:`~bide.workflow.WorkflowContext.first`) and ``value`` its
    value, or ``winner`` is None and ``timed_out`` true when the deadline came first. A
    winner's value may be ``None`` (a signal or a webhook request of JSON ``null``): test
    ``timed_out``, never the value."""

    winner: int | None
    value: T | None = None

    @property
    def timed_out(self) -> bool:
        """The race's deadline came before any of its operations resolved."""
        return self.winner is None


class RaceOp(Op[Any]):
    """A race of waits (see the module). ``legacy`` is ``ctx.race``'s form: the winner's
    value, or None at the deadline."""

    kind = "race"

    def __init__(
        self,
        ctx: WorkflowContext,
        ops: Sequence[Op[Any]],
        timeout: float | None,
        until: float | None,
        *,
        legacy: bool = False,
    ) -> None:
        seen: set[int] = set()
        for op in ops:
            if not isinstance(op, Op):
                raise WorkflowError(f"only durable operations can race, not {op!r}")
            if not op.waits or isinstance(op, RaceOp):
                raise WorkflowError(
                    f"only waits can race (sleep, wait_for, ask, a webhook's next request, "
                    f"agent), not {op!r}: await it on its own"
                )
            if op._ctx is not ctx:
                raise WorkflowError(f"{op!r} belongs to another run")
            if op.seq in seen:
                raise WorkflowError(f"{op!r} is in this race twice")
            seen.add(op.seq)
        if not ops:
            raise WorkflowError("a race needs at least one operation")
        if timeout is not None and timeout < 0:
            raise WorkflowError(f"a race's timeout must be >= 0 seconds, not {timeout}")
        for op in ops:
            if getattr(op, "heartbeat", None) is not None:
                # A missed beat expires every key the race sleeps on, not only this one's.
                raise WorkflowError(f"{op!r} has a heartbeat and cannot be raced; use timeout=")
        super().__init__(ctx, "race" if legacy else "first")
        self._ops = list(ops)
        self._timeout = timeout
        self._until = until
        self._legacy = legacy

    def arguments(self) -> Any:
        return {"of": [op.seq for op in self._ops], "timeout": self._timeout, "until": self._until}

    def params(self) -> dict[str, Any]:
        until = self._until
        if until is None and self._timeout is not None:
            until = self._ctx._rt.now() + self._timeout
        return {"of": [op.seq for op in self._ops], "until": until}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx, rt = self._ctx, self._ctx._rt
        for index, op in enumerate(self._ops):
            if await rt.memo(result_memo(op.seq)) is not None:
                return Ready({"winner": index})
        waiting: list[Pending] = []
        lost: list[tuple[int, Op[Any], dict[str, Any], Raise]] = []
        for index, op in enumerate(self._ops):
            own = await ctx._begin(op)
            outcome = await op.poll(own)
            if isinstance(outcome, Pending):
                waiting.append(outcome)
                continue
            if isinstance(outcome, Raise) and outcome.lost:
                lost.append((index, op, own, outcome))  # never a winner while others wait
                continue
            await ctx._resolve(op, own, outcome)  # the op's own record first: it won
            return Ready({"winner": index})
        until = record.get("until")
        if until is not None and rt.now() >= until:
            return Ready({"winner": None})
        if not waiting and lost:  # nothing else can resolve: the first one ends the race
            index, op, own, outcome = lost[0]
            await ctx._resolve(op, own, outcome)
            return Ready({"winner": index})
        return _merge(waiting, until)

    def decode(self, stored: dict[str, Any]) -> Any:
        winner = stored["v"]["winner"]
        if winner is None:
            return None if self._legacy else RaceResult(None)
        op = self._ops[winner]
        own = unshared(self._ctx._rt.recorded(result_memo(op.seq)))
        value = op.decode(own)  # a winner that resolved with an error raises it here
        return value if self._legacy else RaceResult(winner, value)


def _merge(waiting: list[Pending], until: float | None) -> Pending:
    """One park for the waits still open. Its deadline leaves their keys open unless one of
    them has a deadline of its own (a ``wait_for`` with ``timeout=``): at that deadline its key
    must expire (design 001's deadline race) and the engine expires a sleep's keys together."""
    keys: dict[str, SignalKey[Any]] = {}
    bells: list[str] = []
    deadlines = [] if until is None else [until]
    for pending in waiting:
        keys.update({k.slot: k for k in pending.keys})
        bells.extend(b for b in pending.bells if b not in bells)
        if pending.until is not None:
            deadlines.append(pending.until)
    own = any(pending.keys and pending.until is not None for pending in waiting)
    deadline = min(deadlines) if deadlines else None
    return Pending(tuple(keys.values()), tuple(bells), deadline, expire=own)
