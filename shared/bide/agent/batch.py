"""A round's tool calls as tasks: which run together and which wait.

Exclusive calls run alone, in the order the model asked for them; consecutive parallel-safe
calls form one segment with at most :data:`PARALLEL_WINDOW` in flight. Each call is its own
task (keyed by its call id) and commits its own result, so a slow or retried call never
repeats a finished one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.state import Waiting

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["PARALLEL_WINDOW", "schedule"]

PARALLEL_WINDOW = 8


def _segments(plan: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive parallel-safe calls form one segment; each exclusive call is its own."""
    segments: list[list[dict[str, Any]]] = []
    for call in plan:
        if (
            call["mode"] == "parallel_safe"
            and segments
            and segments[-1][0]["mode"] == "parallel_safe"
        ):
            segments[-1].append(call)
        else:
            segments.append([call])
    return segments


def schedule(agent: Agent, tx: Any, cid: str, plan: list[dict[str, Any]]) -> Waiting | None:
    """Start what the batch allows now and wait for it; None once every call has ended.
    Exclusive calls run alone in batch order; a parallel-safe segment keeps at most
    PARALLEL_WINDOW calls in flight. Each call commits its own result, so a slow or retried
    call never repeats a finished one."""
    for segment in _segments(plan):
        live: list[str] = []
        new: list[dict[str, Any]] = []
        for call in segment:
            record = tx.find(tx.keyed_id(f"call:{call['call_id']}"))
            if record is None:
                new.append(call)
            elif record.live:
                live.append(record.id)
        if not live and not new:
            continue
        room = (PARALLEL_WINDOW if segment[0]["mode"] == "parallel_safe" else 1) - len(live)
        for call in new[: max(room, 0)]:
            live.append(
                tx.create_task(
                    agent.tools.task,
                    {
                        "name": call["name"],
                        "arguments": call["arguments"],
                        "call_id": call["call_id"],
                        "conversation": cid,
                        "exposed_name": call["exposed"],
                        "variant": call["variant"],
                    },
                    key=f"call:{call['call_id']}",
                )
            )
        return Waiting(
            checkpoint=dict(tx.find(tx.task_id).state.checkpoint), on=tuple(live), policy="any"
        )
    return None
