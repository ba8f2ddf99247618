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
from .conversation import (
    ConversationHead,
    append_entry,
    read_head,
    read_submission,
    write_head,
    write_submission,
)

__all__ = ["STEERED", "call_task_id", "interrupt_round", "place_steers", "steer_queued"]

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
    return sum(
        1 for call_id in head.round_calls if tx.abort(call_task_id(tx, head.run, call_id), STEERED)
    )


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
