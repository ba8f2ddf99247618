"""What a run's end tells the world, in the commit that ends it: the session's event stream
(:mod:`bide.engine.events`) and, when the session has a lifecycle controller for the
conversation, the controller's mailbox (design 002: a controller receives run-terminal
notifications). Every ending counts: an answer (``done``), a failure or a reached limit
(``failed``) and a Stop or cancel (``stopped``).

The controller's document and mailbox names live here, below :mod:`bide.controller`, so the
generation can post without importing the layer above it.
"""

from __future__ import annotations

from typing import Any, Literal

from ..engine.events import emit_in
from ..engine.mailbox import post
from .conversation import read_head

CONTROLLER_DOC = "controller"
CONTROLLER_MAILBOX = "controller"

RunStatus = Literal["done", "failed", "stopped"]


def run_ended_in(
    tx: Any,
    cid: str,
    run: str,
    status: RunStatus,
    *,
    answer: str | None = None,
    error: str | None = None,
) -> None:
    """Report that ``run`` of conversation ``cid`` ended. Only top-level conversations are
    reported (a subagent's runs belong to the task that owns them); call it while the head
    still names the run."""
    head = read_head(tx, cid)
    if head.owner_task is not None or head.run != run:
        return
    notice: dict[str, Any] = {"run": run, "conversation": cid, "status": status}
    if answer is not None:
        notice["answer"] = answer
    if error is not None:
        notice["error"] = error
    emit_in(tx, "run_ended", notice)
    controller = tx.get_doc(CONTROLLER_DOC)
    if isinstance(controller, dict) and controller.get("conversation") == cid:
        post(tx, CONTROLLER_MAILBOX, {"type": "run_ended", **notice}, ping=controller["task"])
