"""Waits on time and on signals: ``ctx.sleep(...)`` and ``ctx.wait_for(token, key, timeout=)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ...engine.failures import SignalFailed
from ...engine.signals import SignalExpired, SignalToken, SignalValue
from ..errors import HeartbeatMissed, WaitTimeout, WorkflowError
from .base import (
    DIGESTS,
    FAILURE,
    Op,
    Outcome,
    Pending,
    Raise,
    Ready,
    digest_text,
    failed,
    plain_json,
    raise_failure,
    string_json,
)

if TYPE_CHECKING:
    from ..context import WorkflowContext

T = TypeVar("T")
WAIT_FOR = "wait_for"


class SleepOp(Op[None]):
    """``ctx.sleep(...)``: park until a time fixed at the first evaluation."""

    kind = "sleep"

    def __init__(self, ctx: WorkflowContext, name: str, seconds: float, until: float | None):
        super().__init__(ctx, name)
        self._seconds = seconds
        self._until = until

    def arguments(self) -> Any:
        return {"seconds": self._seconds, "until": self._until}

    def params(self) -> dict[str, Any]:
        until = self._until if self._until is not None else self._ctx._rt.now() + self._seconds
        return {"until": until}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        if self._ctx._rt.now() >= record["until"]:
            return Ready(None)
        return Pending(until=record["until"])

    def holds(self, outcome: Ready | Raise) -> bool:
        # The time reached stays reached (a worker whose clock lags parks again briefly).
        return isinstance(outcome, Ready)

    def decode(self, stored: dict[str, Any]) -> None:
        return None


class WaitForOp(Op[T]):
    """``ctx.wait_for(token, key, timeout=, heartbeat=)``: the signal value delivered to this
    run under ``key``; with a timeout, :class:`WaitTimeout` when it does not come in time; with
    a heartbeat, :class:`HeartbeatMissed` when no beat came on the key for that long;
    :class:`~bide.engine.failures.FailureReceived` when a failure came instead."""

    kind = WAIT_FOR

    def __init__(
        self,
        ctx: WorkflowContext,
        token: SignalToken[T],
        key: str,
        timeout: float | None,
        heartbeat: float | None = None,
    ) -> None:
        super().__init__(ctx, f"{token.name}/{key}")
        if not isinstance(key, str) or not key:
            token.key(key)  # refuses it now, with the token's own error
        if heartbeat is not None and not (isinstance(heartbeat, int | float) and heartbeat > 0):
            raise WorkflowError(f"wait_for {self.name!r}: heartbeat must be > 0 seconds")
        self._token = token
        self._key = key
        self._timeout = timeout
        self.heartbeat = heartbeat

    def arguments(self) -> Any:
        args = {"signal": self._token.name, "key": self._key, "timeout": self._timeout}
        # Enters the digest only when set: older histories keep replaying.
        return args if self.heartbeat is None else {**args, "heartbeat": self.heartbeat}

    def digest(self) -> str:
        # The digest of arguments(). A replay digests every wait it passes, so the usual one
        # (no heartbeat, exact str key and signal, a plain timeout) is kept in DIGESTS under
        # what fixes its canonical JSON (the timeout as its JSON text: 1, 1.0 and True are
        # equal in Python), and on a miss its canonical JSON is written here, keys in order.
        timeout = plain_json(self._timeout) if self.heartbeat is None else None
        key, signal = self._key, self._token.name
        if timeout is None or type(key) is not str or type(signal) is not str:
            return super().digest()
        cached = (WAIT_FOR, signal, key, timeout)
        found = DIGESTS.get(cached)
        if found is None:
            found = digest_text(
                f'{{"key":{string_json(key)},"signal":{string_json(signal)},"timeout":{timeout}}}'
            )
            DIGESTS.put(cached, found)
        return found

    def params(self) -> dict[str, Any]:
        now = self._ctx._rt.now()
        until = None if self._timeout is None else now + self._timeout
        return {"until": until} if self.heartbeat is None else {"until": until, "beat": True}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        return await self._poll(record, read=True)

    async def poll_parking(self, record: dict[str, Any]) -> Outcome:
        # The key's document (a consumed or expired slot) is read only when finding nothing
        # would not park (a deadline passed): a park requires it absent instead, no GetItem,
        # and is refused when it is there (the body then runs again, the document known).
        outcome = await self._poll(record, read=False)
        if isinstance(outcome, Pending):
            return outcome
        return await self._poll(record, read=True)  # a request only if it found nothing

    async def _poll(self, record: dict[str, Any], *, read: bool) -> Outcome:
        rt = self._ctx._rt
        state = await rt.read_signal(self._token, self._key, read=read)
        if isinstance(state, SignalValue):
            return Ready(self._token.dump(state.value))
        if isinstance(state, SignalFailed):  # the sender said it failed: the body gets it
            return failed(state)
        until = record.get("until")
        if until is not None and rt.now() >= until:
            return Raise({"type": "WaitTimeout", "message": f"no {self.name!r} in time"})
        if isinstance(state, SignalExpired) and record.get("beat"):
            # Before until, only a missed beat expires the key of a heartbeat wait (it is
            # never raced: RaceOp refuses it).
            message = f"no beat on {self.name!r} for {self.heartbeat}s: the sender is presumed dead"
            return Raise({"type": "HeartbeatMissed", "message": message}, lost=True)
        if isinstance(state, SignalExpired):
            # A race it was in (or an earlier wait on the key) woke at a deadline: senders are
            # told "closed" from then on (design 001's deadline race), so it can only time out.
            message = (
                f"no {self.name!r}: its key expired at an earlier deadline (of a race it lost, "
                "or of an earlier wait on the same key); wait on a new key"
            )
            return Raise({"type": "WaitTimeout", "message": message}, lost=True)
        return Pending(keys=(self._token.key(self._key),), until=until, heartbeat=self.heartbeat)

    def holds(self, outcome: Ready | Raise) -> bool:
        # A value or a failure is kept in the key's slot (on the record, or in its document
        # once the wake consumed it): a replay reads the same one. A timeout is not held: a
        # value could still land on a key no deadline expired.
        return isinstance(outcome, Ready) or outcome.error.get("type") == FAILURE

    def decode(self, stored: dict[str, Any]) -> T:
        if "error" not in stored:
            return self._token.validate(stored["v"])
        raise_failure(stored)
        error = HeartbeatMissed if stored["error"]["type"] == "HeartbeatMissed" else WaitTimeout
        raise error(stored["error"]["message"])
