"""The sessions API's request and response models (its OpenAPI schemas)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..engine.failures import MAX_FAILURE_MESSAGE, MAX_FAILURE_TYPE
from .paths import MAX_NAME as MAX_NAME  # re-exported: routes_api takes them from here
from .paths import SESSION_ID_PATTERN as SESSION_ID_PATTERN

REQUEST_ID_PATTERN = r"^[A-Za-z0-9_.:@=+-]{1,128}$"
MAX_CONTENT_CHARS = 100_000  # one user input; larger text belongs in a document or a file


class CreateSession(BaseModel):
    """``POST /sessions``: an optional id (creating an existing session is a no-op)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description="omit to get a random id"
    )


class SessionCreated(BaseModel):
    """The created (or existing) session."""

    session_id: str


class SubmitInput(BaseModel):
    """``POST /sessions/{session_id}/inputs``: user input for the main conversation."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    request_id: str = Field(
        pattern=REQUEST_ID_PATTERN,
        description="idempotency key: submitting again with it returns the first submission",
    )
    when_busy: Literal["steer", "follow_up", "reject"] = Field(
        default="follow_up",
        description="what to do while a run is going: interrupt its tool calls and be answered "
        "next by it (steer), "
        "start after it (follow_up) or refuse (reject)",
    )


class SignalKeyView(BaseModel):
    """One key a sleeping task waits on."""

    signal: str
    key: str


class FailureHeld(BaseModel):
    """The failure a key holds instead of a value: its type and message (the message cut to
    the first 256 characters; ``data`` is left out of the view)."""

    type: str
    message: str


class SlotView(BaseModel):
    """A key of the task holding something not consumed yet: a value, a failure (shown as a
    failure, never as a value) or expired. The value itself is not in the view."""

    signal: str
    key: str
    holds: str = Field(description="value | failure | expired")
    failure: FailureHeld | None = Field(default=None, description="set when it holds a failure")


class ToolCallView(BaseModel):
    """What a live tool call is calling."""

    name: str
    arguments: Any = None


class TaskNode(BaseModel):
    """A live task: its status and, when parked, what it waits for."""

    id: str
    kind: str
    owner: str | None = None
    status: str = Field(description="pending | running | sleeping | waiting | completing")
    abort_marked: bool = False
    phase: str | None = None
    until: float | None = Field(default=None, description="a sleep's deadline (epoch seconds)")
    keys: list[SignalKeyView] | None = Field(default=None, description="a sleep's signal keys")
    heartbeat: float | None = Field(
        default=None, description="a sleep's heartbeat interval (seconds), when it has one"
    )
    beat_by: float | None = Field(
        default=None,
        description="when the next beat is due (epoch seconds): no beat (and no value) by then "
        "wakes the task with a missed heartbeat",
    )
    slots: list[SlotView] | None = Field(
        default=None, description="keys holding a value, a failure or expired, not consumed yet"
    )
    policy: str | None = Field(default=None, description="a wait's policy")
    on: list[str] | None = Field(default=None, description="the tasks a wait is on")
    tool: ToolCallView | None = Field(default=None, description="set for a live tool call")


class WakeView(BaseModel):
    """Whether the session has work to run now, and when it must run next otherwise."""

    active: bool
    at: float | None = None


class WebhookView(BaseModel):
    """A webhook URL a live task listens on (a capability: whoever has it can post to it)."""

    url: str
    task_id: str = Field(description="the task that minted it and receives its requests")
    tool: str | None = Field(default=None, description="the tool whose call minted it")
    signal: str
    key: str = Field(description="the signal key; '<prefix>.*' takes one request per key")
    source: Literal["tool", "workflow"] = Field(
        description="minted by a tool (mint_webhook) or a workflow body (ctx.webhook)"
    )
    name: str | None = Field(default=None, description="a workflow webhook's operation name")
    signed: bool = Field(description="requests need X-Bide-Signature and X-Bide-Timestamp")
    received: int = Field(description="requests delivered so far")


class SessionView(BaseModel):
    """``GET /sessions/{session_id}``: a bounded summary with the first page of the live
    tasks, of the transcript, of the submissions and of the live webhooks; each ``*_next``
    cursor continues its list on ``GET /sessions/{session_id}/tasks``, ``.../transcript``,
    ``.../submissions`` or ``.../hooks``."""

    session_id: str
    owner: str | None = Field(
        default=None,
        description="the IAM principal that created it (none: created before "
        "owners were recorded, open to every caller)",
    )
    running: bool = Field(description="whether a generation run is open")
    wake: WakeView
    entries_total: int = Field(default=0, description="transcript entries so far")
    tasks_total: int = Field(default=0, description="live tasks now")
    tasks: list[TaskNode | OmittedItem] = Field(
        description="the first page of live tasks (oldest first)"
    )
    tasks_next: str | None = None
    tasks_more: bool = False
    entries: list[dict[str, Any]] = Field(description="the first page of the transcript")
    entries_next: str | None = None
    entries_more: bool = False
    submissions: list[dict[str, Any]] = Field(description="the first page of submissions")
    submissions_next: str | None = None
    submissions_more: bool = False
    webhooks: list[WebhookView | OmittedItem] = Field(
        default_factory=list,
        description="the first page of live webhook URLs (as GET .../hooks lists them)",
    )
    webhooks_next: str | None = None
    webhooks_more: bool = False


class _PageFields(BaseModel):
    next: str | None = Field(
        description="the cursor after this page's last item: pass it as ?cursor= to read on "
        "(also after the last page, to read what is added later); null only for an empty "
        "list read from its start"
    )
    more: bool = Field(description="whether more items existed when this page was read")


class TranscriptPage(_PageFields):
    """``GET /sessions/{session_id}/transcript``: transcript entries, oldest first."""

    session_id: str
    items: list[dict[str, Any]]


class OmittedItem(BaseModel):
    """What stands for an item larger than a page may hold (see the page byte bound)."""

    omitted: Literal[True]
    bytes: int
    reason: str


class TasksPage(_PageFields):
    """``GET /sessions/{session_id}/tasks``: live tasks, oldest first."""

    session_id: str
    items: list[TaskNode | OmittedItem]


class SubmissionsPage(_PageFields):
    """``GET /sessions/{session_id}/submissions``: submissions in request-id order."""

    session_id: str
    items: list[dict[str, Any]]


class SessionListed(BaseModel):
    """One of the caller's sessions."""

    session_id: str
    created_at: float = Field(description="epoch seconds")


