"""Transport entry points: what the Lambda functions and the local dev server call.

* :func:`handle_worker`: an SQS batch of session wakes -> :func:`~bide.service.worker.run_session`
  per record, with partial-batch failure reporting;
* :func:`handle_signal`: API Gateway HTTP API (payload 2.0) events of the signal routes ->
  :func:`~bide.service.signals.deliver` / :func:`~bide.service.signals.deliver_webhook`;
* :func:`handle_api`: events of the sessions API, routed and validated by a Powertools
  ``APIGatewayHttpResolver`` (its OpenAPI document: :func:`openapi_json`).

They are ``async``; synchronous callers (a Lambda handler) use :func:`run`. No entry point
answers bad input with a 5xx: a 5xx means the service failed (503: try again).
"""

# No ``from __future__ import annotations`` here: Powertools reads the route functions'
# annotations at runtime, and they name types imported inside api_resolver().

import asyncio
import base64
import binascii
import json
import re
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import BaseModel

from ..agent.conversation import Submission
from ..aws.sqs import parse_wake
from ..constants import DEFAULT_SAFETY_MARGIN_MS
from ..engine.errors import ConflictError, DefinitionError, StoreUnavailable
from . import observability as obs
from . import workflow as workflow_service
from .api_models import (
    MAX_NAME as _MAX_NAME,
)
from .api_models import (
    SESSION_ID_PATTERN,
    AnswerAsk,
    Cancelled,
    CompleteAuthorization,
    CreateSession,
    Delivery,
    Ended,
    ErrorBody,
    FieldError,
    SessionCreated,
    SessionView,
    Stopped,
    SubmitInput,
    ValidationErrorBody,
    WorkflowView,
)
from .deps import Deps
from .sessions import SessionNotFound, cancel_task, create_session, stop, submit, view
from .signals import STATUS_OF, deliver, deliver_webhook, parse_json_body
from .webhooks import WebhookRejected, parse_token
from .worker import run_session

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

T = TypeVar("T")

API_TITLE = "Bide sessions API"
API_VERSION = "0.1.0"

#: Session ids the HTTP routes accept: each is also the SQS FIFO message group of its wakes,
#: so it must be a valid MessageGroupId (<= 128 characters), and it must fit a URL segment.
#: Request ids become document keys: the same characters, no separators.

#: The routes :func:`handle_signal` serves (API Gateway route keys).
SIGNAL_ROUTES: dict[str, str] = {
    "hook": "POST /hooks/{token}",
    "signal": "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}",
}
#: The routes :func:`handle_api` serves (API Gateway route keys).
API_ROUTES: tuple[str, ...] = (
    "POST /sessions",
    "GET /sessions/{session_id}",
    "POST /sessions/{session_id}/inputs",
    "POST /sessions/{session_id}/stop",
    "POST /sessions/{session_id}/tasks/{task_id}/cancel",
    "GET /sessions/{session_id}/workflow",
    "POST /sessions/{session_id}/asks/{ask_id}/answer",
    "POST /sessions/{session_id}/authorizations/{request_id}/complete",
    "POST /sessions/{session_id}/end",
)

