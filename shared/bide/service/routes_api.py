"""The sessions API route group: ``/sessions`` routes (create, list, submit, read by page,
stop, cancel, the live webhook URLs and the workflow routes: questions, sign-ins, approvals),
validated by Powertools against the models of :mod:`bide.service.api_models`; their OpenAPI
document is ``docs/openapi.json``.

Every route is IAM-authorised: the caller is the event's IAM principal, and a session is open
to its owner and the deployment's administrators only (:mod:`bide.service.owners`; 403
otherwise). Lists are served by page with opaque cursors (:mod:`bide.service.pages`; 400 for
a cursor this API did not issue for that list).

:func:`register` adds them to a resolver built by :mod:`bide.service.http`, which serves
them from the API function (:func:`~bide.service.http.handle_api`).
"""

# No ``from __future__ import annotations`` here: Powertools reads the route functions'
# annotations at runtime, and they name types imported inside register().

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel

from ..agent.conversation import Submission
from ..engine.errors import ConflictError, StoreUnavailable
from ..engine.failures import SignalFailure
from ..engine.limits import ValueRefused
from . import observability as obs
from . import routes_host
from . import workflow as workflow_service
from .api_models import (
    MAX_NAME,
    SESSION_ID_PATTERN,
    AnswerAsk,
    ApprovalDecided,
    Cancelled,
    CompleteAuthorization,
    CreateSession,
    DecideApproval,
    Delivery,
    Ended,
    ErrorBody,
    FieldError,
    HooksPage,
    SessionCreated,
    SessionsPage,
    SessionView,
    Stopped,
    SubmissionsPage,
    SubmitInput,
    TasksPage,
    TranscriptPage,
    ValidationErrorBody,
    WorkflowPage,
    WorkflowView,
)
from .deps import Deps
from .owners import Caller, NoPrincipal, NotAllowed, caller_of, check_access, list_owned
from .pages import (
    DEFAULT_PAGE_LIMIT,
    MAX_CURSOR_CHARS,
    MAX_PAGE_LIMIT,
    BadCursor,
    build_page,
    decode_cursor,
)
from .routes_host import HOST_ROUTES
from .sessions import (
    SessionNotFound,
    cancel_task,
    create_session,
    hooks_page,
    stop,
    submissions_page,
    submit,
    tasks_page,
    transcript_page,
    view,
)
from .transport import BUSY_ERROR, RETRY_AFTER, require

#: The names ``GET /sessions/{session_id}/workflow/{name}`` takes.
WORKFLOW_LIST_PATTERN = "^(" + "|".join(workflow_service.WORKFLOW_LISTS) + ")$"

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

#: The routes of this group (API Gateway route keys), each in the OpenAPI document.
API_ROUTES: tuple[str, ...] = (
    "POST /sessions",
    "GET /sessions",
    "GET /sessions/{session_id}",
    "GET /sessions/{session_id}/transcript",
    "GET /sessions/{session_id}/tasks",
    "GET /sessions/{session_id}/submissions",
    "GET /sessions/{session_id}/hooks",
    "POST /sessions/{session_id}/inputs",
    "POST /sessions/{session_id}/stop",
    "POST /sessions/{session_id}/tasks/{task_id}/cancel",
    "GET /sessions/{session_id}/workflow",
    "GET /sessions/{session_id}/workflow/{name}",
    "POST /sessions/{session_id}/asks/{ask_id}/answer",
    "POST /sessions/{session_id}/authorizations/{request_id}/complete",
    "POST /sessions/{session_id}/approvals/{approval_id}/decide",
    "POST /sessions/{session_id}/end",
    *HOST_ROUTES,
)


