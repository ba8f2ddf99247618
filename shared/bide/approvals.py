"""Approvals (design 002, "Distinguish an approval from an outstanding result").

An approval asks whether a particular operation may proceed; it is not a promise. Each one is
the document ``approval/<id>``: its subject, a reference to the arguments it binds to (the
document ``approval-args/<call>`` and their digest), its status (``pending`` -> ``approved`` |
``denied`` | ``closed``) and exactly one decision.

:func:`approval_required` wraps a tool so that each call first records one approval per
subject and parks on their :data:`APPROVAL` keys, all at once. A decision
(:meth:`Approvals.decide`) writes the record and signals the call in one commit; the call wakes,
parks again on the keys still undecided, and runs the tool only once every approval has a
decision (all approved; any denial blocks the call). A generation waits for all its tool calls,
so a run resumes exactly when every pending approval of its round has a decision. Cancelling
the call (Stop) runs the wrapper's ``cancel``, which closes the approvals still pending; a
decision arriving afterwards finds them ``closed``.

Why a wrapper and not a ``before_tool`` gate: hooks never commit (design 001, ch. VIII), so a
gate cannot record the approval document; the wrapper's ``execute`` can, through
``api.write``, and it parks on signals exactly like a gate would.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from .engine.events import emit_in
from .engine.host import WriteTx, host_commit, read_docs
from .engine.ids import keyed_id
from .engine.signals import SignalExpired, SignalResult, SignalToken, SignalValue, define_signal
from .tools.define import ToolDefinition, define_tool
from .tools.results import Sleep, ToolErrorCode, ToolResult, Wait

if TYPE_CHECKING:
    from .engine.harness import Harness


class ApprovalDecision(BaseModel):
    """The value of :data:`APPROVAL`: one decision."""

    approved: bool
    by: str | None = None
    note: str | None = None


APPROVAL: SignalToken[ApprovalDecision] = define_signal("bide.approval", 1, ApprovalDecision)

ApprovalStatus = Literal["pending", "approved", "denied", "closed"]


class ApprovalRecord(BaseModel):
    """The document ``approval/<id>``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    call_task: str
    tool: str
    subject: str
    arguments_ref: str
    arguments_digest: str
    status: ApprovalStatus = "pending"
    decision: ApprovalDecision | None = None
    deadline: float | None = None
    requested_at: float = 0.0
    decided_at: float | None = None
    closed_reason: str | None = None


class DecideResult(enum.StrEnum):
    """What :meth:`Approvals.decide` did."""

    DECIDED = "decided"  # this was the approval's one decision
    ALREADY_DECIDED = "already_decided"  # it had a decision; the first is kept
    CLOSED = "closed"  # it was closed (cancelled, expired, or the call stopped waiting)
    NOT_FOUND = "not_found"


# --- the rules, pure ---------------------------------------------------------------------------


def decide_approval(
    record: ApprovalRecord | None, decision: ApprovalDecision, now: float
) -> tuple[DecideResult, ApprovalRecord | None]:
    """Apply a decision: only a pending approval takes one, and only before its deadline.
    Returns the result and the record to write (None when nothing changes)."""
    if record is None:
        return DecideResult.NOT_FOUND, None
    if record.status in ("approved", "denied"):
        return DecideResult.ALREADY_DECIDED, None
    if record.status == "closed":
        return DecideResult.CLOSED, None
    if record.deadline is not None and now >= record.deadline:
        return DecideResult.CLOSED, close_approval(record, "no decision before the deadline", now)
    status: ApprovalStatus = "approved" if decision.approved else "denied"
    update = {"status": status, "decision": decision, "decided_at": now}
    return DecideResult.DECIDED, record.model_copy(update=update)


def close_approval(record: ApprovalRecord, reason: str, now: float) -> ApprovalRecord | None:
    """Close a pending approval (None when it is not pending: decisions are never undone)."""
    if record.status != "pending":
        return None
    return record.model_copy(
        update={"status": "closed", "closed_reason": reason, "decided_at": now}
    )


# --- documents ---------------------------------------------------------------------------------


def approval_doc_key(approval_id: str) -> str:
    """The document of an approval."""
    return f"approval/{approval_id}"


