"""Conversations, entries and submissions, kept as documents of the session.

Documents (all written inside commits, so they change atomically with task states):

* ``conv/<cid>``: the conversation head (owner task, the running generation, queued input,
  entry count);
* ``conv/<cid>/e/<n>``: entry ``n`` of the transcript (user input, assistant answers with
  tool calls, tool results, and the summaries a compaction wrote: :mod:`.compaction`);
* ``conv/<cid>/s/<request_id>``: a submission and its status.

Everything here works on a transaction (``tx``): the caller decides which commit it joins.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..engine.errors import BideError
from ..engine.host import WriteTx
from ..engine.signals import SignalToken, define_signal

WhenBusy = Literal["steer", "follow_up", "reject"]
SubmissionStatus = Literal["queued", "placed", "done", "unanswered"]


class ConversationError(BideError):
    """A conversation operation that cannot be done (unknown conversation, bad input)."""


class Notify(BaseModel):
    """Deliver :data:`SUBMISSION_SETTLED` to this task and key when the submission settles."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    key: str


class Submission(BaseModel):
    """An input submitted to a conversation, and what became of it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    conversation: str
    content: str
    when_busy: WhenBusy = "follow_up"
    status: SubmissionStatus = "queued"
    notify: Notify | None = None
    source: str = "user"
    answer: str | None = None
    answer_entry: int | None = None
    error: str | None = None
    created_at: float = 0.0


class Compacted(BaseModel):
    """Where the model's view of a conversation starts (:mod:`.compaction`): the summary
    entry ``summary`` stands for entries ``1..through``; the full transcript is kept."""

    model_config = ConfigDict(extra="forbid")

    summary: int
    through: int


class ConversationHead(BaseModel):
    """A conversation's head document."""

    model_config = ConfigDict(extra="forbid")

    id: str
    owner_task: str | None = None
    run: str | None = Field(default=None, description="the running generation task")
    run_submissions: list[str] = Field(default_factory=list)
    queue: list[str] = Field(default_factory=list)
    round_calls: list[str] = Field(
        default_factory=list,
        description="call ids of the running round's tool calls (a steer interrupts them)",
    )
    entries: int = 0
    compacted: Compacted | None = None
    system: str | None = None
    stopped: bool = False


class SettledSubmission(BaseModel):
    """The value of :data:`SUBMISSION_SETTLED`: the submission as it settled."""

    id: str
    conversation: str
    status: SubmissionStatus
    answer: str | None = None
    answer_entry: int | None = None
    error: str | None = None


SUBMISSION_SETTLED: SignalToken[SettledSubmission] = define_signal(
    "bide.submission-settled", 1, SettledSubmission
)


ConvTx = WriteTx
"""What conversation operations need from a commit (a task's ``tx`` or a host's)."""


def head_key(cid: str) -> str:
    """Key of a conversation's head."""
    return f"conv/{cid}"


def entry_key(cid: str, index: int) -> str:
    """Key of entry ``index`` (1-based)."""
    return f"conv/{cid}/e/{index:08d}"


def submission_key(cid: str, request_id: str) -> str:
    """Key of a submission."""
    return f"conv/{cid}/s/{request_id}"


def owned_conversation_id(task_id: str, name: str = "child") -> str:
    """The id of the conversation a task owns under ``name``: stable, so a rerun finds it."""
    return "c-" + hashlib.sha256(f"{task_id}\x1f{name}".encode()).hexdigest()[:24]


def read_head(tx: Any, cid: str) -> ConversationHead:
    """A conversation's head; raises :class:`ConversationError` if there is none."""
    body = tx.get_doc(head_key(cid))
    if body is None:
        raise ConversationError(f"no conversation {cid!r} in this session")
    return ConversationHead.model_validate(body)


def write_head(tx: ConvTx, head: ConversationHead) -> None:
    """Stage a conversation head."""
    tx.put_doc(head_key(head.id), head.model_dump(mode="json"))


def create_conversation(
    tx: ConvTx, cid: str, *, owner_task: str | None = None, system: str | None = None
) -> ConversationHead:
    """Create a conversation (or return the existing one with that id)."""
    body = tx.get_doc(head_key(cid))
    if body is not None:
        return ConversationHead.model_validate(body)
    head = ConversationHead(id=cid, owner_task=owner_task, system=system)
    write_head(tx, head)
    return head


def append_entry(tx: ConvTx, cid: str, entry: dict[str, Any]) -> int:
    """Append an entry to the transcript; its index (1-based)."""
    head = read_head(tx, cid)
    index = head.entries + 1
    tx.put_doc(entry_key(cid, index), {"i": index, "at": tx.now(), **entry})
    write_head(tx, head.model_copy(update={"entries": index}))
    return index


def read_submission(tx: Any, cid: str, request_id: str) -> Submission | None:
    """A submission by request id."""
    body = tx.get_doc(submission_key(cid, request_id))
    return None if body is None else Submission.model_validate(body)


def write_submission(tx: ConvTx, submission: Submission) -> None:
    """Stage a submission document."""
    tx.put_doc(
        submission_key(submission.conversation, submission.id),
        submission.model_dump(mode="json"),
    )


def settle(tx: ConvTx, submission: Submission, status: SubmissionStatus, **fields: Any) -> None:
    """Settle a submission (done or unanswered) and deliver its notify signal in the same
    commit, so the delivery is atomic with the settlement."""
    settled = submission.model_copy(update={"status": status, **fields})
    write_submission(tx, settled)
    if settled.notify is not None:
        value = SettledSubmission(
            id=settled.id,
            conversation=settled.conversation,
            status=status,
            answer=settled.answer,
            answer_entry=settled.answer_entry,
            error=settled.error,
        )
        # Never fails the commit: a closed or missing waiter simply does not get it.
        tx.signal(
            settled.notify.task_id, SUBMISSION_SETTLED, settled.notify.key, value.model_dump()
        )
