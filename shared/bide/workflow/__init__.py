"""Workflow tools: straight-line ``async`` bodies that wait durably, and background tasks.

Built on the parking engine (design 001 ch. V-VII), not beside it: a workflow body runs inside
a tool task (or a background task) and parks it with the same :class:`~bide.tools.Sleep` any
tool returns; a wake runs it again, and the body is **replayed** from a history kept in the
task's first-writer-wins memos (:mod:`bide.workflow.history`), so a rerun records the same
thing. Designs 000 and 003 give the behaviour:

* **Shape as data** (:class:`~bide.tools.define.ToolShape`): ``lifetime`` step | task and
  ``suspend`` none | workflow, computed once at definition, shown in the manifest; the
  ``task`` argument exists iff the lifetime is ``task`` (:mod:`bide.workflow.define`).
* **Workflow bodies** (:func:`define_workflow_tool`): ``await ctx.step(fn, name=,
  retry=)`` (recorded once; retried by :class:`RetryPolicy` on parked backoff; a
  :class:`FatalError` is not retried; never re-run on replay), ``ctx.sleep(hours=4)``,
  ``ctx.wait_for(token, key, timeout=)``, ``ctx.ask(prompt, display=, options=,
  allow_freeform=)`` -> :class:`AskAnswer`, ``hook = await ctx.webhook()`` then ``await hook``
  / ``async for body in hook``, ``ctx.agent(key=, target=, message=)``,
  ``ctx.first(a, b, timeout=)`` (a :class:`RaceResult`: ``winner``/``value`` or
  ``timed_out``) and ``ctx.race(op, timeout=)`` (the value or None); losers stay usable
  (:mod:`bide.workflow.ops.race`). A body is an ``async def``: anything else is refused at
  definition.
* **Replay checks**: an operation whose kind, name or arguments (a digest kept in its record)
  differ from the history at its position, or a body that ends with fewer operations than
  the history holds, raises :class:`NonDeterminism` and fails the run; it is reported to an
  operator (a ``wf/nondeterminism/<task>`` document in :func:`view_in`, the harness service
  ``workflow_nondeterminism``: a log line and a metric on the service).
* **Progress and messages**: ``ctx.progress(value)`` goes to the session's event stream
  as coalesced ``progress`` events (:mod:`bide.engine.progress`) and to the services'
  ``workflow_progress`` sink (last write wins); never the result. A background body's
  ``await task.post_message(text)`` wakes the parent conversation with a message attributed
  to the task. The body's return value is the result.
* **Background** (``lifetime="task"``): the model gets ``{"status": "working", "task_id"}``
  exactly once, at admission, whatever the body does; the body runs on as a session-owned
  task listed in the task index; completion or failure arrives later as a notification;
  ``task_cancel`` (:func:`task_cancel_tool`, :func:`cancel_background_in`) and
  :func:`end_session_in` cancel it (:mod:`bide.workflow.background`, :mod:`bide.workflow.index`).
* **ask** publishes an :class:`InputRequest` document (:func:`pending_asks`), answered once
  through :func:`answer_in`, withdrawn when the run ends; it never steers.
* **Cancellation**: an abort of a parked run replays the body and raises :class:`Cancelled`
  at the operation it was parked at; ``finally`` blocks run (``ctx.cancelled`` is true; steps
  there run and are recorded) within ``grace`` seconds, then the call ends aborted.
* **Provider authorization**: inside a step, ``await step.get_token(provider)`` (or
  ``ctx.get_token`` while a step runs) uses the :class:`AuthProviders` port; sign-in parks the
  run on an :class:`AuthorizationRequest` resumed by :func:`complete_authorization_in`,
  and the step is retried. Tokens never enter the history; in the body both methods raise.

Hosts: call :func:`install` (agent) or :func:`setup_app` (app) so harnesses know the
background task kind and webhook requests are deliverable; a :class:`bide.app.App` does it
when created. The ``*_in`` functions work on an
attached harness; :mod:`bide.service.workflow` wraps them as services (one request each).
"""

from ..tools.define import ToolShape, WorkflowTool
from .auth import AuthProviders, InMemoryAuthProviders
from .background import BACKGROUND_TASK, install, setup_app, workflow_kinds
from .context import StepContext, TaskHandle, WorkflowContext
from .define import define_background_tool, define_workflow_tool, result_of_value
from .errors import (
    Cancelled,
    FailureReceived,
    FatalError,
    HeartbeatMissed,
    NonDeterminism,
    StepFailed,
    SubagentFailed,
    WaitTimeout,
    WorkflowError,
)
from .history import WAKE, WEBHOOK
from .host import complete_authorization_in, post_webhook, view_in
from .index import (
    BackgroundTaskInfo,
    background_tasks,
    cancel_background_in,
    end_session_in,
    task_cancel_tool,
)
from .ops import Op, RaceResult, RetryPolicy, Webhook
from .requests import (
    AskAnswer,
    AskOption,
    AuthorizationRequest,
    InputRequest,
    answer_in,
    pending_asks,
    pending_authorizations,
)

__all__ = [
    "BACKGROUND_TASK",
    "WAKE",
    "WEBHOOK",
    "AskAnswer",
    "AskOption",
    "AuthProviders",
    "AuthorizationRequest",
    "BackgroundTaskInfo",
    "Cancelled",
    "FailureReceived",
    "FatalError",
    "HeartbeatMissed",
    "InMemoryAuthProviders",
    "InputRequest",
    "NonDeterminism",
    "Op",
    "RaceResult",
    "RetryPolicy",
    "StepContext",
    "StepFailed",
    "SubagentFailed",
    "TaskHandle",
    "ToolShape",
    "WaitTimeout",
    "Webhook",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowTool",
    "answer_in",
    "background_tasks",
    "cancel_background_in",
    "complete_authorization_in",
    "define_background_tool",
    "define_workflow_tool",
    "end_session_in",
    "install",
    "pending_asks",
    "pending_authorizations",
    "post_webhook",
    "result_of_value",
    "setup_app",
    "task_cancel_tool",
    "view_in",
    "workflow_kinds",
]