# Wake reasons worth their own metric; anything else is counted as "other".
_WAKE_REASONS = frozenset(
    {
        "signal",
        "signal-stored",
        "alarm",
        "submit",
        "submitted",
        "stop",
        "stopped",
        "cancel",
        "cancelled",
        "still-active",
        "rearm",
    }
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run an entry point from synchronous code (a Lambda handler): a fresh event loop per
    call, closed afterwards, so nothing outlives the invocation."""
    return asyncio.run(coro)


# --- worker ------------------------------------------------------------------------------------


async def handle_worker(
    deps: Deps,
    event: dict[str, Any],
    context: Any,
    *,
    safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
) -> dict[str, Any]:
    """Run the session of each wake in an SQS batch, in order, until parked; answer with the
    partial batch failure response (``{"batchItemFailures": [{"itemIdentifier": id}]}``).

    A run stops starting new work ``safety_margin_ms`` before the invocation's deadline
    (``context.get_remaining_time_in_millis()``, when there is one); the session is then
    re-queued. Once a record fails, every later record of the batch is reported failed without
    running: the queue is FIFO, and SQS redelivers failed messages in their order.
    """
    failures: list[str] = []
    try:
        for record in event.get("Records") or []:
            message_id = str(record.get("messageId", ""))
            if failures or not await _wake_one(deps, record, context, safety_margin_ms):
                failures.append(message_id)
    finally:
        obs.flush()
    return {"batchItemFailures": [{"itemIdentifier": m} for m in failures]}


async def _wake_one(deps: Deps, record: dict[str, Any], context: Any, margin_ms: int) -> bool:
    """One wake; False when it failed and SQS must deliver it again."""
    try:
        session_id, reason = parse_wake(str(record.get("body", "")))
    except ValueError as exc:
        # No retry can make a malformed wake valid; failing it would hold back the rest of
        # the batch until it reached the dead-letter queue. Dropped, loudly.
        obs.logger.error(
            "dropping a malformed wake message",
            extra={"message_id": record.get("messageId"), "error": str(exc)},
        )
        obs.count(obs.MALFORMED_WAKES)
        return True
    with obs.correlated(session_id=session_id):
        obs.count(obs.WAKES, reason=obs.bounded(reason, _WAKE_REASONS))
        try:
            done = await run_session(deps, session_id, stop_at=_stop_at(deps, context, margin_ms))
        except Exception:
            obs.logger.exception("worker run failed; the wake will be delivered again")
            obs.count(obs.WORKER_FAILURES)
            return False
        obs.count(obs.WORKER_ACTIONS, action=done.action)
        if not done.wake.active:
            obs.count(obs.PARKS)
        obs.logger.info(
            "session parked" if not done.wake.active else "session still active",
            extra={"reason": reason, "action": done.action, "wake_at": done.wake.at},
        )
    return True


def _stop_at(deps: Deps, context: Any, margin_ms: int) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return deps.clock.now() + (float(remaining()) - margin_ms) / 1000.0


# --- signals -----------------------------------------------------------------------------------


async def handle_signal(deps: Deps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Deliver a signal from an API Gateway v2 event of one of :data:`SIGNAL_ROUTES`.

    ``POST /hooks/{token}``: a capability webhook (signature, size, type and JSON checked);
    ``POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}``: a JSON body
    delivered by task id (the route is IAM-authorised in the stack). The answer is
    ``{"result": ..., "errors": [...]}`` with the result's status (202 delivered,
    200 duplicate, 422 invalid, 410 closed, 404 not_found); a refused request gets
    ``{"error": why}`` and its 4xx, and nothing is stored.
    """
    try:
        return _signal(deps, event)
    except WebhookRejected as exc:
        return _json_response(exc.status, {"error": exc.message})
    except (StoreUnavailable, ConflictError) as exc:
        obs.logger.warning("signal not delivered: the store is busy", extra={"error": str(exc)})
        return _busy(exc)
    except Exception:
        obs.logger.exception("signal delivery failed")
        return _json_response(500, {"error": "internal error; the signal may not be stored"})
    finally:
        obs.flush()


def _signal(deps: Deps, event: dict[str, Any]) -> dict[str, Any]:
    route, params = _match_route(event, SIGNAL_ROUTES)
    body = _body(event)
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    if route == "hook":
        # A token names its session: one no session can have is refused before any read.
        if not re.fullmatch(SESSION_ID_PATTERN, parse_token(params["token"])[0]):
            raise WebhookRejected(404, "unknown webhook")
        decision, binding = deliver_webhook(deps, params["token"], headers, body)
        session_id, task_id = binding.session_id, binding.task_id
    else:
        session_id, task_id = params["session_id"], params["task_id"]
        _check_path(params)
        value = parse_json_body(body, headers.get("content-type"))
        try:
            decision = deliver(deps, session_id, task_id, params["signal"], params["key"], value)
        except DefinitionError as exc:
            raise WebhookRejected(404, str(exc)) from None
    result = decision.result.value
    with obs.correlated(session_id=session_id, task_id=task_id):
        obs.logger.info("signal", extra={"route": route, "result": result})
    obs.count(obs.SIGNAL_RESULTS, result=result, route=route)
    return _json_response(
        STATUS_OF[decision.result], {"result": result, "errors": list(decision.errors)}
    )


def _check_path(params: dict[str, str]) -> None:
    if not re.fullmatch(SESSION_ID_PATTERN, params["session_id"]):
        raise WebhookRejected(404, f"no session {params['session_id'][:_MAX_NAME]!r}")
    for name in ("task_id", "signal", "key"):
        if not 0 < len(params[name]) <= _MAX_NAME:
            raise WebhookRejected(400, f"{name} must be 1 to {_MAX_NAME} characters")


def _match_route(event: dict[str, Any], routes: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The route an event is for and its path parameters (URL-decoded); 404 or 405 if none.
    Matched on the path itself, so API Gateway and the local server's events both work."""
    http = (event.get("requestContext") or {}).get("http") or {}
    method = str(http.get("method") or "").upper()
    path = str(event.get("rawPath") or http.get("path") or "")
    stage = (event.get("requestContext") or {}).get("stage")
    if stage and stage != "$default" and path.startswith(f"/{stage}/"):
        path = path[len(stage) + 1 :]
    segments = path.strip("/").split("/")
    for name, route_key in routes.items():
        route_method, template = route_key.split(" ", 1)
        parts = template.strip("/").split("/")
        if len(parts) != len(segments):
            continue
        params: dict[str, str] = {}
        for part, segment in zip(parts, segments, strict=True):
            if part.startswith("{"):
                params[part[1:-1]] = urllib.parse.unquote(segment)
            elif part != segment:
                break
        else:
            if method != route_method:
                raise WebhookRejected(405, f"use {route_method} for {template}")
            return name, params
    raise WebhookRejected(404, "no such route")


def _body(event: dict[str, Any]) -> bytes:
    raw = event.get("body")
    if raw is None:
        return b""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise WebhookRejected(400, "body is marked base64 but is not valid base64") from None
    return str(raw).encode("utf-8")


def _json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": int(status),
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":")),
        "isBase64Encoded": False,
    }


