"""What the paged-API tests share (``test_api_pages``, ``test_hooks_pages``,
``test_workflow_pages``): an API wired to a SQLite store, calls through ``handle_api`` with
the size of each answer, the page walker that follows ``next`` to the end checking every page's
bounds, and an API client for the CLI that sends its requests straight to the handler."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from handler_fixtures import PRINCIPAL, Probe, http_event, make_app, response_json
from test_workflow_support import Alarms, Queue

from bide import ManualClock, RandomIds, SQLiteStore
from bide.local import client as api
from bide.service.deps import Deps
from bide.service.http import handle_api
from bide.service.pages import MAX_PAGE_BYTES

#: The JSON around a page's items (session id, cursor, flags, list name): small and bounded.
ENVELOPE_BYTES = 4096
#: The most a page's response may weigh: the page bound on its items plus the envelope.
PAGE_RESPONSE_BYTES = MAX_PAGE_BYTES + ENVELOPE_BYTES
#: How many pages a walk may take: a cursor that never moves on fails the test, not hangs it.
MAX_PAGES = 100  # the longest walk in these tests takes 17


def local_deps(store: SQLiteStore | None = None) -> Deps:
    """The API's dependencies on ``store`` (a fresh in-memory SQLite store when None),
    in-memory alarms and queue, the probe app and a manual clock."""
    return Deps(
        store=store if store is not None else SQLiteStore(),
        alarms=Alarms(),
        queue=Queue(),
        app=make_app(Probe()),
        clock=ManualClock(),
        ids=RandomIds(),
    )


@contextlib.contextmanager
def sqlite_deps() -> Iterator[Deps]:
    """:func:`local_deps` for the block; its store is closed after."""
    deps = local_deps()
    try:
        yield deps
    finally:
        deps.store.close()  # type: ignore[attr-defined]


def call(
    deps: Deps,
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    principal: str = PRINCIPAL,
) -> tuple[int, Any, int]:
    """One request through the API handler: (status, parsed body, body size in bytes)."""
    event = http_event(method, path, body=body, query=query, principal=principal)
    response = asyncio.run(handle_api(deps, event, None))
    return response["statusCode"], response_json(response), len(response["body"].encode())


def get(
    deps: Deps, path: str, query: dict[str, str] | None = None, principal: str = PRINCIPAL
) -> tuple[int, Any, int]:
    """``GET path``: (status, parsed body, body size in bytes)."""
    return call(deps, "GET", path, query=query, principal=principal)


def new_session(deps: Deps, principal: str = PRINCIPAL) -> str:
    """A new session owned by ``principal``, made through ``POST /sessions``; its id."""
    status, body, _ = call(deps, "POST", "/sessions", {}, principal=principal)
    assert status == 201, body
    return str(body["session_id"])


def read_pages(
    deps: Deps,
    path: str,
    cursor: str | None = None,
    *,
    limit: int | None = None,
    same: dict[str, Any] | None = None,
) -> tuple[list[Any], str | None]:
    """Every item of the paged list at ``path`` from ``cursor`` (from its start when None),
    following ``next`` until ``more`` is false, at page size ``limit`` (the API's default when
    None). Every page must answer 200, weigh at most :data:`PAGE_RESPONSE_BYTES`, hold at
    most ``limit`` items and carry the fields of ``same``. The items and the last cursor (kept
    when a page names none), which later reads only what was added since."""
    items: list[Any] = []
    for _ in range(MAX_PAGES):
        query = {
            **({"limit": str(limit)} if limit is not None else {}),
            **({"cursor": cursor} if cursor else {}),
        }
        status, page, size = get(deps, path, query)
        assert status == 200, page
        assert size <= PAGE_RESPONSE_BYTES, (path, size)
        assert limit is None or len(page["items"]) <= limit, (path, len(page["items"]))
        for name, value in (same or {}).items():
            assert page[name] == value, (path, name, page[name])
        items += page["items"]
        cursor = page["next"] or cursor
        if not page["more"]:
            return items, cursor
    raise AssertionError(f"following next on {path} never reached the end")


class DirectClient:
    """An ApiClient stand-in that sends requests straight to the API handler (as
    :data:`PRINCIPAL`), noting each path it was asked for."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.paths: list[str] = []

    def request(self, method: str, path: str, body: Any = None) -> api.ApiResponse:
        """Send one request; the response as the HTTP client would return it."""
        self.paths.append(path)
        route, _, query = path.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&")) if query else None
        event = http_event(method, route, body=body, query=params, principal=PRINCIPAL)
        response = asyncio.run(handle_api(self.deps, event, None))
        raw = response["body"].encode()
        return api.ApiResponse(response["statusCode"], json.loads(raw), raw)
