"""The one HTTP router, and the entry points the Lambda functions and the local dev server call.

Every HTTP route is served by a Powertools ``APIGatewayHttpResolver``, registered in groups:

* the sessions API (:mod:`bide.service.routes_api`), served by :func:`handle_api`; its
  OpenAPI document is :func:`openapi_json`;
* signals and capability webhooks (:mod:`bide.service.routes_signal`), served by
  :func:`handle_signal`.

Each function's resolver holds its own group only, so neither answers the other's routes;
both are built by :func:`resolver` and served by one loop (:func:`_serve`): the same route
matching and validation, the same 404 for an unknown route, the same lock keeping two
requests on one event loop apart. :func:`handle_worker` (SQS batches of session wakes)
lives in :mod:`bide.service.worker_batch` and is re-exported here, as is :func:`run`.
Routes and the worker are imported on first use, so each function loads its own path only.

The entry points are ``async``; synchronous callers (a Lambda handler) use :func:`run`. None
answers bad input with a 5xx: a 5xx means the service failed (503: try again).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import re
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..engine.values import FrozenValue, value_class
from . import observability as obs
from .deps import Deps
from .transport import hostile_json, json_response, json_text, run, unreadable_body

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

    from .routes_api import API_ROUTES
    from .routes_signal import SIGNAL_ROUTES
    from .worker_batch import handle_worker

__all__ = [
    "API",
    "API_ROUTES",
    "API_TITLE",
    "API_VERSION",
    "SIGNAL",
    "SIGNAL_ROUTES",
    "RouteGroup",
    "api_resolver",
    "handle_api",
    "handle_signal",
    "handle_worker",
    "openapi_json",
    "resolver",
    "run",
]

API_TITLE = "Bide sessions API"
API_VERSION = "0.1.0"


_set = object.__setattr__  # a frozen value's fields, at build


@value_class
class RouteGroup(FrozenValue):
    """The routes one function serves, and how its entry point answers what the routes
    cannot: a crash (500 with ``failure_error``) and, when ``text_bodies_only``, a body that
    is not UTF-8 text (400, before routing). With ``lenient_paths`` a path parameter takes
    any character but ``/``, and slashes around the path are ignored (see
    :func:`_segments_pattern`)."""

    __slots__ = (
        "failure_error",
        "failure_log",
        "lenient_paths",
        "name",
        "register",
        "text_bodies_only",
    )
    name: str
    register: Callable[[APIGatewayHttpResolver, Deps | None], None]
    failure_log: str
    failure_error: str
    text_bodies_only: bool
    lenient_paths: bool

    def __init__(
        self,
        name: str,
        register: Callable[[APIGatewayHttpResolver, Deps | None], None],
        failure_log: str,
        failure_error: str,
        text_bodies_only: bool,
        lenient_paths: bool = False,
    ) -> None:
        _set(self, "name", name)
        _set(self, "register", register)
        _set(self, "failure_log", failure_log)
        _set(self, "failure_error", failure_error)
        _set(self, "text_bodies_only", text_bodies_only)
        _set(self, "lenient_paths", lenient_paths)


# Each group's routes are imported when its resolver is built: a function imports only the
# routes it serves (the signal function never loads the sessions API's models).
def _register_api(app: APIGatewayHttpResolver, deps: Deps | None) -> None:
    from .routes_api import register

    register(app, deps)


def _register_signal(app: APIGatewayHttpResolver, deps: Deps | None) -> None:
    from .routes_signal import register

    register(app, deps)


#: Names re-exported from the modules that define them, imported on first use (PEP 562).
_LAZY = {
    "API_ROUTES": "routes_api",
    "SIGNAL_ROUTES": "routes_signal",
    "handle_worker": "worker_batch",
}


if not TYPE_CHECKING:  # mypy checks names against the imports above

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)


#: The sessions API. Powertools decodes the JSON bodies its routes take as UTF-8.
API = RouteGroup(
    name="api",
    register=_register_api,
    failure_log="sessions API request failed",
    failure_error="internal error",
    text_bodies_only=True,
)
#: Signals and webhooks: bodies are bytes (a webhook's signature covers them as sent).
SIGNAL = RouteGroup(
    name="signal",
    register=_register_signal,
    failure_log="signal delivery failed",
    failure_error="internal error; the signal may not be stored",
    text_bodies_only=False,
    lenient_paths=True,
)


def resolver(group: RouteGroup, deps: Deps | None = None) -> APIGatewayHttpResolver:
    """A resolver serving ``group``'s routes with ``deps``. ``deps=None`` builds one for its
    OpenAPI document only (its routes then refuse to run). The entry points build one per
    :class:`Deps` and group, and keep it."""
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
    from aws_lambda_powertools.event_handler.exceptions import NotFoundError

    kind = _lenient_resolver() if group.lenient_paths else APIGatewayHttpResolver
    app = kind(enable_validation=True)
    group.register(app, deps)
    # Registered by call, not as a decorator: Powertools' decorator is untyped.
    app.exception_handler(NotFoundError)(_no_route)
    return app


@functools.cache
def _lenient_resolver() -> type[APIGatewayHttpResolver]:
    """A resolver class matching paths as :func:`_segments_pattern` says."""
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    class LenientPathResolver(APIGatewayHttpResolver):
        # Powertools' REST resolver overrides this hook the same way (for trailing slashes).
        @staticmethod
        def _compile_regex(rule: str, base_regex: str = "^{}$") -> re.Pattern[str]:
            return _segments_pattern(rule)

    return LenientPathResolver


def _segments_pattern(rule: str) -> re.Pattern[str]:
    """What a lenient route's rule matches: the path split at ``/`` once slashes around it
    are stripped, a parameter taking any segment (empty but for the last: the route refuses
    an empty name with its own reason). API Gateway's HTTP API hands the path over
    percent-decoded, so a signal key such as ``k€y`` arrives as itself; Powertools' own
    parameter pattern (word characters and some punctuation) would answer it 404."""
    body = rule.strip("/")

    def parameter(found: re.Match[str]) -> str:
        return f"(?P<{found[1]}>[^/]{'+' if found.end() == len(body) else '*'})"

    return re.compile("^/*" + re.sub(r"<(\w+)>", parameter, body) + "/*$")


def _no_route(exc: Exception) -> Response[Any]:
    from aws_lambda_powertools.event_handler import Response

    return Response(404, "application/json", json_text({"error": "no such route"}))


def api_resolver(deps: Deps | None = None) -> APIGatewayHttpResolver:
    """The sessions API's resolver (see :func:`resolver`)."""
    return resolver(API, deps)


