"""The host's side of a session over HTTP: its event stream, read by page and by long poll,
and the host actions of design 002 that are not questions or approvals (resolve or reject a
promise, deliver a bound receiver's reply).

**Events** (:mod:`bide.engine.events`) are documents ``event/<seq>`` in the session's
partition, each written by the commit that did what it reports. :func:`events_page` reads
them after a cursor (the same opaque cursors as the other pages, kind ``events``), bounded
like every page (:mod:`bide.service.pages`). :func:`long_poll` turns one route answer into a
long poll: while the page is empty it sleeps and asks again until events exist or ``wait``
seconds passed, at most :data:`MAX_WAIT_SECONDS`. That bound sits well under API Gateway's
HTTP API integration timeout (30 s, "Maximum integration timeout":
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html) and the
API function's own timeout (29 s, :mod:`bide.cdk.functions`), so a waiting request always
gets its answer. Each poll is one ranged read of the session's partition (a DynamoDB Query,
never a Scan): at most ``wait / POLL_SECONDS + 1`` reads per request. The wait happens
between route answers, never inside one: the route lock of :mod:`bide.service.http` is free
while a long poll sleeps, so the local server keeps answering other requests.

**Actions** wake the session's queue before they write (arm before signal) and again after
a write that changed something (no lost wakeup), like :mod:`bide.service.workflow`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..bindings import BindingSet
from ..bindings.declaration import WorkflowBinding
from ..engine.events import EVENT_PREFIX
from ..engine.failures import SignalFailure
from ..engine.host import host_commit
from ..promises import Promises, ResolveResult
from ..promises.model import DEFAULT_REJECTION
from ..tools.define import tool_owners
from .attach import attach as _attach
from .deps import Deps
from .pages import MAX_PAGE_BYTES, BadCursor, Page, build_page, decode_cursor

#: The longest a long poll waits for an event (seconds); see the module.
MAX_WAIT_SECONDS = 20
#: How often a long poll reads the store again while it waits.
POLL_SECONDS = 1.0
EVENTS_KIND = "events"
_EVENTS_PATH = re.compile(r"^/sessions/[^/]+/events/?$")


def events_page(
    deps: Deps, session_id: str, *, cursor: str | None, limit: int, bound: int = MAX_PAGE_BYTES
) -> Page:
    """Events after ``cursor`` (from the first without one), oldest first."""
    after = decode_cursor(cursor, session=session_id, kind=EVENTS_KIND)
    if after is not None and not (isinstance(after, str) and after.startswith(EVENT_PREFIX)):
        _bad_position()
    docs = deps.store.list_docs(session_id, EVENT_PREFIX, start_after=after, limit=limit + 1)
    return build_page(
        ((d.key, d.body) for d in docs),
        limit=limit,
        session=session_id,
        kind=EVENTS_KIND,
        start=after,
        byte_bound=bound,
    )


def _bad_position() -> None:
    # A cursor this API issued for this list always names an event key.
    raise BadCursor("cursor", "not a position in the events list")


def is_events_request(event: dict[str, Any]) -> bool:
    """Whether an API Gateway event reads a session's events."""
    method = (event.get("requestContext") or {}).get("http", {}).get("method")
    return method == "GET" and bool(_EVENTS_PATH.match(str(event.get("rawPath") or "")))


def _empty_page(response: dict[str, Any]) -> bool:
    if response.get("statusCode") != 200:
        return False
    try:
        body = json.loads(response.get("body") or "")
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("items") == []


def _wait_of(event: dict[str, Any]) -> float:
    # Read only after the route answered 200, so Powertools already checked the range.
    raw = (event.get("queryStringParameters") or {}).get("wait")
    try:
        return max(0.0, min(float(raw), MAX_WAIT_SECONDS)) if raw is not None else 0.0
    except ValueError:
        return 0.0


async def long_poll(
    deps: Deps,
    event: dict[str, Any],
    answer: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``answer(event)``, asked again every :data:`POLL_SECONDS` (on ``deps``' clock and
    sleep) while it is an empty page of events and the request's ``wait`` has not passed.
    Any other request is answered once."""
    response = await answer(event)
    if not is_events_request(event) or not _empty_page(response):
        return response
    deadline = deps.clock.now() + _wait_of(event)
    while (left := deadline - deps.clock.now()) > 0:
        await deps.sleep(min(POLL_SECONDS, left))
        # Each poll is a whole request again: the caller's access is checked every time.
        response = await answer(event)
        if not _empty_page(response):
            return response
    return response


# --- actions -----------------------------------------------------------------------------------


async def settle_promise(
    deps: Deps,
    session_id: str,
    promise_id: str,
    status: Literal["resolved", "rejected"],
    *,
    value: Any = None,
    error: str | None = None,
    error_type: str | None = None,
    error_data: Any = None,
) -> ResolveResult:
    """Resolve (with ``value``) or reject (with ``error``, typed ``error_type``, default
    ``Rejected``, and ``error_data``) a promise of the session:
    ``settled``, ``ignored`` (it had ended; the first outcome stands), ``expired`` or
    ``not_found``. Raises :class:`~bide.engine.limits.ValueRefused` (nothing written) for a
    value over the limits."""
    deps.queue.wake(session_id, "promise")
    promises = Promises(await _attach(deps, session_id))
    if status == "resolved":
        result = await promises.resolve(promise_id, value)
    else:
        message = error or "rejected"
        typed = SignalFailure(error_type or DEFAULT_REJECTION, message, error_data)
        result = await promises.reject(promise_id, typed)
    if result is not ResolveResult.NOT_FOUND:
        deps.queue.wake(session_id, "promise-stored")
    return result


def binding_of(deps: Deps) -> Callable[[str], WorkflowBinding | None]:
    """Find an admitted binding by name among the app's binding sets."""
    registries = [deps.app.tools, getattr(deps.app.agent, "tools", None)]
    sets = [
        owner
        for registry in registries
        if registry is not None
        for owner in tool_owners(registry.tools)
        if isinstance(owner, BindingSet)
    ]

    def find(name: str) -> WorkflowBinding | None:
        for found in sets:
            binding = found.get(name)
            if binding is not None:
                return binding
        return None

    return find


async def reply(
    deps: Deps,
    session_id: str,
    invocation_id: str,
    key: str,
    *,
    producer: str,
    correlation: str,
    status: Literal["resolved", "rejected"] = "resolved",
    value: Any = None,
    error: str | None = None,
) -> ResolveResult:
    """A bound receiver's reply for one completion key of an invocation (its backend calling
    back). Raises :class:`~bide.bindings.ReplyRejected` and writes nothing when the reply does
    not match the invocation (producer, correlation, key, reply schema)."""
    from ..bindings.invocations import reply_in

    deps.queue.wake(session_id, "reply")
    harness = await _attach(deps, session_id)
    find = binding_of(deps)
    result = host_commit(
        harness,
        lambda tx: reply_in(
            tx,
            find,
            invocation_id,
            key,
            correlation=correlation,
            producer=producer,
            status=status,
            value=value,
            error=error,
        ),
    )
    deps.queue.wake(session_id, "reply-stored")
    return result
