"""Durable operations: what a workflow body awaits, one module per family.

* :mod:`~bide.workflow.ops.base`: :class:`Op` and what polling one says (:class:`Ready`,
  :class:`Raise`, :class:`Pending`);
* :mod:`~bide.workflow.ops.steps`: ``ctx.step`` (:class:`StepOp`, :class:`RetryPolicy`);
* :mod:`~bide.workflow.ops.waits`: ``ctx.sleep`` and ``ctx.wait_for``;
* :mod:`~bide.workflow.ops.asks`: ``ctx.ask``;
* :mod:`~bide.workflow.ops.webhooks`: ``ctx.webhook`` and its :class:`Webhook` handle;
* :mod:`~bide.workflow.ops.agents`: ``ctx.agent`` and ``task.post_message``;
* :mod:`~bide.workflow.ops.race`: ``ctx.race``.

Every name is importable from here, as it was before the split.
"""

from ..history import WAKE
from .agents import AgentOp, MessageOp
from .asks import AskOp
from .base import Op, Outcome, Pending, Raise, Ready, describe
from .race import RaceOp, RaceResult
from .steps import RetryPolicy, StepOp
from .waits import SleepOp, WaitForOp
from .webhooks import NextRequestOp, Webhook, WebhookOp

__all__ = [
    "WAKE",
    "AgentOp",
    "AskOp",
    "MessageOp",
    "NextRequestOp",
    "Op",
    "Outcome",
    "Pending",
    "RaceOp",
    "RaceResult",
    "Raise",
    "Ready",
    "RetryPolicy",
    "SleepOp",
    "StepOp",
    "WaitForOp",
    "Webhook",
    "WebhookOp",
    "describe",
]
