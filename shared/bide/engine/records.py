"""The durable record of one task, exactly as stores keep it (JSON).

Plain classes with slots (:mod:`bide.engine.values`: they behave as the keyword-only
``@dataclass(slots=True)`` classes they were, without compiling generated methods at import, on
every function's cold start): a record is read on every load of its session and written on every
commit of its task, so reading and writing are small explicit functions (:mod:`bide.engine.forms`)
rather than a validation library. A change is a new record: :meth:`TaskRecord.replace`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import forms
from .forms import FormError
from .state import TaskState
from .state_forms import state_from_dict
from .values import Value, value_class

_SLOT_FIELDS = frozenset(("version", "value", "has_value", "expired", "consumed", "failure"))
_NONE = type(None)
_new = object.__new__

# How each field of a slot but its value is read: its name, the types a stored value has, its
# value when the stored form leaves it out, and the forms reader that takes any other value
# (an int subclass as an int) or refuses it, naming the field.
_SLOT_PLAIN: tuple[tuple[str, tuple[type, ...], Any, Callable[[Any, str], Any]], ...] = (
    ("version", (int, _NONE), None, forms.integer),
    ("has_value", (bool,), False, forms.flag),
    ("expired", (bool,), False, forms.flag),
    ("consumed", (bool,), False, forms.flag),
    ("failure", (dict, _NONE), None, forms.mapping),
)


@value_class
class SignalSlot(Value):
    """One key's life on a task: a value or a failure (with the token version that wrote it),
    or expired;
    ``consumed`` once it woke the task. A consumed or expired slot leaves the record for a
    document of its own (:mod:`bide.engine.slots`). A change is a new slot
    (:meth:`~bide.engine.values.Value.replace`): the slot itself never changes."""

    __slots__ = ("consumed", "expired", "failure", "has_value", "value", "version")
    version: int | None
    value: Any
    has_value: bool
    expired: bool
    consumed: bool
    failure: dict[str, Any] | None
    """A failure delivered instead of a value (``{"type", "message", "data"?}``,
    :mod:`bide.engine.failures`); ``has_value`` is then True and ``value`` None."""

    def __init__(
        self,
        *,
        version: int | None = None,
        value: Any = None,
        has_value: bool = False,
        expired: bool = False,
        consumed: bool = False,
        failure: dict[str, Any] | None = None,
    ) -> None:
        self.version = version
        self.value = value
        self.has_value = has_value
        self.expired = expired
        self.consumed = consumed
        self.failure = failure

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "version": self.version,
            "value": self.value,
            "has_value": self.has_value,
            "expired": self.expired,
            "consumed": self.consumed,
            "failure": self.failure,
        }

    @classmethod
    def from_dict(cls, data: Any) -> SignalSlot:
        """Read the stored form (:class:`~bide.engine.forms.FormError`, naming the field, if
        it is not one). Every field may be absent (its default)."""
        if type(data) is not dict or not data.keys() <= _SLOT_FIELDS:
            forms.shape(data, "a signal slot", _SLOT_FIELDS)
        get = data.get
        # Filled in directly, not through __init__'s keywords: the same fields, read faster.
        slot = _new(cls)
        slot.value = get("value")
        for name, kinds, default, read in _SLOT_PLAIN:
            value = get(name, default)
            if type(value) not in kinds:
                value = read(value, name)
            setattr(slot, name, value)
        return slot


_RECORD_FIELDS = frozenset(
    (
        "id",
        "session_id",
        "kind",
        "version",
        "input",
        "owner",
        "background",
        "key",
        "abort_marked",
        "abort_reason",
        "memos",
        "memo_pages",
        "signals",
        "streams",
        "state",
        "created_at",
        "restarts",
        "rev",
    )
)
_ABSENT = object()  # a field the stored form leaves out
_RECORD_REQUIRED = frozenset(("id", "session_id", "kind", "version", "state", "created_at"))


@value_class
class TaskRecord(Value):
    """Everything the engine knows about a task. ``rev`` counts the record's writes.

    Built by the engine (its fields are typed, not checked at build); a record read from a
    store is checked field by field (:meth:`from_json`). The engine never changes a record in
    place: a change is a new record (:meth:`~bide.engine.values.Value.replace`), so a record
    handed out stays as read."""

    __slots__ = (
        "abort_marked",
        "abort_reason",
        "background",
        "created_at",
        "id",
        "input",
        "key",
        "kind",
        "memo_pages",
        "memos",
        "owner",
        "restarts",
        "rev",
        "session_id",
        "signals",
        "state",
        "streams",
        "version",
    )
    id: str
    session_id: str
    kind: str
    version: int
    input: Any
    owner: str | None
    background: bool
    key: str | None
    abort_marked: bool
    abort_reason: str | None
    memos: dict[str, Any]
    """The memos not sealed yet; older ones are in sealed pages (:mod:`bide.engine.memo_pages`)."""
    memo_pages: int
    """How many pages of memos this task sealed (documents ``bide.memo/<task>/<page>``)."""
    signals: dict[str, SignalSlot]
    """Open slots: values not consumed yet, and keys a wake is about to settle."""
    streams: dict[str, int]
    """Per stream (``<signal>/<prefix>``): every member below this number is taken, so a
    delivery to the stream looks from there (see :func:`~bide.engine.rules.stream_key`)."""
    state: TaskState
    created_at: float
    restarts: int
    rev: int

    def __init__(
        self,
        *,
        id: str,
        session_id: str,
        kind: str,
        version: int,
        input: Any = None,
        owner: str | None = None,
        background: bool = False,
        key: str | None = None,
        abort_marked: bool = False,
        abort_reason: str | None = None,
        memos: dict[str, Any] | None = None,
        memo_pages: int = 0,
        signals: dict[str, SignalSlot] | None = None,
        streams: dict[str, int] | None = None,
        state: TaskState,
        created_at: float,
        restarts: int = 0,
        rev: int = 0,
    ) -> None:
        # None for memos, signals and streams: a new empty dict each (the dataclass's default
        # factories did the same).
        self.id = id
        self.session_id = session_id
        self.kind = kind
        self.version = version
        self.input = input
        self.owner = owner
        self.background = background
        self.key = key
        self.abort_marked = abort_marked
        self.abort_reason = abort_reason
        self.memos = {} if memos is None else memos
        self.memo_pages = memo_pages
        self.signals = {} if signals is None else signals
        self.streams = {} if streams is None else streams
        self.state = state
        self.created_at = created_at
        self.restarts = restarts
        self.rev = rev

    @property
    def status(self) -> str:
        """The state's status name."""
        return self.state.status

    @property
    def live(self) -> bool:
        """True until the task is terminal (completing tasks are still live)."""
        return self.state.status != "terminal"

    def to_dict(self) -> dict[str, Any]:
        """The stored form as JSON values, fields in their stored order. ``memo_pages`` only
        when set: a record that sealed none is what earlier versions wrote (and read, during a
        rolling deploy). It shares the record's own containers (memos, input, checkpoint):
        read it, do not change it."""
        out: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "kind": self.kind,
            "version": self.version,
            "input": self.input,
            "owner": self.owner,
            "background": self.background,
            "key": self.key,
            "abort_marked": self.abort_marked,
            "abort_reason": self.abort_reason,
            "memos": self.memos,
        }
        if self.memo_pages:
            out["memo_pages"] = self.memo_pages
        out["signals"] = {name: slot.to_dict() for name, slot in self.signals.items()}
        out["streams"] = self.streams
        out["state"] = self.state.to_dict()
        out["created_at"] = float(self.created_at)
        out["restarts"] = self.restarts
        out["rev"] = self.rev
        return out

    def to_json(self) -> str:
        """The stored form: compact JSON, byte-identical to what earlier versions wrote for
        the same record (:func:`~bide.engine.forms.dumps`)."""
        return forms.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> TaskRecord:
        """Read the stored form. Refuses (:class:`~bide.engine.forms.FormError`, naming the
        field) an unknown field, a missing required one or a value of the wrong type."""
        # Read on every load of a session (a thousand at once for a large one): each check is
        # inline for the stored case, and the forms function, which names what is wrong (or
        # takes a subclass), runs only when that fails. A table read by one loop, as the
        # slot's, was measured 10% slower on from_json over 1,000 stored records (the live
        # graph bench's parked tasks: median 11.9 ms against 10.7, 31 alternating trials;
        # golden shapes 12.8 against 11.8) and 17% on from_dict alone, so it stays inline.
        if (
            type(data) is not dict
            or not data.keys() <= _RECORD_FIELDS
            or not data.keys() >= _RECORD_REQUIRED
        ):
            forms.shape(data, "a task record", _RECORD_FIELDS, _RECORD_REQUIRED)
        get = data.get
        try:
            state = state_from_dict(data["state"])
        except FormError as exc:
            raise exc.within("state") from None
        id_, session_id, kind, version = (
            data["id"],
            data["session_id"],
            data["kind"],
            data["version"],
        )
        if type(id_) is not str:
            id_ = forms.text(id_, "id")
        if type(session_id) is not str:
            session_id = forms.text(session_id, "session_id")
        if type(kind) is not str:
            kind = forms.text(kind, "kind")
        if type(version) is not int:
            version = forms.integer(version, "version")
        owner, key, abort_reason = get("owner"), get("key"), get("abort_reason")
        if owner is not None and type(owner) is not str:
            owner = forms.text(owner, "owner")
        if key is not None and type(key) is not str:
            key = forms.text(key, "key")
        if abort_reason is not None and type(abort_reason) is not str:
            abort_reason = forms.text(abort_reason, "abort_reason")
        background, abort_marked = get("background", False), get("abort_marked", False)
        if type(background) is not bool:
            forms.flag(background, "background")
        if type(abort_marked) is not bool:
            forms.flag(abort_marked, "abort_marked")
        memos = get("memos", _ABSENT)
        if type(memos) is not dict:
            memos = {} if memos is _ABSENT else forms.mapping(memos, "memos")
        signals = get("signals")
        signals = _slots(signals) if signals or "signals" in data else {}
        streams = get("streams")
        if type(streams) is not dict or streams:
            streams = _streams(streams) if "streams" in data else {}
        memo_pages, restarts, rev = get("memo_pages", 0), get("restarts", 0), get("rev", 0)
        if type(memo_pages) is not int:
            memo_pages = forms.integer(memo_pages, "memo_pages")
        if type(restarts) is not int:
            restarts = forms.integer(restarts, "restarts")
        if type(rev) is not int:
            rev = forms.integer(rev, "rev")
        created_at = data["created_at"]
        if type(created_at) is not float:
            created_at = forms.number(created_at, "created_at")
        # Filled in directly, not through __init__'s keywords: the same fields, read faster.
        record = _new(cls)
        record.id = id_
        record.session_id = session_id
        record.kind = kind
        record.version = version
        record.input = get("input")
        record.owner = owner
        record.background = background
        record.key = key
        record.abort_marked = abort_marked
        record.abort_reason = abort_reason
        record.memos = memos
        record.memo_pages = memo_pages
        record.signals = signals
        record.streams = streams
        record.state = state
        record.created_at = created_at
        record.restarts = restarts
        record.rev = rev
        return record

    @classmethod
    def from_json(cls, data: str | bytes) -> TaskRecord:
        """Read the stored form back (:meth:`from_dict` of the parsed JSON)."""
        return cls.from_dict(forms.loads(data))


def _slots(data: Any) -> dict[str, SignalSlot]:
    slots: dict[str, SignalSlot] = {}
    if type(data) is not dict:
        forms.mapping(data, "signals")
    for name, slot in data.items():
        try:
            slots[name] = SignalSlot.from_dict(slot)
        except FormError as exc:
            raise exc.within(f"signals.{name}") from None
    return slots


def _streams(data: Any) -> dict[str, int]:
    if type(data) is not dict:
        forms.mapping(data, "streams")
    for name, mark in data.items():
        if type(mark) is not int:
            forms.integer(mark, f"streams.{name}")
    return data  # type: ignore[no-any-return]