class SessionsPage(_PageFields):
    """``GET /sessions``: the caller's sessions, newest first."""

    items: list[SessionListed]


class HooksPage(_PageFields):
    """``GET /sessions/{session_id}/hooks``: the webhook URLs the session's live tasks
    listen on, in task creation order."""

    session_id: str
    items: list[WebhookView | OmittedItem]


class Stopped(BaseModel):
    """The result of Stop."""

    stopped: bool = Field(description="false when no run was going")


class Cancelled(BaseModel):
    """The result of cancelling a task."""

    cancelled: bool = Field(description="false when the task had already ended")


class FailureBody(BaseModel):
    """A failure given instead of a value or an answer (``bide.SignalFailure``)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=MAX_FAILURE_TYPE, description="a short name")
    message: str = Field(max_length=MAX_FAILURE_MESSAGE)
    data: Any = Field(default=None, description="optional JSON details")


class AnswerAsk(BaseModel):
    """An answer to a workflow's question: an option, free text, or both; or a failure
    instead (the waiting ``ctx.ask`` raises it)."""

    option_id: str | None = Field(default=None, max_length=MAX_NAME)
    text: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)
    failure: FailureBody | None = None


class CompleteAuthorization(BaseModel):
    """A sign-in callback: the provider's token (kept by the provider port, never stored in
    the session)."""

    token: str = Field(min_length=1, max_length=16_384)


class Delivery(BaseModel):
    """What became of an answer or a callback (the signal result)."""

    result: str


class WorkflowView(BaseModel):
    """``GET /sessions/{session_id}/workflow``: a bounded view with the first page of the open
    questions, sign-ins, background tasks, pending approvals and runs that failed on
    non-determinism (each oldest first); each ``<list>_next`` cursor continues its list on
    ``GET /sessions/{session_id}/workflow/<list>`` while ``<list>_more`` is true."""

    session_id: str
    asks: list[dict[str, Any]] = Field(description="the first page of open questions")
    asks_next: str | None = None
    asks_more: bool = False
    authorizations: list[dict[str, Any]] = Field(description="the first page of open sign-ins")
    authorizations_next: str | None = None
    authorizations_more: bool = False
    tasks: list[dict[str, Any]] = Field(description="the first page of the background tasks")
    tasks_next: str | None = None
    tasks_more: bool = False
    approvals: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the first page of approvals waiting for a decision (bide.approvals), "
        "with the arguments of the call they would let run",
    )
    approvals_next: str | None = None
    approvals_more: bool = False
    nondeterminism: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the first page of workflow runs that failed because their body no "
        "longer replays its recorded history (task_id, tool, position, reason, message, "
        "detected_at)",
    )
    nondeterminism_next: str | None = None
    nondeterminism_more: bool = False


class WorkflowPage(_PageFields):
    """``GET /sessions/{session_id}/workflow/{list}``: a page of one list of the workflow
    view, oldest first (an item over the page byte bound is an ``omitted`` stub)."""

    session_id: str
    name: str = Field(
        description="which list: asks, authorizations, tasks, approvals or nondeterminism"
    )
    items: list[dict[str, Any]]


class DecideApproval(BaseModel):
    """A decision on a pending approval."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    by: str | None = Field(default=None, max_length=MAX_NAME, description="who decided")
    note: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)