def _busy(exc: Exception) -> dict[str, Any]:
    return _json_response(
        503, {"error": f"the session store is busy; try again ({exc})"}, {"Retry-After": "1"}
    )


# --- sessions API ------------------------------------------------------------------------------


def _responses(ok: tuple[int, str, type[BaseModel]], *errors: int) -> dict[int, "OpenAPIResponse"]:
    """OpenAPI entries for a route's answer and the error answers it may give."""
    from aws_lambda_powertools.event_handler.openapi.types import (
        OpenAPIResponse,
        OpenAPIResponseContentModel,
    )

    described = {
        404: ("no such session (or task)", ErrorBody),
        422: ("invalid request: each field and why", ValidationErrorBody),
        503: ("the store is busy; try again", ErrorBody),
    }
    answers = {ok[0]: (ok[1], ok[2]), **{code: described[code] for code in errors}}
    return {
        code: OpenAPIResponse(
            description=text,
            content={"application/json": OpenAPIResponseContentModel(model=model)},
        )
        for code, (text, model) in answers.items()
    }


_resolvers: dict[int, tuple["weakref.ref[Deps]", "APIGatewayHttpResolver"]] = {}
_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def api_resolver(deps: Deps | None = None) -> "APIGatewayHttpResolver":
    """The sessions API as a Powertools resolver. ``deps=None`` builds one for its OpenAPI
    document only (its routes then refuse to run). :func:`handle_api` builds one per
    :class:`Deps` and keeps it."""
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
    from aws_lambda_powertools.event_handler.exceptions import NotFoundError
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
    from aws_lambda_powertools.event_handler.openapi.params import Body, Path

    app = APIGatewayHttpResolver(enable_validation=True)
    SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="a session id")]
    TaskId = Annotated[str, Path(min_length=1, max_length=_MAX_NAME, description="a task id")]

    def need() -> Deps:
        if deps is None:
            raise RuntimeError("this resolver was built for its OpenAPI document only")
        return deps

    def existing(session_id: str) -> Deps:
        # Commands wake the session before they write: refuse an unknown session before
        # that, so a 404 queues no worker run (one read of the session head).
        current = need()
        if current.store.head(session_id) == 0:
            raise SessionNotFound(f"no session {session_id!r}")
        return current

    def json_response(status: int, model: BaseModel) -> Response[Any]:
        return Response(status, "application/json", model.model_dump_json())

    @app.post(
        "/sessions",
        summary="Create a session",
        description="Creates a session with its main conversation; idempotent by id.",
        responses=_responses((201, "created", SessionCreated), 422, 503),
    )
    async def create(body: Annotated[CreateSession | None, Body()] = None) -> Response[Any]:
        session_id = await create_session(need(), body.session_id if body else None)
        return json_response(201, SessionCreated(session_id=session_id))

    @app.post(
        "/sessions/<session_id>/inputs",
        summary="Submit input",
        description="Submits user input to the session's main conversation and wakes the "
        "session. Idempotent by request_id: a repeat returns the first submission.",
        responses=_responses((202, "accepted", Submission), 404, 422, 503),
    )
    async def submit_input(session_id: SessionId, body: SubmitInput) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            submission = await submit(
                existing(session_id),
                session_id,
                body.content,
                request_id=body.request_id,
                when_busy=body.when_busy,
            )
        return json_response(202, submission)

    @app.get(
        "/sessions/<session_id>",
        summary="Read a session",
        description="The live task graph (status, until, keys, policy), live tool calls, the "
        "transcript and the submissions.",
        responses=_responses((200, "the session", SessionView), 404, 422, 503),
    )
    async def read(session_id: SessionId) -> Response[Any]:
        found = await view(need(), session_id)
        return json_response(200, SessionView.model_validate(found))

    @app.post(
        "/sessions/<session_id>/stop",
        summary="Stop the running generation",
        description="Aborts the running generation with its tool calls and subagents.",
        responses=_responses((202, "stopping", Stopped), 404, 422, 503),
    )
    async def stop_session(session_id: SessionId) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            stopped = await stop(existing(session_id), session_id)
        return json_response(202, Stopped(stopped=stopped))

    @app.post(
        "/sessions/<session_id>/tasks/<task_id>/cancel",
        summary="Cancel a task",
        description="Aborts one live task and the work it owns.",
        responses=_responses((202, "cancelling", Cancelled), 404, 422, 503),
    )
    async def cancel(session_id: SessionId, task_id: TaskId) -> Response[Any]:
        current = existing(session_id)
        with obs.correlated(session_id=session_id, task_id=task_id):
            if current.store.get_task(session_id, task_id) is None:
                raise SessionNotFound(f"no task {task_id!r} in session {session_id!r}")
            cancelled = await cancel_task(current, session_id, task_id)
        return json_response(202, Cancelled(cancelled=cancelled))

    @app.get(
        "/sessions/<session_id>/workflow",
        summary="Read open questions, sign-ins and background tasks",
        description="What a UI shows beside the transcript for workflow tools.",
        responses=_responses((200, "the workflow view", WorkflowView), 404, 422, 503),
    )
    async def workflow(session_id: SessionId) -> Response[Any]:
        found = await workflow_service.view(existing(session_id), session_id)
        return json_response(200, WorkflowView.model_validate(found))

    AskId = Annotated[str, Path(min_length=1, max_length=_MAX_NAME, description="an ask id")]

    @app.post(
        "/sessions/<session_id>/asks/<ask_id>/answer",
        summary="Answer a workflow's question",
        description="Answered once: a later answer gets duplicate. An answer never steers "
        "the conversation.",
        responses=_responses((200, "what became of the answer", Delivery), 404, 422, 503),
    )
    async def answer_ask(session_id: SessionId, ask_id: AskId, body: AnswerAsk) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await workflow_service.answer(
                existing(session_id), session_id, ask_id, body.option_id, body.text
            )
        return json_response(200, Delivery(result=str(result)))

    @app.post(
        "/sessions/<session_id>/authorizations/<request_id>/complete",
        summary="Complete a sign-in",
        description="The provider callback: the interrupted step is retried with the token.",
        responses=_responses((200, "what became of the callback", Delivery), 404, 422, 503),
    )
    async def complete(
        session_id: SessionId, request_id: AskId, body: CompleteAuthorization
    ) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await workflow_service.complete_authorization(
                existing(session_id), session_id, request_id, body.token
            )
        return json_response(200, Delivery(result=str(result)))

    @app.post(
        "/sessions/<session_id>/end",
        summary="End the session's background work",
        description="Cancels every working background task of the session.",
        responses=_responses((202, "ending", Ended), 404, 422, 503),
    )
    async def end(session_id: SessionId) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            cancelled = await workflow_service.end_session(existing(session_id), session_id)
        return json_response(202, Ended(cancelled=cancelled))

    def not_found(exc: SessionNotFound) -> Response[Any]:
        return json_response(404, ErrorBody(error=str(exc)))

    def no_route(exc: NotFoundError) -> Response[Any]:
        return json_response(404, ErrorBody(error="no such route"))

    def invalid(exc: RequestValidationError) -> Response[Any]:
        # Powertools' own answer names the field but not why; say both (never the input).
        detail = [
            FieldError(loc=list(e["loc"]), msg=str(e.get("msg", "")), type=str(e["type"]))
            for e in exc.errors()
        ]
        return json_response(422, ValidationErrorBody(detail=detail))

    def busy(exc: Exception) -> Response[Any]:
        obs.logger.warning("sessions API: the store is busy", extra={"error": str(exc)})
        return Response(
            503,
            "application/json",
            ErrorBody(error=f"the session store is busy; try again ({exc})").model_dump_json(),
            headers={"Retry-After": "1"},
        )

    # Registered by call, not as decorators: Powertools' decorator is untyped.
    app.exception_handler(SessionNotFound)(not_found)
    app.exception_handler(NotFoundError)(no_route)
    app.exception_handler(RequestValidationError)(invalid)
    app.exception_handler([StoreUnavailable, ConflictError])(busy)
    return app


