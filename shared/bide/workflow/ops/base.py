"""The base of every durable operation, and what polling one says.

An operation takes the next sequence number when the body creates it (so the order is the
order of creation, whatever awaits later) and is performed by
:meth:`WorkflowContext._perform <bide.workflow.context.WorkflowContext._perform>` when awaited:
a recorded resolution is returned as recorded; otherwise a *wait* is polled (:class:`Ready`,
:class:`Raise`, or :class:`Pending`: a park on keys, doorbells and a deadline) and an *action*
(a step, a webhook, a message) runs once and is recorded. See :mod:`bide.workflow.history`
for the record format.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ...engine.failures import FailureReceived, SignalFailed
from ...engine.signals import SignalKey

if TYPE_CHECKING:
    from ..context import WorkflowContext

T = TypeVar("T")


@dataclass(frozen=True)
class Ready:
    """Resolved: record ``value``, or what ``build(tx, record)`` returns inside the commit."""

    value: Any = None
    build: Callable[[Any, dict[str, Any]], Any] | None = None


@dataclass(frozen=True)
class Raise:
    """Resolved with an error: recorded, and raised on every replay. ``lost``: the error is
    that the operation's key expired at an earlier deadline, so in a race it never wins (the
    race's deadline or another operation does)."""

    error: dict[str, Any]
    lost: bool = False


@dataclass(frozen=True)
class Pending:
    """Not yet: park on these signal keys, doorbells of these documents, and deadline."""

    keys: tuple[SignalKey[Any], ...] = ()
    bells: tuple[str, ...] = ()
    until: float | None = None
    heartbeat: float | None = None
    """Seconds: a beat on one of ``keys`` must come this often (see ``ctx.wait_for``)."""
    expire: bool = True
    """Whether ``until`` expires ``keys`` (False: a race's deadline leaves them open)."""


Outcome = Ready | Raise | Pending

FAILURE = "FailureReceived"
"""The recorded error type of a wait resolved by a failure (see :func:`failed`)."""


def failed(state: SignalFailed, **extra: Any) -> Raise:
    """A wait's key got a failure: recorded with its type, message and data, so every replay
    raises the same :class:`~bide.engine.failures.FailureReceived` (:func:`raise_failure`)."""
    failure = state.error()
    return Raise({"type": FAILURE, "message": str(failure), "failure": failure.to_json(), **extra})


def raise_failure(stored: dict[str, Any]) -> None:
    """Raise the :class:`~bide.engine.failures.FailureReceived` a recorded resolution holds,
    if it holds one."""
    error = stored.get("error")
    if isinstance(error, dict) and error.get("type") == FAILURE:
        raise FailureReceived(**error["failure"])


NOT_RECORDED: Any = object()
"""What replaying an operation whose resolution is not recorded returns (it runs instead)."""


class Op(Generic[T]):
    """A durable operation. Await it (once or again: a resolved one returns its recorded
    value), or race it with :meth:`WorkflowContext.race`."""

    kind: ClassVar[str] = "op"
    waits: ClassVar[bool] = True

    def __init__(self, ctx: WorkflowContext, name: str) -> None:
        self._ctx = ctx
        self.seq = ctx._next_seq()
        self.name = name
        self.aliases: tuple[str, ...] = ()
        """Names older versions recorded for this operation (accepted on replay)."""

    def __await__(self) -> Generator[Any, None, T]:
        value = self._ctx._replayed(self)  # a replay passes most operations: no coroutine
        if value is NOT_RECORDED:
            value = yield from self._ctx._perform(self).__await__()
        return value  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r} #{self.seq}>"

    def params(self) -> dict[str, Any]:
        """Values fixed at the first evaluation and kept in the record (e.g. a deadline)."""
        return {}

    def arguments(self) -> Any:
        """What the body passed to create the operation, as JSON (what its digest covers).
        A replay passing other arguments is non-determinism. Values computed at the first
        evaluation (a deadline from the clock, a nonce) are not arguments. The digest must
        stay the same across versions for the same call: a new argument enters it only when
        it is not at its default."""
        return None

    def digest(self) -> str:
        """A stable digest of :meth:`arguments` (kept in the record as ``"args"``)."""
        return digest_of(self.arguments())

    def record(self) -> dict[str, Any]:
        """The operation's record, as first evaluated."""
        return {"op": self.kind, "name": self.name, **self.params(), "args": self.digest()}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        """Side writes committed with the record of a wait (e.g. publishing a question)."""

    async def poll(self, record: dict[str, Any]) -> Outcome:
        """Whether the operation is resolved now."""
        raise NotImplementedError

    async def poll_parking(self, record: dict[str, Any]) -> Outcome:
        """:meth:`poll` for the operation the body awaits itself (not a race's member): its
        Pending is the park's, so it may leave a key the park's commit checks unread (that
        commit requires the key's document absent; a refused park runs the body again)."""
        return await self.poll(record)

    def holds(self, outcome: Ready | Raise) -> bool:
        """Whether this resolution of the operation, awaited by the body itself, may be held
        for the task's next commit instead of a commit of its own: only one fixed by durable
        data, so that a replay after a crash before that commit resolves it the same (a
        value or failure stored in the key's slot, a deadline passed). None by default."""
        return False

    def decode(self, stored: dict[str, Any]) -> T:
        """The value a recorded resolution stands for (or the error it raises)."""
        return stored.get("v")  # type: ignore[return-value]


