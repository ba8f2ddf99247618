"""Requests a run publishes for a person: questions (``ctx.ask``) and sign-ins.

Each is a document of the session, so a UI lists them with the transcript and they change
atomically with the run's own commits:

* ``ask/<id>``: an :class:`InputRequest` (prompt, display, options, freeform, status);
* ``auth/<id>``: an :class:`AuthorizationRequest` (the provider a step needs a token for).

The document is the truth about the answer: answering writes it and, in the same commit, rings
the doorbell key the waiting run parked on (``wake``), if any. A run that is not waiting for
the request at that moment finds the answer in the document when it next asks. A request is
answered once (later answers get ``duplicate``); the run withdraws its open requests when it
ends (later answers get ``closed``). An answer never enters a conversation: it steers nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..engine.events import emit_in
from ..engine.failures import SignalFailure, failure_errors
from ..engine.host import HostTx
from ..engine.limits import check_value
from ..engine.signals import SignalResult
from ..engine.store.base import Store
from .history import WAKE, memos

if TYPE_CHECKING:
    from ..engine.harness import Draft, Harness
    from ..engine.runtime import Runtime

Display = Literal["confirmation", "select", "text"]
RequestStatus = Literal["open", "answered", "failed", "completed", "withdrawn"]
ASK_PREFIX = "ask/"
AUTH_PREFIX = "auth/"


class AskOption(BaseModel):
    """One choice offered with a question."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    label: str
    description: str | None = None
    style: Literal["primary", "danger", "default"] = "default"


