"""The durable record of one task, exactly as stores keep it (JSON).

Plain frozen dataclasses: a record is read on every load of its session and written on every
commit of its task, so reading and writing are small explicit functions (:mod:`bide.engine.forms`)
rather than a validation library. A change is a new record: :meth:`TaskRecord.replace`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import forms
from .forms import FormError
from .state import TaskState, state_from_dict

_SLOT_FIELDS = frozenset(("version", "value", "has_value", "expired", "consumed", "failure"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalSlot:
    """One key's life on a task: a value or a failure (with the token version that wrote it),
    or expired;
    ``consumed`` once it woke the task. A consumed or expired slot leaves the record for a
    document of its own (:mod:`bide.engine.slots`)."""

    version: int | None = None
    value: Any = None
    has_value: bool = False
    expired: bool = False
    consumed: bool = False
    failure: dict[str, Any] | None = None
    """A failure delivered instead of a value (``{"type", "message", "data"?}``,
    :mod:`bide.engine.failures`); ``has_value`` is then True and ``value`` None."""

    def replace(self, **changes: Any) -> SignalSlot:
        """A copy with ``changes`` applied (the slot itself never changes)."""
        return dataclasses.replace(self, **changes)

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
        forms.shape(data, "a signal slot", _SLOT_FIELDS)
        get = data.get
        failure = get("failure")
        return cls(
            version=forms.maybe_integer(get("version"), "version"),
            value=get("value"),
            has_value=forms.flag(get("has_value", False), "has_value"),
            expired=forms.flag(get("expired", False), "expired"),
            consumed=forms.flag(get("consumed", False), "consumed"),
            failure=None if failure is None else forms.mapping(failure, "failure"),
        )


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
_RECORD_REQUIRED = ("id", "session_id", "kind", "version", "state", "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """Everything the engine knows about a task. ``rev`` counts the record's writes.

    Built by the engine (its fields are typed, not checked at build); a record read from a
    store is checked field by field (:meth:`from_json`)."""

    id: str
    session_id: str
    kind: str
    version: int
    input: Any = None
    owner: str | None = None
    background: bool = False
    key: str | None = None
    abort_marked: bool = False
    abort_reason: str | None = None
    memos: dict[str, Any] = field(default_factory=dict)
    """The memos not sealed yet; older ones are in sealed pages (:mod:`bide.engine.memo_pages`)."""
    memo_pages: int = 0
    """How many pages of memos this task sealed (documents ``bide.memo/<task>/<page>``)."""
    signals: dict[str, SignalSlot] = field(default_factory=dict)
    """Open slots: values not consumed yet, and keys a wake is about to settle."""
    streams: dict[str, int] = field(default_factory=dict)
    """Per stream (``<signal>/<prefix>``): every member below this number is taken, so a
    delivery to the stream looks from there (see :func:`~bide.engine.rules.stream_key`)."""
    state: TaskState
    created_at: float
    restarts: int = 0
    rev: int = 0

    @property
    def status(self) -> str:
        """The state's status name."""
        return self.state.status

    @property
    def live(self) -> bool:
        """True until the task is terminal (completing tasks are still live)."""
        return self.state.status != "terminal"

    def replace(self, **changes: Any) -> TaskRecord:
        """A copy with ``changes`` applied (the record itself never changes)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The stored form as JSON values, fields in their stored order. ``memo_pages`` only
        when set: a record that sealed none is what earlier versions wrote (and read, during a
        rolling deploy)."""
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
        forms.shape(data, "a task record", _RECORD_FIELDS, _RECORD_REQUIRED)
        get = data.get
        try:
            state = state_from_dict(data["state"])
        except FormError as exc:
            raise exc.within("state") from None
        return cls(
            id=forms.text(data["id"], "id"),
            session_id=forms.text(data["session_id"], "session_id"),
            kind=forms.text(data["kind"], "kind"),
            version=forms.integer(data["version"], "version"),
            input=get("input"),
            owner=forms.maybe_text(get("owner"), "owner"),
            background=forms.flag(get("background", False), "background"),
            key=forms.maybe_text(get("key"), "key"),
            abort_marked=forms.flag(get("abort_marked", False), "abort_marked"),
            abort_reason=forms.maybe_text(get("abort_reason"), "abort_reason"),
            memos=forms.mapping(get("memos", {}), "memos"),
            memo_pages=forms.integer(get("memo_pages", 0), "memo_pages"),
            signals=_slots(get("signals", {})),
            streams=_streams(get("streams", {})),
            state=state,
            created_at=forms.number(data["created_at"], "created_at"),
            restarts=forms.integer(get("restarts", 0), "restarts"),
            rev=forms.integer(get("rev", 0), "rev"),
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> TaskRecord:
        """Read the stored form back (:meth:`from_dict` of the parsed JSON)."""
        return cls.from_dict(forms.loads(data))


def _slots(data: Any) -> dict[str, SignalSlot]:
    slots: dict[str, SignalSlot] = {}
    for name, slot in forms.mapping(data, "signals").items():
        try:
            slots[name] = SignalSlot.from_dict(slot)
        except FormError as exc:
            raise exc.within(f"signals.{name}") from None
    return slots


def _streams(data: Any) -> dict[str, int]:
    for name, mark in forms.mapping(data, "streams").items():
        forms.integer(mark, f"streams.{name}")
    return data  # type: ignore[no-any-return]