def digest_of(value: Any) -> str:
    """A digest of a JSON value that does not depend on key order, the process or the
    Python version: canonical JSON (sorted keys, no spaces), SHA-256, 16 bytes in hex."""
    if value is None:  # an operation without arguments (a step): the same every time
        return _NULL_DIGEST
    return digest_text(canonical_json(value))


def digest_text(canonical: str) -> str:
    """:func:`digest_of` a value given its canonical JSON (:func:`canonical_json`)."""
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


_NULL_DIGEST = digest_text("null")


class DigestCache:
    """Digests by a key that fixes what they hash (its canonical JSON), so that a replay
    digests each distinct argument list once per process, not once per operation it passes.
    A key must name the canonical JSON exactly: exact ``str`` parts, and a number by its
    JSON text (``1``, ``1.0`` and ``True`` are equal keys in Python but not the same JSON).
    Holds at most ``max_entries``, the oldest out first. Safe to share between threads."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"a digest cache holds >= 1 entry, not {max_entries}")
        self.max_entries = max_entries
        self._digests: dict[Any, str] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._digests)

    def get(self, key: Any) -> str | None:
        """The digest kept under ``key``, or None."""
        return self._digests.get(key)

    def put(self, key: Any, digest: str) -> None:
        """Keep ``digest`` under ``key`` (dropping the oldest entry when full)."""
        with self._lock:
            if key not in self._digests and len(self._digests) >= self.max_entries:
                del self._digests[next(iter(self._digests))]
            self._digests[key] = digest

    def clear(self) -> None:
        """Forget every digest."""
        with self._lock:
            self._digests.clear()


DIGESTS = DigestCache(max_entries=32_768)
"""The process's digests of operations' arguments (see :meth:`WaitForOp.digest
<bide.workflow.ops.waits.WaitForOp.digest>`): some 250 bytes an entry, 8 MB at most."""

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), default=lambda o: type(o).__qualname__
)
"""What ``json.dumps(value, sort_keys=True, separators=(",", ":"), default=...)`` builds on
every call, built once: a replay digests every operation it passes."""

string_json: Callable[[str], str] = _CANONICAL.encode
"""A ``str``'s canonical JSON (ASCII-escaped), as the encoder writes it in any value:
``JSONEncoder.encode`` writes a string alone without its per-call set-up."""
_text = string_json


def canonical_json(value: Any) -> str:
    """``_CANONICAL.encode(value)``: the canonical JSON a digest hashes. A flat object of
    plain values (most operations' arguments: a wait's signal, key and timeout) is written
    by :func:`_flat_object`, sparing the encoder's per-call set-up on every replayed
    operation; anything else goes to the encoder."""
    flat = _flat_object(value) if type(value) is dict else None
    return _CANONICAL.encode(value) if flat is None else flat


def _flat_object(value: dict[Any, Any]) -> str | None:
    """What the encoder writes for ``value`` when its keys are ``str`` and its values plain
    (:func:`plain_json`), keys sorted; None for anything else (the encoder writes it)."""
    try:
        keys = sorted(value)
    except TypeError:  # keys that do not sort: the encoder raises its own error
        return None
    parts = []
    for key in keys:
        text = plain_json(value[key])
        if text is None or type(key) is not str:
            return None
        parts.append(f"{_text(key)}:{text}")
    return "{" + ",".join(parts) + "}"


def plain_json(value: Any) -> str | None:
    """What the encoder writes for a plain value: an exact ``str`` (as ``JSONEncoder.encode``
    writes a string alone), None, a ``bool``, an exact ``int`` or a finite ``float`` (as
    ``repr`` writes them, as the encoder does); None for anything else (containers,
    subclasses, NaN and infinities)."""
    kind = type(value)
    if kind is str:
        return _text(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return None


def describe(value: Any) -> str:
    """A value as notification text."""
    return value if isinstance(value, str) else json.dumps(value, default=str)
