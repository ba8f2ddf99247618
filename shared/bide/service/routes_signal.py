"""The signal route group: signals delivered by task id and capability webhooks.

* ``POST /hooks/{token}``: a capability webhook (signature, size, type and JSON checked by
  :func:`~bide.service.signals.deliver_webhook`);
* ``POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}``: a JSON body
  delivered by task id (the route is IAM-authorised in the stack; like the sessions API it
  lets in the session's owner and administrators only: :mod:`bide.service.owners`);
* both with ``/failure`` appended: the body is a failure ``{"type", "message", "data"?}``
  instead of a value (a ``{"$failure": {...}}`` body on the plain routes is one too:
  :mod:`bide.service.failure_body`);
* the same two paths ending in ``/heartbeat``: a beat on the key (:mod:`bide.service.beats`:
  one conditional write, no wake; the body is ignored, but signed like a value's).

:func:`register` adds them to a resolver built by :mod:`bide.service.http`, which serves
them from the signal function (:func:`~bide.service.http.handle_signal`). They are not in the
sessions API's OpenAPI document.
"""

# No ``from __future__ import annotations`` here: Powertools reads the route functions'
# annotations at runtime, and they name types imported inside register().

import re
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine.errors import ConflictError, DefinitionError, StoreUnavailable
from ..engine.rules import SignalDecision
from . import observability as obs
from .beats import beat, beat_webhook
from .deps import Deps
from .failure_body import delivery_of
from .owners import NoPrincipal, NotAllowed, caller_of, task_at_head_for
from .paths import MAX_NAME, SESSION_ID_PATTERN
from .signals import STATUS_OF, deliver, deliver_webhook, parse_json_body
from .transport import BUSY_ERROR, RETRY_AFTER, json_text, request_body, require
from .webhooks import WebhookRejected, parse_token

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

#: The routes of this group (API Gateway route keys), by the name their metrics carry.
SIGNAL_ROUTES: dict[str, str] = {
    "hook": "POST /hooks/{token}",
    "signal": "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}",
    # The failure forms of both (bide.service.failure_body): the body is a failure.
    "hook_failure": "POST /hooks/{token}/failure",
    "signal_failure": "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/failure",
}
# Heartbeats (issue 13): a beat on the key a hook or a signal path names.
SIGNAL_ROUTES["hook_beat"] = SIGNAL_ROUTES["hook"] + "/heartbeat"
SIGNAL_ROUTES["signal_beat"] = SIGNAL_ROUTES["signal"] + "/heartbeat"

# Every method API Gateway knows. A signal path asked for with another method than its own
# is answered 405 saying which, not 404 as if the path did not exist.
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _rule(route_key: str) -> str:
    """The Powertools rule of an API Gateway route key (``POST /hooks/{token}`` ->
    ``/hooks/<token>``)."""
    return re.sub(r"\{(\w+)\}", r"<\1>", route_key.split(" ", 1)[1])


def _decoded(value: str) -> str:
    # Parameters come as they appear in the raw path: percent-encoded from the local server,
    # already decoded by API Gateway (and decoded again, as these routes always were).
    return urllib.parse.unquote(value)


def _check_path(session_id: str, names: dict[str, str]) -> None:
    if not re.fullmatch(SESSION_ID_PATTERN, session_id):
        raise WebhookRejected(404, f"no session {session_id[:MAX_NAME]!r}")
    for name, value in names.items():
        if not 0 < len(value) <= MAX_NAME:
            raise WebhookRejected(400, f"{name} must be 1 to {MAX_NAME} characters")