_resolvers: dict[tuple[int, str], tuple[weakref.ref[Deps], APIGatewayHttpResolver]] = {}
_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _resolver_for(deps: Deps, group: RouteGroup = API) -> APIGatewayHttpResolver:
    # Built once per Deps and group (route registration and model compilation are not
    # free), and forgotten with the Deps.
    key = (id(deps), group.name)
    cached = _resolvers.get(key)
    if cached is not None and cached[0]() is deps:
        return cached[1]
    built = resolver(group, deps)
    _resolvers[key] = (weakref.ref(deps), built)
    weakref.finalize(deps, _resolvers.pop, key, None)
    return built


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


async def _serve(
    group: RouteGroup, deps: Deps, event: dict[str, Any], context: Any
) -> dict[str, Any]:
    try:
        app = _resolver_for(deps, group)
        if group.text_bodies_only:
            unreadable = unreadable_body(event) or hostile_json(event)
            if unreadable is not None:
                return json_response(400, {"error": unreadable})
        async with _one_request_at_a_time():
            response = await app.resolve_async(event, context)
        response["statusCode"] = int(response["statusCode"])
        return response
    except Exception:
        obs.logger.exception(group.failure_log)
        obs.count(obs.HANDLER_FAILURES, function=group.name)
        return json_response(500, {"error": group.failure_error})
    finally:
        obs.flush()


async def handle_api(deps: Deps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer an API Gateway v2 event of one of :data:`API_ROUTES`
    (:mod:`bide.service.routes_api`): 404 for an unknown session or route, 422 naming each
    invalid field and why, 503 when the store is busy; 400 for a body that is not UTF-8
    text."""
    # A long poll of the events route waits between answers, outside the route lock. Imported
    # here: the API's routes load it anyway, the other functions never need it.
    from .host import long_poll

    return await long_poll(deps, event, lambda e: _serve(API, deps, e, context))


async def handle_signal(deps: Deps, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Deliver a signal from an API Gateway v2 event of one of :data:`SIGNAL_ROUTES`
    (:mod:`bide.service.routes_signal`). The answer is ``{"result": ..., "errors": [...]}``
    with the result's status (202 delivered, 200 duplicate, 422 invalid, 410 closed,
    404 not_found); a refused request gets ``{"error": why}`` and its 4xx (404 for an unknown
    route, 405 for the wrong method), and nothing is stored."""
    return await _serve(SIGNAL, deps, event, context)


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
