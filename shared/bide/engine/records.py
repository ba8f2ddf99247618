"""The durable record of one task, exactly as stores keep it (JSON)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .state import TaskState


class SignalSlot(BaseModel):
    """One key's life on a task: a value or a failure (with the token version that wrote it),
    or expired;
    ``consumed`` once it woke the task. A consumed or expired slot leaves the record for a
    document of its own (:mod:`bide.engine.slots`)."""

    model_config = ConfigDict(extra="forbid")

    version: int | None = None
    value: Any = None
    has_value: bool = False
    expired: bool = False
    consumed: bool = False
    failure: dict[str, Any] | None = None
    """A failure delivered instead of a value (``{"type", "message", "data"?}``,
    :mod:`bide.engine.failures`); ``has_value`` is then True and ``value`` None."""


class TaskRecord(BaseModel):
    """Everything the engine knows about a task. ``rev`` counts the record's writes."""

    model_config = ConfigDict(extra="forbid")

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
    memos: dict[str, Any] = Field(default_factory=dict)
    """The memos not sealed yet; older ones are in sealed pages (:mod:`bide.engine.memo_pages`)."""
    memo_pages: int = 0
    """How many pages of memos this task sealed (documents ``bide.memo/<task>/<page>``)."""
    signals: dict[str, SignalSlot] = Field(default_factory=dict)
    """Open slots: values not consumed yet, and keys a wake is about to settle."""
    streams: dict[str, int] = Field(default_factory=dict)
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

    def to_json(self) -> str:
        """The stored form. ``memo_pages`` only when set: a record that sealed none is what
        earlier versions wrote (and read, during a rolling deploy)."""
        return self.model_dump_json(exclude={"memo_pages"} if not self.memo_pages else None)

    @classmethod
    def from_json(cls, data: str | bytes) -> TaskRecord:
        """Read the stored form back."""
        return cls.model_validate_json(data)
