"""The sessions API's host routes: a session's event stream and the host actions on its
promises and bound invocations (:mod:`bide.service.host`). Registered by
:func:`bide.service.routes_api.register` on the same resolver, so they share its owner check
(403 for another principal), its 404 for an unknown session and its error answers.
"""

# No ``from __future__ import annotations``: Powertools reads the annotations at runtime.

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel

from ..bindings import ReplyRejected
from . import observability as obs
from .api_models import (
    MAX_NAME,
    SESSION_ID_PATTERN,
    ErrorBody,
    EventsPage,
    PromiseSettledResult,
    RejectPromise,
    ReplyToInvocation,
    ResolvePromise,
)
from .deps import Deps
from .host import MAX_WAIT_SECONDS, events_page, reply, settle_promise
from .pages import DEFAULT_PAGE_LIMIT, MAX_CURSOR_CHARS, MAX_PAGE_LIMIT

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

#: The routes of this group (API Gateway route keys), each in the OpenAPI document.
HOST_ROUTES: tuple[str, ...] = (
    "GET /sessions/{session_id}/events",
    "POST /sessions/{session_id}/promises/{promise_id}/resolve",
    "POST /sessions/{session_id}/promises/{promise_id}/reject",
    "POST /sessions/{session_id}/invocations/{invocation_id}/reply",
)


def register(
    app: "APIGatewayHttpResolver",
    existing: Callable[[str], Deps],
    responses: Callable[..., Any],
) -> None:
    """Add the host routes to ``app``. ``existing(session_id)`` is the sessions API's check
    (the session exists and the caller may use it) and ``responses`` its OpenAPI answers."""
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.event_handler.openapi.params import Path, Query

    SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="a session id")]
    Name = Annotated[str, Path(min_length=1, max_length=MAX_NAME, description="an id")]

    def model_response(status: int, model: BaseModel) -> Response[Any]:
        return Response(status, "application/json", model.model_dump_json())

    @app.get(
        "/sessions/<session_id>/events",
        summary="Read the session's events (long poll)",
        description="Events after `cursor`, oldest first: runs that ended (answer, failed, "
        "stopped), approvals requested, decided or closed, promises settled, workflow "
        "questions opened, answered or closed, progress (coalesced). With `wait` the "
        f"request waits up to that many seconds (at most {MAX_WAIT_SECONDS}) for an event "
        "when there is none yet, and answers as soon as one exists.",
        responses=responses((200, "a page of events", EventsPage), 400, 403, 404, 422, 503),
    )
    async def events(
        session_id: SessionId,
        cursor: Annotated[
            str | None,
            Query(max_length=MAX_CURSOR_CHARS, description="the `next` of the previous page"),
        ] = None,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE_LIMIT, description="events per page (default 100)")
        ] = DEFAULT_PAGE_LIMIT,
        wait: Annotated[
            int,
            Query(
                ge=0,
                le=MAX_WAIT_SECONDS,
                description="seconds to wait for an event when there is none (default 0)",
            ),
        ] = 0,
    ) -> Response[Any]:
        # The wait happens around this route (bide.service.host.long_poll), never inside it.
        page = events_page(existing(session_id), session_id, cursor=cursor, limit=limit)
        body = {"session_id": session_id, **page.as_dict()}
        return model_response(200, EventsPage.model_validate(body))

    @app.post(
        "/sessions/<session_id>/promises/<promise_id>/resolve",
        summary="Resolve a promise",
        description="Ends an open promise with a value; its waiters wake. The first outcome "
        "stands: a later one gets ignored.",
        responses=responses(
            (200, "what became of the value", PromiseSettledResult), 403, 404, 413, 422, 503
        ),
    )
    async def resolve(
        session_id: SessionId, promise_id: Name, body: ResolvePromise
    ) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await settle_promise(
                existing(session_id), session_id, promise_id, "resolved", value=body.value
            )
        return model_response(200, PromiseSettledResult(result=result.value))

    @app.post(
        "/sessions/<session_id>/promises/<promise_id>/reject",
        summary="Reject a promise",
        description="Ends an open promise with an error; its waiters wake. The first outcome "
        "stands: a later one gets ignored.",
        responses=responses(
            (200, "what became of the error", PromiseSettledResult), 403, 404, 422, 503
        ),
    )
    async def reject(session_id: SessionId, promise_id: Name, body: RejectPromise) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await settle_promise(
                existing(session_id),
                session_id,
                promise_id,
                "rejected",
                error=body.error,
                error_type=body.type,
                error_data=body.data,
            )
        return model_response(200, PromiseSettledResult(result=result.value))

    @app.post(
        "/sessions/<session_id>/invocations/<invocation_id>/reply",
        summary="Reply to a bound invocation",
        description="A bound receiver's reply for one completion key: it must name the "
        "invocation's producer and correlation, and a resolved value must match the "
        "binding's reply schema (409 otherwise, naming the rule; nothing is written).",
        responses=responses(
            (200, "what became of the reply", PromiseSettledResult), 403, 404, 409, 413, 422, 503
        ),
    )
    async def reply_route(
        session_id: SessionId, invocation_id: Name, body: ReplyToInvocation
    ) -> Response[Any]:
        with obs.correlated(session_id=session_id):
            result = await reply(
                existing(session_id),
                session_id,
                invocation_id,
                body.key,
                producer=body.producer,
                correlation=body.correlation,
                status=body.status,
                value=body.value,
                error=body.error,
            )
        return model_response(200, PromiseSettledResult(result=result.value))

    def rejected(exc: ReplyRejected) -> Response[Any]:
        return model_response(409, ErrorBody(error=str(exc)))

    app.exception_handler(ReplyRejected)(rejected)