def register(app: "APIGatewayHttpResolver", deps: Deps | None) -> None:
    """Add the signal routes to ``app``. Each answers ``{"result": ..., "errors": [...]}``
    with the result's status (202 delivered, 200 duplicate, 422 invalid, 410 closed,
    404 not_found); a refused request gets ``{"error": why}`` and its 4xx (405 for another
    method than the route's), a busy store a 503; nothing is stored for either."""
    from aws_lambda_powertools.event_handler import Response

    def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
        return Response(status, "application/json", json_text(body), headers=headers)

    def request() -> tuple[bytes, dict[str, str]]:
        # The raw event, not Powertools' view of it: a webhook's signature covers the bytes
        # sent, which need not be UTF-8.
        event = app.current_event.raw_event
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        return request_body(event), headers

    def delivered(
        route: str, decision: SignalDecision, session_id: str, task_id: str
    ) -> Response[Any]:
        result = decision.result.value
        with obs.correlated(session_id=session_id, task_id=task_id):
            obs.logger.info("signal", extra={"route": route, "result": result})
        obs.count(obs.SIGNAL_RESULTS, result=result, route=route)
        return answer(
            STATUS_OF[decision.result], {"result": result, "errors": list(decision.errors)}
        )

    def webhook(route: str, token: str) -> Response[Any]:
        current, token = require(deps), _decoded(token)
        body, headers = request()
        # A token names its session: one no session can have is refused before any read.
        if not re.fullmatch(SESSION_ID_PATTERN, parse_token(token)[0]):
            raise WebhookRejected(404, "unknown webhook")
        failure = route == "hook_failure"
        decision, binding = deliver_webhook(current, token, headers, body, failure=failure)
        return delivered(route, decision, binding.session_id, binding.task_id)

    @app.post(_rule(SIGNAL_ROUTES["hook"]), include_in_schema=False)
    def hook(token: str) -> Response[Any]:
        return webhook("hook", token)

    @app.post(_rule(SIGNAL_ROUTES["hook_failure"]), include_in_schema=False)
    def hook_failure(token: str) -> Response[Any]:
        return webhook("hook_failure", token)

    @app.post(_rule(SIGNAL_ROUTES["signal"]), include_in_schema=False)
    def by_task_id(session_id: str, task_id: str, signal: str, key: str) -> Response[Any]:
        return signal_route("signal", session_id, task_id, signal, key)

    @app.post(_rule(SIGNAL_ROUTES["signal_failure"]), include_in_schema=False)
    def failure_by_task_id(session_id: str, task_id: str, signal: str, key: str) -> Response[Any]:
        return signal_route("signal_failure", session_id, task_id, signal, key)

    def signal_route(
        route: str, session_id: str, task_id: str, signal: str, key: str
    ) -> Response[Any]:
        """Every route by task id; ``route`` says what its body is: a value (``signal``), a
        failure (``signal_failure``) or nothing to read (``signal_beat``: a beat)."""
        current = require(deps)
        session_id, task_id = _decoded(session_id), _decoded(task_id)
        signal, key = _decoded(signal), _decoded(key)
        # A value's body is read as sent before any check; a beat's is ignored, never read.
        sent = request() if route != "signal_beat" else None
        _check_path(session_id, {"task_id": task_id, "signal": signal, "key": key})
        # IAM-authorised like the sessions API: the session's owner and administrators only,
        # checked on the one read that also gives the head and the task to deliver with.
        try:
            caller = caller_of(app.current_event.raw_event, current.admin_principals)
            at_head = task_at_head_for(current.store, session_id, task_id, caller)
        except (NotAllowed, NoPrincipal) as exc:
            raise WebhookRejected(403, str(exc)) from None
        value: Any = None
        if sent is not None:
            body, headers = sent
            parsed = parse_json_body(body, headers.get("content-type"))
            value = delivery_of(parsed, failure_route=route == "signal_failure")
        # Only the app's answer about the caller's signal name is the caller's to read: a
        # DefinitionError from anywhere else (the store, the engine) is a 500 with fixed text.
        try:
            current.app.signal_token(signal)
        except DefinitionError as exc:
            raise WebhookRejected(404, str(exc)) from None
        if sent is None:
            decision = beat(current, session_id, task_id, signal, key, at_head=at_head)
        else:
            decision = deliver(current, session_id, task_id, signal, key, value, at_head=at_head)
        return delivered(route, decision, session_id, task_id)

    # --- heartbeats: the same checks as a value's request, then a beat (no body parsed) ---

    @app.post(_rule(SIGNAL_ROUTES["hook_beat"]), include_in_schema=False)
    def hook_beat(token: str) -> Response[Any]:
        current, token = require(deps), _decoded(token)
        body, headers = request()
        if not re.fullmatch(SESSION_ID_PATTERN, parse_token(token)[0]):
            raise WebhookRejected(404, "unknown webhook")
        decision, binding = beat_webhook(current, token, headers, body)
        return delivered("hook_beat", decision, binding.session_id, binding.task_id)

    @app.post(_rule(SIGNAL_ROUTES["signal_beat"]), include_in_schema=False)
    def by_task_id_beat(session_id: str, task_id: str, signal: str, key: str) -> Response[Any]:
        return signal_route("signal_beat", session_id, task_id, signal, key)

    def wrong_method(method: str, template: str) -> Callable[[], Response[Any]]:
        # Declares no parameters: Powertools would take a defaulted one for a query parameter.
        def refuse() -> Response[Any]:
            raise WebhookRejected(405, f"use {method} for {template}")

        return refuse

    for route_key in SIGNAL_ROUTES.values():
        method, template = route_key.split(" ", 1)
        others = [m for m in _METHODS if m != method]
        app.route(_rule(route_key), method=others, include_in_schema=False)(
            wrong_method(method, template)
        )

    def refused(exc: WebhookRejected) -> Response[Any]:
        return answer(exc.status, {"error": exc.message})

    def busy(exc: Exception) -> Response[Any]:
        obs.logger.warning("signal not delivered: the store is busy", extra={"error": str(exc)})
        return answer(503, {"error": BUSY_ERROR}, dict(RETRY_AFTER))

    # Registered by call, not as decorators: Powertools' decorator is untyped.
    app.exception_handler(WebhookRejected)(refused)
    app.exception_handler([StoreUnavailable, ConflictError])(busy)