class AskAnswer(BaseModel):
    """What ``await ctx.ask(...)`` returns: the chosen option and/or free text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    option_id: str | None = None
    text: str | None = None


class InputRequest(BaseModel):
    """A question a run asks a person (document ``ask/<id>``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ask"] = "ask"
    id: str
    task_id: str
    tool: str
    call_id: str | None = None
    prompt: str
    display: Display = "text"
    options: list[AskOption] = Field(default_factory=list)
    allow_freeform: bool = False
    status: RequestStatus = "open"
    answer: AskAnswer | None = None
    failure: dict[str, Any] | None = None
    """A failure given instead of an answer (status ``failed``): ``ctx.ask`` raises it."""
    created_at: float = 0.0
    ended_at: float | None = None
    wake: str | None = Field(default=None, description="the doorbell key the run parks on")

    def check(self, answer: AskAnswer) -> str | None:
        """Why ``answer`` does not fit this request, or None when it does."""
        if answer.option_id is None and not answer.text:
            return "an answer needs an option_id or text"
        ids = [o.id for o in self.options]
        if answer.option_id is not None and answer.option_id not in ids:
            return f"option {answer.option_id!r} is not one of {ids}"
        if answer.text and self.options and not self.allow_freeform:
            return "this question takes one of its options, not free text"
        return None


class AuthorizationRequest(BaseModel):
    """A sign-in a step needs (document ``auth/<id>``); the callback completes it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["authorization"] = "authorization"
    id: str
    task_id: str
    tool: str
    provider: str
    step: str
    status: RequestStatus = "open"
    created_at: float = 0.0
    ended_at: float | None = None
    wake: str | None = None


def ask_key(ask_id: str) -> str:
    """The document key of a question."""
    return f"{ASK_PREFIX}{ask_id}"


def auth_key(request_id: str) -> str:
    """The document key of an authorization request."""
    return f"{AUTH_PREFIX}{request_id}"


#: Why questions were closed unanswered (``ask_closed``'s ``reason``): how their run ended.
CloseReason = Literal["completed", "failed", "cancelled", "ended"]


def answer_path(session_id: str, ask_id: str) -> str:
    """The API route that answers a question (``POST``, body ``{option_id?, text?}``)."""
    return f"/sessions/{session_id}/asks/{ask_id}/answer"


def ask_opened_in(tx: Any, request: InputRequest) -> None:
    """Report a question just published, in the commit that publishes it."""
    emit_in(
        tx,
        "ask_opened",
        {
            "ask": request.id,
            "task_id": request.task_id,
            "tool": request.tool,
            "call_id": request.call_id,
            "prompt": request.prompt,
            "display": request.display,
            "options": [o.model_dump(mode="json", exclude_none=True) for o in request.options],
            "allow_freeform": request.allow_freeform,
            "answer_path": answer_path(tx.session_id, request.id),
        },
    )


def withdraw(tx: Any, keys: list[str], reason: CloseReason = "ended") -> None:
    """Withdraw the open requests among ``keys`` (in ``tx``'s commit): the run ended, as
    ``reason`` says. The questions among them are reported by one ``ask_closed`` event."""
    closed: list[str] = []
    task_id = None
    for key in keys:
        body = tx.get_doc(key)
        if body is not None and body.get("status") == "open":
            tx.put_doc(key, {**body, "status": "withdrawn", "ended_at": tx.now(), "wake": None})
            if key.startswith(ASK_PREFIX):
                closed.append(body["id"])
                task_id = body["task_id"]
    if closed:
        emit_in(tx, "ask_closed", {"asks": closed, "task_id": task_id, "reason": reason})


# --- answering (host side) ---------------------------------------------------------------


def _close(
    d: Draft, key: str, body: dict[str, Any], update: dict[str, Any], now: float
) -> SignalResult:
    """Settle an open request and ring the run if it waits on it: one commit."""
    d.put_doc(key, {**body, **update, "ended_at": now, "wake": None})
    wake = body.get("wake")
    if wake:
        d.signal(body["task_id"], WAKE, wake, {"request": body["id"]}, now)
    return SignalResult.DELIVERED


def _settle(
    harness: Harness, key: str, decide: Callable[[dict[str, Any]], dict[str, Any] | SignalResult]
) -> SignalResult:
    now = harness.clock.now()

    def change(d: Draft) -> SignalResult:
        body = d.get_doc(key)
        if body is None:
            return SignalResult.NOT_FOUND
        if body["status"] in ("answered", "failed", "completed"):
            return SignalResult.DUPLICATE
        if body["status"] == "withdrawn":
            return SignalResult.CLOSED
        record = d.find(body["task_id"])
        if record is None or not record.live or record.state.status == "completing":
            # The run ended without withdrawing (a cut-off replay-unsafe run): do it now.
            withdraw(HostTx(harness, d), [key])
            return SignalResult.CLOSED
        update = decide(body)
        if isinstance(update, SignalResult):
            return update
        result = _close(d, key, body, update, now)
        if key.startswith(ASK_PREFIX):
            fields = {"ask": body["id"], "task_id": body["task_id"], "answer": update.get("answer")}
            if "failure" in update:  # a failure given instead of an answer
                fields["failure"] = update["failure"]
            emit_in(HostTx(harness, d), "ask_answered", fields)
        return result

    return harness._apply(change)


def answer_in(
    harness: Harness,
    ask_id: str,
    *,
    option_id: str | None = None,
    text: str | None = None,
    failure: SignalFailure | None = None,
) -> SignalResult:
    """Answer a question through an attached or open harness: ``delivered`` (the run
    resumes), ``duplicate`` (already answered: the first answer stands), ``closed`` (the run
    ended and withdrew it), ``invalid`` (not one of its options, or a malformed ``failure``)
    or ``not_found``. A ``failure`` instead of an answer makes ``ctx.ask`` raise
    :class:`~bide.engine.failures.FailureReceived` (status ``failed``; first wins too)."""
    answer = AskAnswer(option_id=option_id, text=text)

    def decide(body: dict[str, Any]) -> dict[str, Any] | SignalResult:
        if failure is not None:
            if failure_errors(failure):
                return SignalResult.INVALID
            check_value(failure.to_json(), f"the failure answering {ask_id!r}")
            return {"status": "failed", "failure": failure.to_json()}
        if InputRequest.model_validate(body).check(answer) is not None:
            return SignalResult.INVALID
        return {"status": "answered", "answer": answer.model_dump()}

    return _settle(harness, ask_key(ask_id), decide)


def complete_in(harness: Harness, request_id: str) -> SignalResult:
    """Mark an authorization request completed and resume its run (the token itself was
    stored in the provider port by the caller, never here)."""
    return _settle(harness, auth_key(request_id), lambda _body: {"status": "completed"})


# --- queries -----------------------------------------------------------------------------


def _open(source: Harness | Store, prefix: str, session_id: str | None) -> list[dict[str, Any]]:
    from ..engine.harness import Harness

    if isinstance(source, Harness):
        docs = [d.body for d in source.list_docs(prefix)]
        task = source.task
    else:
        if session_id is None:
            raise ValueError("a store needs the session id")
        store, sid = source, session_id
        docs = [d.body for d in store.list_docs(sid, prefix)]

        def task(task_id: str) -> Any:
            return store.get_task(sid, task_id)

    found = []
    for body in docs:
        if body.get("status") != "open":
            continue
        record = task(body["task_id"])
        if record is not None and record.live:  # a run that ended withdraws what it asked
            found.append(body)
    return sorted(found, key=lambda b: (b.get("created_at", 0.0), b["id"]))


def pending_asks(source: Harness | Store, session_id: str | None = None) -> list[InputRequest]:
    """The session's open questions (oldest first), from a harness or from a store."""
    return [InputRequest.model_validate(b) for b in _open(source, ASK_PREFIX, session_id)]


def pending_authorizations(
    source: Harness | Store, session_id: str | None = None
) -> list[AuthorizationRequest]:
    """The session's open sign-in requests, from a harness or from a store."""
    return [AuthorizationRequest.model_validate(b) for b in _open(source, AUTH_PREFIX, session_id)]


def open_requests(rt: Runtime) -> list[str]:
    """The document keys of every question and sign-in this run published (to withdraw)."""
    keys: list[str] = []
    for name, value in memos(rt).items():
        if not name.startswith("wf.") or not isinstance(value, dict):
            continue
        if value.get("op") == "ask" and "doc" in value:
            keys.append(value["doc"])
        if "auth" in value:
            keys.append(auth_key(value["auth"]))
    return keys