def approval_id_for(call_task: str, subject: str) -> str:
    """A call's approval for ``subject``: stable, so a rerun finds the same one."""
    return keyed_id("ap-", call_task, subject)


def read_approval(reader: Any, approval_id: str) -> ApprovalRecord | None:
    """An approval (``reader``: a harness, runtime or tx); None when unknown."""
    body = reader.get_doc(approval_doc_key(approval_id))
    return None if body is None else ApprovalRecord.model_validate(body)


def _put(tx: WriteTx, record: ApprovalRecord) -> None:
    tx.put_doc(approval_doc_key(record.id), record.model_dump(mode="json"))


def _request(
    tx: WriteTx,
    tool: str,
    call_task: str,
    subjects: dict[str, str],
    arguments: dict[str, Any],
    deadline: float | None,
) -> None:
    ref = f"approval-args/{call_task}"
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()
    if tx.get_doc(ref) is None:
        tx.put_doc(ref, {"tool": tool, "arguments": arguments, "digest": digest})
    requested = []
    for subject, approval_id in subjects.items():
        if read_approval(tx, approval_id) is None:
            requested.append(approval_id)
            record = ApprovalRecord(
                id=approval_id,
                call_task=call_task,
                tool=tool,
                subject=subject,
                arguments_ref=ref,
                arguments_digest=digest,
                deadline=deadline,
                requested_at=tx.now(),
            )
            _put(tx, record)
    if requested:  # one event for the call's new approvals (a rerun finds them and adds none)
        fields = {"approvals": requested, "call_task": call_task, "tool": tool}
        emit_in(tx, "approval_requested", {**fields, "arguments": arguments})


def _close(tx: WriteTx, approval_ids: Sequence[str], reason: str) -> None:
    closed_ids = []
    for approval_id in approval_ids:
        record = read_approval(tx, approval_id)
        closed = close_approval(record, reason, tx.now()) if record is not None else None
        if closed is not None:
            _put(tx, closed)
            closed_ids.append(approval_id)
    if closed_ids:
        emit_in(tx, "approval_closed", {"approvals": closed_ids, "reason": reason})


# --- the wrapper -------------------------------------------------------------------------------

Subjects = Callable[[Any], Sequence[str]]


def approval_required(
    tool: ToolDefinition,
    *,
    subjects: Subjects | None = None,
    timeout: float | None = None,
) -> ToolDefinition:
    """``tool``, but every call first needs one decided approval per subject.

    ``subjects(args)`` names what needs approving (default: one approval for the call, subject
    ``"<tool>"``); ``timeout`` (seconds) closes approvals still pending and blocks the call.
    The tool runs only when every approval is approved; a denial blocks the call with the
    decision's note. Parks of the tool itself work as before.
    """

    def subjects_of(args: Any) -> list[str]:
        named = list(subjects(args)) if subjects is not None else [tool.name]
        if not named or len(set(named)) != len(named):
            raise ValueError(f"approvals of {tool.name!r}: subjects must be distinct, non-empty")
        return named

    async def execute(args: Any, api: Any) -> Any:
        parked = api.checkpoint if isinstance(api.checkpoint, dict) else {}
        if parked.get("stage") == "run":
            return await _run(tool, args, api, wake=api.wake, inner=parked.get("inner"))
        ids = {s: approval_id_for(api.task_id, s) for s in subjects_of(args)}
        until = None
        if timeout is not None:
            until = await api.memo("bide.approval.until", api.now() + timeout)
        dumped = tool.dump(args)
        call_task = api.task_id
        await api.write(lambda tx: _request(tx, tool.name, call_task, ids, dumped, until))
        states = {i: await api.read_signal(APPROVAL, i) for i in ids.values()}
        if any(isinstance(s, SignalExpired) for s in states.values()):
            reason = "no decision before the deadline"
            await api.write(lambda tx: _close(tx, list(ids.values()), reason))
            return ToolResult.error(ToolErrorCode.BLOCKED, f"{tool.name}: {reason}")
        undecided = [i for i, s in states.items() if s is None]
        if undecided:
            # Decided keys hold values (and one of them consumed by the wake): only the open
            # ones are listed again, so every key still serves exactly one wait.
            keys = [APPROVAL.key(i) for i in undecided]
            return Sleep(checkpoint={"stage": "approval"}, signals=keys, until=until)
        denied = [
            (subject, s.value)
            for subject, i in ids.items()
            if isinstance((s := states[i]), SignalValue) and not s.value.approved
        ]
        if denied:
            why = "; ".join(
                f"{subject} denied by {d.by or 'someone'}" + (f" ({d.note})" if d.note else "")
                for subject, d in denied
            )
            return ToolResult.error(ToolErrorCode.BLOCKED, f"{tool.name} was not approved: {why}")
        return await _run(tool, args, api, wake=None, inner=None)

    async def cancel(args: Any, api: Any) -> None:
        parked = api.checkpoint if isinstance(api.checkpoint, dict) else {}
        if parked.get("stage") == "run":
            if tool.cancel is not None:
                await tool.cancel(args, _base_api(api, api.wake, parked.get("inner")))
            return
        ids = [approval_id_for(api.task_id, s) for s in subjects_of(args)]
        await api.write(lambda tx: _close(tx, ids, "the call was cancelled"))

    return define_tool(
        tool.name,
        f"{tool.description} (each call needs approval)",
        tool.parameters,
        execute,
        replay=tool.replay,
        cancel=cancel,
        concurrency=tool.concurrency,
    )


