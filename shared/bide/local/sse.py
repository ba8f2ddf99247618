"""Server-sent events of a session's event stream, served by the local stack only
(``GET /sessions/{id}/events`` with ``Accept: text/event-stream``; on AWS the same route is a
long poll, since API Gateway's HTTP API does not stream responses).

Each page is read through the sessions API itself (:func:`bide.service.http.handle_api`), so
the owner check, the 404 and the cursors are the API's: a refused first read is answered as
the API answered it, as JSON. Then every event becomes one SSE message (the HTML Living
Standard's format: https://html.spec.whatwg.org/multipage/server-sent-events.html) whose
``id`` is the cursor after it, so a reconnecting ``EventSource`` sends it back as
``Last-Event-ID`` and resumes after the last event it saw. With nothing new the stream
sleeps :data:`POLL_SECONDS` and reads again, and sends a comment every
:data:`HEARTBEAT_SECONDS` so proxies keep the connection open.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from ..engine.events import event_key
from ..service.host import EVENTS_KIND
from ..service.pages import encode_cursor
from .server import HttpRequest, HttpResponse

POLL_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0
_EVENTS_PATH = re.compile(r"^/sessions/[^/]+/events/?$")

#: Reads one page: the raw query string in, the API's proxy result (payload 2.0) out.
ReadPage = Callable[[str], Awaitable[dict[str, Any]]]


def wants_stream(request: HttpRequest) -> bool:
    """Whether ``request`` asks for the events route as server-sent events."""
    if request.method != "GET" or not _EVENTS_PATH.match(request.path):
        return False
    accept = ",".join(v for n, v in request.headers if n.lower() == "accept")
    return "text/event-stream" in accept.lower()


def _query(request: HttpRequest) -> dict[str, str]:
    found = dict(parse_qsl(request.query, keep_blank_values=True))
    found.pop("wait", None)  # the stream itself waits
    resume = [v for n, v in request.headers if n.lower() == "last-event-id"]
    if resume and resume[-1] and "cursor" not in found:
        found["cursor"] = resume[-1]
    return found


def _cursor_after(session_id: str, item: dict[str, Any]) -> str | None:
    # The cursor a page ending at this event would carry (bide.service.pages).
    seq = item.get("seq")
    if not isinstance(seq, int):
        return None
    return encode_cursor(session_id, EVENTS_KIND, event_key(seq))


def message(item: dict[str, Any], cursor: str | None) -> bytes:
    """One SSE message for an event."""
    lines = []
    if cursor:
        lines.append(f"id: {cursor}")
    lines.append(f"event: {item.get('type', 'message')}")
    lines.append("data: " + json.dumps(item, separators=(",", ":"), sort_keys=True))
    return ("\n".join(lines) + "\n\n").encode()


async def stream(
    request: HttpRequest,
    read: ReadPage,
    sleep: Callable[[float], Awaitable[None]],
    to_response: Callable[[dict[str, Any]], HttpResponse],
) -> HttpResponse:
    """The response to an SSE request: the API's own answer when it refuses the first read,
    else a stream of the session's events that runs until the client leaves."""
    query = _query(request)
    session_id = unquote(request.path.strip("/").split("/")[1])
    first = await read(urlencode(query))
    if first.get("statusCode") != 200:
        return to_response(first)

    async def body() -> AsyncIterator[bytes]:
        page: dict[str, Any] = first
        quiet = 0.0
        yield b": bide events\n\n"
        while True:
            data = json.loads(page.get("body") or "{}")
            items = data.get("items") or []
            for item in items:
                yield message(item, _cursor_after(session_id, item))
            if data.get("next"):
                query["cursor"] = data["next"]
            if not items:
                await sleep(POLL_SECONDS)
                quiet += POLL_SECONDS
                if quiet >= HEARTBEAT_SECONDS:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
            else:
                quiet = 0.0
            page = await read(urlencode(query))
            if page.get("statusCode") != 200:
                yield b"event: error\ndata: " + str(page.get("body") or "").encode() + b"\n\n"
                return

    headers = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]
    return HttpResponse(200, b"", headers, stream=body())