class ApprovalDecided(BaseModel):
    """What became of a decision: ``decided`` (the call resumes), ``already_decided`` (the
    first decision stands), ``closed`` (cancelled, past its deadline, or the call stopped
    waiting) or ``not_found``."""

    result: Literal["decided", "already_decided", "closed", "not_found"]


class Ended(BaseModel):
    """The background tasks cancelled when the session ended."""

    cancelled: list[str]


class ErrorBody(BaseModel):
    """Why a request was refused."""

    error: str


class FieldError(BaseModel):
    """One invalid field: where it is and why it is invalid."""

    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """422: the request failed validation."""

    statusCode: int = 422  # camelCase: the name Powertools' own 422 answer uses
    detail: list[FieldError]


# --- the host's events and actions (bide.service.host) ---------------------------------------


class EventsPage(_PageFields):
    """``GET /sessions/{session_id}/events``: the session's events, oldest first. Each has
    ``seq`` (1, 2, ...), ``type`` (``run_ended``, ``approval_requested``,
    ``approval_decided``, ``approval_closed``, ``promise_settled``, ``ask_opened``,
    ``ask_answered``, ``ask_closed``, ``progress``), ``at`` (epoch seconds) and the fields of
    its type; a field over 2 KiB is ``{"omitted": true, "bytes": n}``."""

    session_id: str
    items: list[dict[str, Any]]


class ResolvePromise(BaseModel):
    """A promise's value (any JSON; the store's value limits apply: 413 over them)."""

    model_config = ConfigDict(extra="forbid")

    value: Any = Field(default=None, description="the promise's value")


class RejectPromise(BaseModel):
    """Why the promise failed: a message, and optionally its type and JSON details."""

    model_config = ConfigDict(extra="forbid")

    error: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    type: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FAILURE_TYPE,
        description="the error's type (default Rejected)",
    )
    data: Any = Field(default=None, description="optional JSON details")


class PromiseSettledResult(BaseModel):
    """What became of a resolution: ``settled`` (this ended the promise), ``ignored`` (it
    had ended; the first outcome stands), ``expired`` (its deadline had passed) or
    ``not_found``."""

    result: Literal["settled", "ignored", "expired", "not_found"]


class ReplyToInvocation(BaseModel):
    """A bound receiver's reply for one completion key of an invocation. It must name the
    producer and correlation the invocation was emitted with."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=MAX_NAME, description="the completion key")
    producer: str = Field(min_length=1, max_length=MAX_NAME)
    correlation: str = Field(min_length=1, max_length=MAX_NAME)
    status: Literal["resolved", "rejected"] = "resolved"
    value: Any = Field(default=None, description="the reply (checked against the reply schema)")
    error: str | None = Field(
        default=None, min_length=1, max_length=MAX_CONTENT_CHARS, description="with rejected"
    )

    @model_validator(mode="after")
    def _error_with_rejected(self) -> ReplyToInvocation:
        # A rejection without its reason would reach the caller as a bare failure.
        if self.status == "rejected" and self.error is None:
            raise ValueError("error: a rejected reply needs its error")
        return self