def _base_api(api: Any, wake: Any, inner: Any) -> Any:
    # The base tool sees its own parks only: the approval stage's wake and checkpoint are
    # the wrapper's business.
    base = copy.copy(api)
    base.wake = wake
    base.checkpoint = inner
    return base


async def _run(tool: ToolDefinition, args: Any, api: Any, *, wake: Any, inner: Any) -> Any:
    returned = await tool.execute(args, _base_api(api, wake, inner))
    if isinstance(returned, Sleep | Wait):
        return dataclasses.replace(
            returned, checkpoint={"stage": "run", "inner": returned.checkpoint}
        )
    return returned


def _report(tx: WriteTx, record: ApprovalRecord) -> None:
    """The event of a decision (or of a close instead of one), in the commit writing it."""
    if record.status == "closed":
        fields = {"approvals": [record.id], "reason": record.closed_reason}
        emit_in(tx, "approval_closed", fields)
        return
    decision = record.decision.model_dump() if record.decision is not None else None
    emit_in(
        tx,
        "approval_decided",
        {
            "approval": record.id,
            "status": record.status,
            **({"decision": decision} if decision is not None else {}),
        },
    )


# --- the host's side ---------------------------------------------------------------------------


class Approvals:
    """The host's view of a session's approvals: list them and record decisions."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """An approval, or None."""
        return read_approval(self.harness, approval_id)

    def all(self) -> list[ApprovalRecord]:
        """Every approval of the session."""
        return [ApprovalRecord.model_validate(b) for _k, b in read_docs(self.harness, "approval/")]

    def pending(self) -> list[ApprovalRecord]:
        """Approvals waiting for a decision whose call still waits for them."""
        return [
            a
            for a in self.all()
            if a.status == "pending" and self.harness.outcome(a.call_task) is None
        ]

    async def decide(
        self, approval_id: str, approved: bool, *, by: str | None = None, note: str | None = None
    ) -> DecideResult:
        """Record the approval's one decision and wake its call, in one commit."""
        decision = ApprovalDecision(approved=approved, by=by, note=note)

        def change(tx: WriteTx) -> DecideResult:
            original = read_approval(tx, approval_id)
            result, record = decide_approval(original, decision, tx.now())
            if record is None:
                return result
            if result == DecideResult.DECIDED:
                assert original is not None
                sent = tx.signal(record.call_task, APPROVAL, record.id, decision.model_dump())
                if sent is not SignalResult.DELIVERED:
                    # The call no longer waits (it ended, or its deadline passed): a decision
                    # it can never act on would be a lie, so the approval closes instead.
                    why = "the call is no longer waiting"
                    record, result = close_approval(original, why, tx.now()), DecideResult.CLOSED
                    assert record is not None
            _put(tx, record)
            _report(tx, record)
            return result

        return host_commit(self.harness, change)