def _resolver_for(deps: Deps) -> "APIGatewayHttpResolver":
    # Built once per Deps (route registration and model compilation are not free), and
    # forgotten with it.
    key = id(deps)
    cached = _resolvers.get(key)
    if cached is not None and cached[0]() is deps:
        return cached[1]
    resolver = api_resolver(deps)
    _resolvers[key] = (weakref.ref(deps), resolver)
    weakref.finalize(deps, _resolvers.pop, key, None)
    return resolver


@asynccontextmanager
async def _one_request_at_a_time() -> AsyncIterator[None]:
    # Powertools keeps the current event on the router class, shared by every resolver: two
    # requests interleaving on one event loop (the local server) must not overlap.
    loop = asyncio.get_running_loop()
    lock = _loop_locks.get(loop)
    if lock is None:
        lock = _loop_locks[loop] = asyncio.Lock()
    async with lock:
        yield


async def handle_api(deps: Deps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer an API Gateway v2 event of one of :data:`API_ROUTES` (see
    :func:`api_resolver`): 404 for an unknown session, 422 naming each invalid field and
    why, 503 when the store is busy; 400 for a body that is not UTF-8 text."""
    resolver = _resolver_for(deps)
    try:
        unreadable = _unreadable_body(event)
        if unreadable is not None:
            return _json_response(400, {"error": unreadable})
        async with _one_request_at_a_time():
            response = await resolver.resolve_async(event, context)
        response["statusCode"] = int(response["statusCode"])
        return response
    except Exception:
        obs.logger.exception("sessions API request failed")
        return _json_response(500, {"error": "internal error"})
    finally:
        obs.flush()


def _unreadable_body(event: dict[str, Any]) -> str | None:
    """Why a request body cannot be read as text, or None. (Powertools decodes every body as
    UTF-8 and would fail with a 500 on one that is not.)"""
    try:
        _body(event).decode("utf-8")
    except WebhookRejected as exc:
        return exc.message
    except UnicodeDecodeError as exc:
        return f"body is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
    return None


def openapi_json() -> str:
    """The sessions API's OpenAPI document (what ``docs/openapi.json`` holds)."""
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

    return api_resolver().get_openapi_json_schema(
        title=API_TITLE,
        version=API_VERSION,
        description="Create Bide agent sessions, submit input, read a session's task graph, "
        "stop a run and cancel a task. Every route is IAM-authorised (SigV4). Signals and "
        "capability webhooks are served by the signal function, not this API.",
        security_schemes={
            "sigv4": APIKey(
                name="Authorization",
                in_=APIKeyIn.header,
                description="AWS Signature Version 4 (IAM authorisation at API Gateway)",
            )
        },
        security=[{"sigv4": []}],
    )