def _responses(ok: tuple[int, str, type[BaseModel]], *errors: int) -> dict[int, "OpenAPIResponse"]:
    """OpenAPI entries for a route's answer and the error answers it may give."""
    from aws_lambda_powertools.event_handler.openapi.types import (
        OpenAPIResponse,
        OpenAPIResponseContentModel,
    )

    described = {
        400: ("a cursor this API did not issue for this list", ErrorBody),
        403: ("the session belongs to another principal", ErrorBody),
        404: ("no such session (or task)", ErrorBody),
        409: ("the reply does not match the invocation (the rule it breaks)", ErrorBody),
        413: ("a value over the store's limits", ErrorBody),
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


def register(app: "APIGatewayHttpResolver", deps: Deps | None) -> None:
    """Add the sessions API's routes to ``app``, with the answers it gives for an unknown
    session (404), invalid input (422, each field and why) and a busy store (503). With
    ``deps=None`` the routes are there for the OpenAPI document and refuse to run."""
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
    from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

    SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="a session id")]
    TaskId = Annotated[str, Path(min_length=1, max_length=MAX_NAME, description="a task id")]
    AskId = Annotated[str, Path(min_length=1, max_length=MAX_NAME, description="an ask id")]
    Cursor = Annotated[
        str | None,
        Query(
            max_length=MAX_CURSOR_CHARS,
            description="the `next` of the previous page (opaque); omit to start",
        ),
    ]
    Limit = Annotated[
        int,
        Query(
            ge=1,
            le=MAX_PAGE_LIMIT,
            description=f"items per page (default {DEFAULT_PAGE_LIMIT}, at most "
            f"{MAX_PAGE_LIMIT}; a page also stops at 1 MiB of items)",
        ),
    ]

    def caller() -> Caller:
        current = require(deps)
        return caller_of(app.current_event.raw_event, current.admin_principals)

    def existing(session_id: str) -> Deps:
        # Commands wake the session before they write: refuse an unknown session (and
        # another principal's) before that, so a 404 or 403 queues no worker run.
        current = require(deps)
        who = caller()
        if current.store.head(session_id) == 0:
            raise SessionNotFound(f"no session {session_id!r}")
        check_access(current.store, session_id, who)
        return current

    def model_response(status: int, model: BaseModel) -> Response[Any]:
        return Response(status, "application/json", model.model_dump_json())

    @app.post(
        "/sessions",
        summary="Create a session",
        description="Creates a session with its main conversation; idempotent by id.",
        responses=_responses((201, "created", SessionCreated), 403, 422, 503),
    )
    async def create(body: Annotated[CreateSession | None, Body()] = None) -> Response[Any]:
        current = require(deps)
        session_id = await create_session(current, body.session_id if body else None, caller())
        return model_response(201, SessionCreated(session_id=session_id))

    @app.get(
        "/sessions",
        summary="List the caller's sessions",
        description="The sessions the calling principal created, newest first, by page.",
        responses=_responses((200, "a page of sessions", SessionsPage), 400, 403, 422, 503),
    )
    async def list_sessions(
        cursor: Cursor = None, limit: Limit = DEFAULT_PAGE_LIMIT
    ) -> Response[Any]:
        current, who = require(deps), caller()
        after = decode_cursor(cursor, session=who.principal, kind="sessions")
        if after is not None and not isinstance(after, str):
            raise BadCursor("cursor", "not a position in the sessions list")
        docs = list_owned(current.store, who.principal, start_after=after, limit=limit + 1)
        page = build_page(
            ((d.key, d.body) for d in docs),
            limit=limit,
            session=who.principal,
            kind="sessions",
            start=after,
        )
        return model_response(200, SessionsPage.model_validate(page.as_dict()))

    @app.post(
        "/sessions/<session_id>/inputs",
        summary="Submit input",
        description="Submits user input to the session's main conversation and wakes the "
        "session. Idempotent by request_id: a repeat returns the first submission.",
        responses=_responses((202, "accepted", Submission), 403, 404, 422, 503),
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
        return model_response(202, submission)

    @app.get(
        "/sessions/<session_id>",
        summary="Read a session",
        description="A bounded summary: whether a run is going, the session's wake, the live "
        "webhooks and the first page of its live tasks (status, until, keys, policy, tool "
        "calls), transcript and submissions, each with the cursor that continues it.",
        responses=_responses((200, "the session", SessionView), 403, 404, 422, 503),
    )
    async def read(session_id: SessionId) -> Response[Any]:
        found = await view(existing(session_id), session_id)
        return model_response(200, SessionView.model_validate(found))

    @app.get(
        "/sessions/<session_id>/transcript",
        summary="Read the transcript by page",
        description="Transcript entries, oldest first: after `cursor`, or from entry number "
        "`from_entry` (1-based; the summary's entries_total tells the last), or from the start.",
        responses=_responses((200, "a page of entries", TranscriptPage), 400, 403, 404, 422, 503),
    )
    async def transcript(
        session_id: SessionId,
        cursor: Cursor = None,
        limit: Limit = DEFAULT_PAGE_LIMIT,
        from_entry: Annotated[
            int | None, Query(ge=1, description="the first entry's number; not with cursor")
        ] = None,
    ) -> Response[Any]:
        if cursor and from_entry is not None:
            raise BadCursor("from_entry", "give cursor or from_entry, not both")
        page = await transcript_page(
            existing(session_id), session_id, cursor=cursor, limit=limit, from_entry=from_entry
        )
        body = {"session_id": session_id, **page.as_dict()}
        return model_response(200, TranscriptPage.model_validate(body))

    @app.get(
        "/sessions/<session_id>/tasks",
        summary="Read the live tasks by page",
        description="Live tasks in creation order (oldest first).",
        responses=_responses((200, "a page of live tasks", TasksPage), 400, 403, 404, 422, 503),
    )
    async def tasks(
        session_id: SessionId, cursor: Cursor = None, limit: Limit = DEFAULT_PAGE_LIMIT
    ) -> Response[Any]:
        page = await tasks_page(existing(session_id), session_id, cursor=cursor, limit=limit)
        body = {"session_id": session_id, **page.as_dict()}
        return model_response(200, TasksPage.model_validate(body))

    @app.get(
        "/sessions/<session_id>/submissions",
        summary="Read the submissions by page",
        description="The main conversation's submissions with their status, by request id.",
        responses=_responses(
            (200, "a page of submissions", SubmissionsPage), 400, 403, 404, 422, 503
        ),
    )
    async def submissions(
        session_id: SessionId, cursor: Cursor = None, limit: Limit = DEFAULT_PAGE_LIMIT
    ) -> Response[Any]:
        page = await submissions_page(existing(session_id), session_id, cursor=cursor, limit=limit)
        body = {"session_id": session_id, **page.as_dict()}
        return model_response(200, SubmissionsPage.model_validate(body))

    @app.get(
        "/sessions/<session_id>/hooks",
        summary="List the session's webhook URLs",
        description="The capability webhook URLs live tasks listen on, by page in task "
        "creation order, with the task, the signal and key each delivers to, whether requests "
        "must be signed and how many arrived.",
        responses=_responses((200, "a page of live webhooks", HooksPage), 400, 403, 404, 422, 503),
    )
    async def list_hooks(
        session_id: SessionId, cursor: Cursor = None, limit: Limit = DEFAULT_PAGE_LIMIT
    ) -> Response[Any]:
        page = await hooks_page(existing(session_id), session_id, cursor=cursor, limit=limit)
        body = {"session_id": session_id, **page.as_dict()}
        return model_response(200, HooksPage.model_validate(body))

    @app.post(
        "/sessions/<session_id>/stop",
        summary="Stop the running generation",
        description="Aborts the running generation with its tool calls and subagents.",
        responses=_responses((202, "stopping", Stopped), 403, 404, 422, 503),
    )
    async def stop_session(session_id: SessionId) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            stopped = await stop(existing(session_id), session_id)
        return model_response(202, Stopped(stopped=stopped))

    @app.post(
        "/sessions/<session_id>/tasks/<task_id>/cancel",
        summary="Cancel a task",
        description="Aborts one live task and the work it owns.",
        responses=_responses((202, "cancelling", Cancelled), 403, 404, 422, 503),
    )
    async def cancel(session_id: SessionId, task_id: TaskId) -> Response[Any]:
        current = existing(session_id)
        with obs.correlated(session_id=session_id, task_id=task_id):
            if current.store.get_task(session_id, task_id) is None:
                raise SessionNotFound(f"no task {task_id!r} in session {session_id!r}")
            cancelled = await cancel_task(current, session_id, task_id)
        return model_response(202, Cancelled(cancelled=cancelled))

    @app.get(
        "/sessions/<session_id>/workflow",
        summary="Read open questions, sign-ins and background tasks",
        description="What a UI shows beside the transcript for workflow tools: the first "
        "page of each list, each with the cursor that continues it on .../workflow/{name}.",
        responses=_responses((200, "the workflow view", WorkflowView), 403, 404, 422, 503),
    )
    async def workflow(session_id: SessionId) -> Response[Any]:
        found = await workflow_service.view(existing(session_id), session_id)
        return model_response(200, WorkflowView.model_validate(found))

    @app.get(
        "/sessions/<session_id>/workflow/<name>",
        summary="Read one list of the workflow view by page",
        description="Open questions (asks), sign-ins (authorizations), background tasks "
        "(tasks), pending approvals (approvals) or non-determinism failures (nondeterminism), "
        "oldest first, after `cursor`.",
        responses=_responses((200, "a page of the list", WorkflowPage), 400, 403, 404, 422, 503),
    )
    async def workflow_list(
        session_id: SessionId,
        name: Annotated[str, Path(pattern=WORKFLOW_LIST_PATTERN, description="which list")],
        cursor: Cursor = None,
        limit: Limit = DEFAULT_PAGE_LIMIT,
    ) -> Response[Any]:
        page = await workflow_service.workflow_page(
            existing(session_id), session_id, name, cursor=cursor, limit=limit
        )
        body = {"session_id": session_id, "name": name, **page.as_dict()}
        return model_response(200, WorkflowPage.model_validate(body))

    @app.post(
        "/sessions/<session_id>/asks/<ask_id>/answer",
        summary="Answer a workflow's question",
        description="Answered once: a later answer gets duplicate. An answer never steers "
        "the conversation.",
        responses=_responses((200, "what became of the answer", Delivery), 403, 404, 422, 503),
    )
    async def answer_ask(session_id: SessionId, ask_id: AskId, body: AnswerAsk) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            failure = None if body.failure is None else SignalFailure(**body.failure.model_dump())
            result = await workflow_service.answer(
                existing(session_id), session_id, ask_id, body.option_id, body.text, failure
            )
        return model_response(200, Delivery(result=str(result)))

    @app.post(
        "/sessions/<session_id>/authorizations/<request_id>/complete",
        summary="Complete a sign-in",
        description="The provider callback: the interrupted step is retried with the token.",
        responses=_responses((200, "what became of the callback", Delivery), 403, 404, 422, 503),
    )
    async def complete(
        session_id: SessionId, request_id: AskId, body: CompleteAuthorization
    ) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await workflow_service.complete_authorization(
                existing(session_id), session_id, request_id, body.token
            )
        return model_response(200, Delivery(result=str(result)))

    @app.post(
        "/sessions/<session_id>/approvals/<approval_id>/decide",
        summary="Decide a pending approval",
        description="Approves or denies the call waiting for this approval; decided once: a "
        "later decision gets already_decided.",
        responses=_responses(
            (200, "what became of the decision", ApprovalDecided), 403, 404, 422, 503
        ),
    )
    async def decide(
        session_id: SessionId, approval_id: AskId, body: DecideApproval
    ) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await workflow_service.decide_approval(
                existing(session_id),
                session_id,
                approval_id,
                body.approved,
                by=body.by,
                note=body.note,
            )
        return model_response(200, ApprovalDecided(result=result.value))

    @app.post(
        "/sessions/<session_id>/end",
        summary="End the session",
        description="Cancels every working background task of the session, and starts its "
        "retention: the deployment deletes an ended session that long after its end (its "
        "session_retention; the session keeps working until then).",
        responses=_responses((202, "ending", Ended), 403, 404, 422, 503),
    )
    async def end(session_id: SessionId) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            cancelled = await workflow_service.end_session(existing(session_id), session_id)
        return model_response(202, Ended(cancelled=cancelled))

    # The host's events and actions (bide.service.routes_host): the same owner check.
    routes_host.register(app, existing, _responses)

    def not_found(exc: SessionNotFound) -> Response[Any]:
        return model_response(404, ErrorBody(error=str(exc)))

    def forbidden(exc: Exception) -> Response[Any]:
        return model_response(403, ErrorBody(error=str(exc)))

    def bad_cursor(exc: BadCursor) -> Response[Any]:
        return model_response(400, ErrorBody(error=str(exc)))

    def refused(exc: ValueRefused) -> Response[Any]:
        # A value the store would not take back (e.g. an answer nested too deep): the
        # request's own fault, and nothing was written.
        return model_response(exc.status, ErrorBody(error=str(exc)))

    def invalid(exc: RequestValidationError) -> Response[Any]:
        # Powertools' own answer names the field but not why; say both (never the input).
        detail = [
            FieldError(loc=list(e["loc"]), msg=str(e.get("msg", "")), type=str(e["type"]))
            for e in exc.errors()
        ]
        return model_response(422, ValidationErrorBody(detail=detail))

    def busy(exc: Exception) -> Response[Any]:
        obs.logger.warning("sessions API: the store is busy", extra={"error": str(exc)})
        body = ErrorBody(error=BUSY_ERROR).model_dump_json()
        return Response(503, "application/json", body, headers=dict(RETRY_AFTER))

    # Registered by call, not as decorators: Powertools' decorator is untyped.
    app.exception_handler(SessionNotFound)(not_found)
    app.exception_handler([NotAllowed, NoPrincipal])(forbidden)
    app.exception_handler(BadCursor)(bad_cursor)
    app.exception_handler(ValueRefused)(refused)
    app.exception_handler(RequestValidationError)(invalid)
    app.exception_handler([StoreUnavailable, ConflictError])(busy)
