"""Racing waits: ``ctx.race(op, timeout=)`` resolves with the first of its waits to resolve,
or None at its deadline; the losers stay usable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...engine.signals import SignalKey
from ..errors import WorkflowError
from ..history import result_memo
from .base import Op, Outcome, Pending, Ready

if TYPE_CHECKING:
    from ..context import WorkflowContext

T = TypeVar("T")


class RaceOp(Op[T | None]):
    """``ctx.race(op, timeout=)``: the op's value if it resolves before the deadline, else
    None. The op stays usable: await or race it again later (its request stays open)."""

    kind = "race"

    def __init__(
        self,
        ctx: WorkflowContext,
        ops: Sequence[Op[Any]],
        timeout: float | None,
        until: float | None,
    ) -> None:
        for op in ops:
            if not op.waits or isinstance(op, RaceOp):
                raise WorkflowError(f"only waits can race, not {op!r}")
            if op._ctx is not ctx:
                raise WorkflowError(f"{op!r} belongs to another run")
        super().__init__(ctx, "race")
        self._ops = list(ops)
        self._timeout = timeout
        self._until = until

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
        for index, op in enumerate(self._ops):
            own = await ctx._begin(op)
            outcome = await op.poll(own)
            if isinstance(outcome, Pending):
                waiting.append(outcome)
                continue
            await ctx._resolve(op, own, outcome)  # the op's own record first: it won
            return Ready({"winner": index})
        until = record.get("until")
        if until is not None and rt.now() >= until:
            return Ready({"winner": None})
        return _merge(waiting, until)

    async def decode(self, stored: dict[str, Any]) -> T | None:
        winner = stored["v"]["winner"]
        if winner is None:
            return None
        op = self._ops[winner]
        own = await self._ctx._rt.memo(result_memo(op.seq))
        return await op.decode(own)  # type: ignore[no-any-return]


def _merge(waiting: list[Pending], until: float | None) -> Pending:
    keys: dict[str, SignalKey[Any]] = {}
    bells: list[str] = []
    deadlines = [] if until is None else [until]
    for pending in waiting:
        keys.update({k.slot: k for k in pending.keys})
        bells.extend(b for b in pending.bells if b not in bells)
        if pending.until is not None:
            deadlines.append(pending.until)
    return Pending(tuple(keys.values()), tuple(bells), min(deadlines) if deadlines else None)
