"""Where a run's history lives: memo names, document keys and signal keys.

A workflow body's history is kept in its task's memos, which are first-writer-wins (the
older ones in sealed pages, documents the engine writes once: :mod:`bide.engine.memo_pages`):
a rerun after a crash records the same thing the first run did, or finds what it recorded.
Every durable operation gets the next sequence number ``n`` when the body creates it:

* ``wf.<n>``: the operation as first evaluated, ``{"op": kind, "name": name, ..., "args":
  digest}`` with the values that must not change on replay (a sleep's ``until``, an ask's
  document, a webhook's nonce) and a digest of the arguments the body passed. A different
  kind, name or (when the record has one: older ones do not) digest at the same position on
  replay is non-determinism, and so is a body that ends with fewer operations than recorded.
* ``wf.<n>.r``: its resolution, ``{"v": value}`` or ``{"error": {...}}``. A resolved
  operation returns this on every replay and never runs again.
* ``wf.<n>.t<k>``: attempt ``k`` of a step that did not finish it: a failure waiting for its
  retry (``{"error", "retry_at"}``) or a sign-in it waits for (``{"auth", "provider"}``).

Signal keys are derived from sequence numbers too, so a key that woke the task or expired is
never listed again: doorbells ``wf.<n>.<k>`` on :data:`WAKE` (the ``k``-th park of operation
``n``), webhook requests ``wf.<n>.<i>`` on :data:`WEBHOOK` (request ``i`` of the webhook
created by operation ``n``) and subagent settlements ``wf.<n>`` on ``SUBMISSION_SETTLED``.
Tokens never enter any of these (see :mod:`bide.workflow.auth`).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ..engine.signals import SignalToken, define_signal

if TYPE_CHECKING:
    from ..engine.runtime import Runtime

WAKE: SignalToken[Any] = define_signal("bide.workflow.wake", 1, Any)
"""Rings a parked run whose answer is kept in a document (an ask, a sign-in)."""

WEBHOOK: SignalToken[Any] = define_signal("bide.workflow.webhook", 1, Any)
"""Carries one request body of a workflow webhook (any JSON)."""

PREFIX = "wf."


def op_memo(seq: int) -> str:
    """The memo holding operation ``seq`` as first evaluated."""
    return f"wf.{seq}"


def result_memo(seq: int) -> str:
    """The memo holding operation ``seq``'s resolution."""
    return f"wf.{seq}.r"


def attempt_memo(seq: int, attempt: int) -> str:
    """The memo holding attempt ``attempt`` (0-based) of step ``seq`` that did not finish it."""
    return f"wf.{seq}.t{attempt}"


def seq_key(seq: int, index: int | None = None) -> str:
    """``wf.<seq>`` or ``wf.<seq>.<index>``: signal keys derived from an operation."""
    return f"wf.{seq}" if index is None else f"wf.{seq}.{index}"


def derived_id(prefix: str, *parts: object) -> str:
    """A stable id for something a run creates (the same on every replay)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:24]
    return f"{prefix}{digest}"


def memos(rt: Runtime) -> dict[str, Any]:
    """The task's memos as last adopted (read-only use): to find what a run recorded. Those
    of sealed pages too (:mod:`bide.engine.memo_pages`), read once per process."""
    return rt.recorded_memos()


def has_history(rt: Runtime) -> bool:
    """Whether any operation of this task was recorded: the record's own memos first (the
    newest, unsealed), the sealed pages only when those hold none."""
    record = rt._h._live.get(rt.task_id)
    if record is None:
        return False
    if any(name.startswith(PREFIX) for name in record.memos):
        return True
    return record.memo_pages > 0 and any(name.startswith(PREFIX) for name in memos(rt))
