"""Telling an operator that a workflow run no longer replays its history.

:class:`~bide.workflow.errors.NonDeterminism` is raised by the replay itself
(:meth:`WorkflowContext._same <bide.workflow.context.WorkflowContext._same>` for a changed
kind, name or arguments) or found when the body ends (:func:`fewer_operations`). Either way
:func:`report_nondeterminism` runs before the run ends failed: a document
``wf/nondeterminism/<task id>`` (listed by :func:`~bide.workflow.view_in`, so
``GET /sessions/{id}/workflow``), then the harness service :data:`NONDETERMINISM_SINK`, which
the service wires to a log line and an EMF metric (:mod:`bide.service.observability`); with
no sink this package's logger reports it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from ..constants import NONDETERMINISM_SINK as NONDETERMINISM_SINK  # the service's name
from .errors import NonDeterminism
from .history import PREFIX, memos

if TYPE_CHECKING:
    from ..engine.runtime import Runtime
    from .context import RunHost


def fewer_operations(rt: Runtime, created: int) -> NonDeterminism | None:
    """Non-determinism when the history holds an operation past the ``created`` ones the
    body asked for before it ended: the body skipped operations it recorded before."""
    later = [
        (int(name[len(PREFIX) :]), record)
        for name, record in memos(rt).items()
        if _OP_MEMO.fullmatch(name) and int(name[len(PREFIX) :]) > created
    ]
    if not later:
        return None
    seq, record = min(later, key=lambda item: item[0])
    recorded = (str(record.get("op")), str(record.get("name")))
    return NonDeterminism(seq, recorded, ("end", ""), reason="count")


_OP_MEMO = re.compile(r"wf\.[0-9]+")

NONDETERMINISM_PREFIX = "wf/nondeterminism/"
"""Documents ``wf/nondeterminism/<task id>``: a run that no longer replays its history."""


_log = logging.getLogger("bide.workflow")


async def report_nondeterminism(host: RunHost, error: NonDeterminism) -> dict[str, Any]:
    """Tell an operator: a document the workflow view lists (written once per task), then
    the host's :data:`NONDETERMINISM_SINK` (or this package's log when there is none). The
    details, as the task's outcome carries them."""
    rt = host.rt
    details = {
        "task_id": rt.task_id,
        "tool": host.tool,
        "call_id": host.call_id,
        **error.describe(),
    }

    def write(tx: Any) -> dict[str, Any]:
        key = NONDETERMINISM_PREFIX + rt.task_id
        found = tx.get_doc(key)
        if found is None:
            found = {**details, "detected_at": tx.now()}
            tx.put_doc(key, found)
        return found  # type: ignore[no-any-return]

    details = await rt.write(write)
    sink = rt.services.get(NONDETERMINISM_SINK)
    if sink is not None:
        sink(rt.session_id, details)
    else:
        _log.error("workflow non-determinism in session %s: %s", rt.session_id, details)
    return details
