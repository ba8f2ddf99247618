"""Steers: input that interrupts the running run (design 003, "Semantics").

A steer submitted while a run is going is queued and, in the same commit, abort-marks every
live tool call of the run's current round: a call parked on a person, a webhook or a timer
stops waiting at once, a call still running has its abort signal set and its next commit
refused. Each call's abort handler runs its ``cancel`` (and a workflow body's ``finally``)
and writes an error result, ``interrupted by a steer``, so every call the model asked for
still gets exactly one result. The generation wakes as those calls end, starts none of the
round's remaining calls (each gets a ``not run`` result), places the steer after the
results and asks the model again: the steer is answered by the same run.

A follow-up never interrupts; it waits for the run to end. A Stop that arrives before the
run placed a steer does not drop it: the steer starts the next run.
"""

from __future__ import annotations

from typing import Any

from ..engine.ids import keyed_id
from ..engine.state import Waiting
from .conversation import (
    ConversationHead,
    append_entry,
    read_head,
    read_submission,
    settle,
    write_head,
    write_submission,
)

__all__ = [
    "STEERED",
    "call_task_id",
    "interrupt_round",
    "interrupted_round",
    "place_steers",
    "settle_for_stop",
    "steer_queued",
]

STEERED = "interrupted by a steer"
"""The abort reason of calls a steer interrupted: the text of their error results."""


def call_task_id(tx: Any, run: str, call_id: str) -> str:
    """The id of the tool task the generation ``run`` created (by key) for ``call_id``."""
    # The generation creates each call with key ``call:<call_id>`` (batch.schedule); a keyed
    # task's id is derived from the session, its owner and the key.
    return keyed_id("t-", tx.session_id, run, f"call:{call_id}")


def interrupt_round(tx: Any, head: ConversationHead) -> int:
    """Abort-mark the live tool calls of ``head``'s running round (in ``tx``'s commit); how
    many were live. Calls that ended already (or never started) are left as they are."""
    if head.run is None:
        return 0
    # A steer submitted from inside one of the calls (or work it owns) leaves that call
    # alone: a task cannot abort itself in its own commit. It is placed at the boundary.
    spared = _committing_chain(tx)
    targets = [call_task_id(tx, head.run, call_id) for call_id in head.round_calls]
    return sum(1 for task_id in targets if task_id not in spared and tx.abort(task_id, STEERED))


def _committing_chain(tx: Any) -> set[str]:
    """The committing task and its owners (empty for a host command)."""
    chain: set[str] = set()
    task_id = tx.task_id
    while task_id is not None and task_id not in chain:
        chain.add(task_id)
        record = tx.find(task_id) if hasattr(tx, "find") else None
        task_id = record.owner if record is not None else None
    return chain


def interrupted_round(
    tx: Any, cid: str, checkpoint: dict[str, Any], plan: list[dict[str, Any]]
) -> Waiting | None:
    """The generation's side of a steer, in its round: start none of the remaining calls
    (each gets a ``not run`` result) and wait for the calls still live (the steer
    abort-marked them); None once none is live (place the steer and ask the model). The plan
    left in the checkpoint holds only calls that were started, so a rerun never writes a
    ``not run`` result twice."""
    run = tx.task_id
    started: list[dict[str, Any]] = []
    live: list[str] = []
    for call in plan:
        record = tx.find(call_task_id(tx, run, call["call_id"]))
        if record is None:
            result = {
                "type": "tool_result",
                "call_id": call["call_id"],
                "name": call["exposed"] or call["name"],
                "text": f"not run: {STEERED}",
                "is_error": True,
                "code": "aborted",
            }
            append_entry(tx, cid, result)
            continue
        started.append(call)
        if record.live:
            tx.abort(record.id, STEERED)  # already marked by the steer; a no-op then
            live.append(record.id)
    if live:
        return Waiting(checkpoint={**checkpoint, "plan": started}, on=tuple(live), policy="any")
    return None


def settle_for_stop(tx: Any, head: ConversationHead, reason: str) -> list[str]:
    """A Stop ends the run: settle what it placed, and queued follow-ups, ``unanswered``
    with ``reason``; return the queued steers, which already interrupted the run and start the
    next one (unless the conversation's owner is itself ending, as a subagent's is)."""
    steers: list[str] = []
    for rid in [*head.run_submissions, *head.queue]:
        sub = read_submission(tx, head.id, rid)
        if sub is None or sub.status not in ("queued", "placed"):
            continue
        if sub.status == "queued" and sub.when_busy == "steer" and _carries_on(tx, head):
            steers.append(rid)
        else:
            settle(tx, sub, "unanswered", error=reason)
    return steers


def _carries_on(tx: Any, head: ConversationHead) -> bool:
    """Whether the conversation lives on after this run: a conversation owned by a task
    that is itself being aborted or has ended (a subagent's) starts nothing new."""
    if head.owner_task is None:
        return True
    owner = tx.find(head.owner_task)
    return owner is not None and owner.live and not owner.abort_marked


def steer_queued(tx: Any, cid: str) -> bool:
    """True when a steer waits in the conversation's queue."""
    for rid in read_head(tx, cid).queue:
        sub = read_submission(tx, cid, rid)
        if sub is not None and sub.when_busy == "steer":
            return True
    return False


def place_steers(tx: Any, cid: str) -> int:
    """At a run boundary, place queued steers into the running run. How many were placed."""
    head = read_head(tx, cid)
    placed = 0
    keep: list[str] = []
    for rid in head.queue:
        sub = read_submission(tx, cid, rid)
        if sub is not None and sub.when_busy == "steer":
            append_entry(
                tx,
                cid,
                {"type": "user", "text": sub.content, "submission": rid, "source": sub.source},
            )
            write_submission(tx, sub.model_copy(update={"status": "placed"}))
            head = read_head(tx, cid)
            head = head.model_copy(update={"run_submissions": [*head.run_submissions, rid]})
            write_head(tx, head)
            placed += 1
        else:
            keep.append(rid)
    if placed:
        head = read_head(tx, cid)
        write_head(tx, head.model_copy(update={"queue": keep}))
    return placed
