"""An HTTP client for the sessions API: the local stack, or a deployed API signed with SigV4.

Requests to a deployed HTTP API (``https://<id>.execute-api.<region>.amazonaws.com``) are
signed with the caller's AWS credentials for the ``execute-api`` service, as its IAM-authorised
routes require. Requests to 127.0.0.1 are never signed and never go through a proxy.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ..engine.errors import BideError

DEFAULT_URL = "http://127.0.0.1:8787"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class ClientError(BideError):
    """The request could not be made (no credentials, no region...)."""


class Unreachable(ClientError):
    """Nothing answered at the URL (connection refused, DNS, timeout)."""

    retryable = True


@dataclass(frozen=True)
class ApiResponse:
    """A response: status, the parsed JSON body (or the text when not JSON)."""

    status: int
    body: Any
    raw: bytes

    @property
    def ok(self) -> bool:
        """2xx."""
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The error message a handler put in the body, or the body itself."""
        if isinstance(self.body, dict):
            for name in ("message", "error", "detail"):
                if self.body.get(name):
                    return str(self.body[name])
        if isinstance(self.body, str):
            return self.body.strip()
        return json.dumps(self.body)


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready to send (signed when it must be)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None


def path_of(*segments: str) -> str:
    """``/a/b`` with every segment percent-encoded (ids may hold any character)."""
    return "".join("/" + quote(s, safe="") for s in segments)


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine."""
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS


def region_of(url: str) -> str | None:
    """The region in an ``execute-api`` host name, if it is one."""
    match = _EXECUTE_API_HOST.search(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def sign_sigv4(request: PreparedRequest, *, region: str, credentials: Any) -> PreparedRequest:
    """``request`` with SigV4 headers for ``execute-api`` (Authorization, X-Amz-Date and,
    with temporary credentials, X-Amz-Security-Token). Builds headers only; sends nothing."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    aws = AWSRequest(
        method=request.method, url=request.url, data=request.body, headers=dict(request.headers)
    )
    SigV4Auth(credentials, "execute-api", region).add_auth(aws)
    return PreparedRequest(request.method, request.url, dict(aws.headers.items()), request.body)


def default_credentials() -> Any:
    """The caller's AWS credentials (env, profile, SSO, instance role...), frozen."""
    import botocore.session

    found = botocore.session.Session().get_credentials()
    if found is None:
        raise ClientError(
            "no AWS credentials found to sign the request: configure a profile "
            "(AWS_PROFILE) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    return found.get_frozen_credentials()


class ApiClient:
    """Talks JSON to the sessions API at ``base_url``.

    ``sign``: None (the default) signs for any non-loopback https URL; True/False force it.
    ``region`` defaults to the one in an ``execute-api`` host name.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        sign: bool | None = None,
        region: str | None = None,
        credentials: Any = None,
        timeout: float = 30.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ClientError(f"--url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.sign = (
            sign if sign is not None else (parts.scheme == "https" and not is_loopback(base_url))
        )
        self.region = region or region_of(base_url)
        self._credentials = credentials
        self.timeout = timeout

    def prepare(self, method: str, path: str, body: Any = None) -> PreparedRequest:
        """The request to send: JSON-encoded body, headers, SigV4 signature when signing."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": "bide-cli"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = PreparedRequest(method, self.base_url + path, headers, data)
        if not self.sign:
            return request
        if not self.region:
            raise ClientError(
                f"cannot tell the AWS region of {self.base_url}: pass --region or set AWS_REGION"
            )
        credentials = self._credentials or default_credentials()
        return sign_sigv4(request, region=self.region, credentials=credentials)

    def request(self, method: str, path: str, body: Any = None) -> ApiResponse:
        """Send a request; any HTTP status comes back as an :class:`ApiResponse`. Raises
        :class:`Unreachable` when nothing answers."""
        return self.send(self.prepare(method, path, body))

    def send(self, prepared: PreparedRequest) -> ApiResponse:
        """Send a prepared request (this client's timeout; no proxy for loopback)."""
        req = urllib.request.Request(
            prepared.url, data=prepared.body, headers=prepared.headers, method=prepared.method
        )
        # Loopback traffic never goes through a proxy named in the environment.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(prepared.url) else []
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=self.timeout) as response:
                return _response(response.status, response.read())
        except urllib.error.HTTPError as exc:
            return _response(exc.code, exc.read())
        except (urllib.error.URLError, OSError) as exc:
            raise Unreachable(self._unreachable(exc)) from None

    def _unreachable(self, exc: Exception) -> str:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, ConnectionRefusedError) and is_loopback(self.base_url):
            port = urlsplit(self.base_url).port
            start = "python -m bide dev" + ("" if port in (None, 8787) else f" --port {port}")
            return (
                f"the local stack is not running at {self.base_url} (connection refused). "
                f"Start it with: {start}"
            )
        if isinstance(reason, TimeoutError | socket.timeout):
            return f"{self.base_url} did not answer within {self.timeout:g}s"
        return f"cannot reach {self.base_url}: {reason}"


class PageRefused(BideError):
    """The server refused a page of a list (no such session, another principal's...)."""

    def __init__(self, response: ApiResponse, path: str) -> None:
        super().__init__(f"GET {path} -> HTTP {response.status}: {response.message}")
        self.response = response
        self.path = path


#: The most items :func:`read_pages` reads of one list for a view (live tasks, submissions):
#: a view of a session with more says how many it left out instead of reading forever.
VIEW_ITEMS_CAP = 2000


def read_page(client: ApiClient, path: str, **query: Any) -> dict[str, Any]:
    """One page of a paged list (``{"items", "next", "more"}``); raises :class:`PageRefused`."""
    asked = {k: str(v) for k, v in query.items() if v is not None}
    target = path + ("?" + urlencode(asked) if asked else "")
    response = client.request("GET", target)
    if not response.ok or not isinstance(response.body, dict):
        raise PageRefused(response, target)
    return response.body


def read_pages(
    client: ApiClient, path: str, *, cursor: str | None = None, cap: int | None = None, **query: Any
) -> Iterator[dict[str, Any]]:
    """The pages of a list from ``cursor`` to its end (at most ``cap`` items in all)."""
    read = 0
    while True:
        page = read_page(client, path, cursor=cursor, **query)
        read += len(page.get("items") or [])
        yield page
        cursor = page.get("next") or cursor
        query.pop("from_entry", None)  # where to start: the first page only
        if not page.get("more") or (cap is not None and read >= cap):
            return


def follow_list(
    client: ApiClient, path: str, cursor: str | None, **query: Any
) -> tuple[list[Any], str | None]:
    """Every item of a list after ``cursor`` and the cursor after the last one (to read what
    is added later)."""
    items: list[Any] = []
    for page in read_pages(client, path, cursor=cursor, **query):
        items += page.get("items") or []
        cursor = page.get("next") or cursor
    return items, cursor


def session_view(client: ApiClient, session_id: str, *, tail: int) -> dict[str, Any]:
    """``GET /sessions/{id}`` completed for a person: every live task, submission and webhook (up to
    :data:`VIEW_ITEMS_CAP`) and the last ``tail`` transcript entries (``entries_total`` says
    how many there are)."""
    base = path_of("sessions", session_id)
    response = client.request("GET", base)
    if not response.ok or not isinstance(response.body, dict):
        raise PageRefused(response, base)
    view = dict(response.body)
    for name, path in (("tasks", "tasks"), ("submissions", "submissions"), ("webhooks", "hooks")):
        cursor = view.get(f"{name}_next")
        if view.get(f"{name}_more") and cursor:
            pages = read_pages(client, f"{base}/{path}", cursor=cursor, cap=VIEW_ITEMS_CAP)
            view[name] = list(view.get(name) or []) + [i for p in pages for i in p["items"]]
    total = int(view.get("entries_total") or len(view.get("entries") or []))
    if tail <= 0:
        view["entries"] = []
    elif total > len(view.get("entries") or []):
        first = max(1, total - tail + 1)
        view["entries"] = read_page(client, f"{base}/transcript", from_entry=first, limit=tail)[
            "items"
        ]
    view["entries_total"] = total
    return view


#: The lists of ``GET /sessions/{id}/workflow``, each continued on ``.../workflow/<list>``.
WORKFLOW_LISTS: tuple[str, ...] = ("asks", "authorizations", "tasks", "approvals", "nondeterminism")


def workflow_view(client: ApiClient, session_id: str) -> dict[str, Any]:
    """``GET /sessions/{id}/workflow`` with every page of each of its lists (up to
    :data:`VIEW_ITEMS_CAP` each); empty when the server has no such route (a server without
    workflow tools). Raises :class:`PageRefused` when a later page is refused."""
    base = path_of("sessions", session_id, "workflow")
    response = client.request("GET", base)
    if not response.ok or not isinstance(response.body, dict):
        return {}
    view = dict(response.body)
    for name in WORKFLOW_LISTS:
        cursor = view.get(f"{name}_next")
        if view.get(f"{name}_more") and cursor:
            pages = read_pages(client, f"{base}/{name}", cursor=cursor, cap=VIEW_ITEMS_CAP)
            view[name] = list(view.get(name) or []) + [i for p in pages for i in p["items"]]
            view[f"{name}_more"] = False
    return view


def list_sessions(client: ApiClient, *, limit: int, every: bool) -> Iterator[dict[str, Any]]:
    """The caller's sessions, newest first: one page of ``limit``, or ``every`` page."""
    for page in read_pages(client, "/sessions", limit=limit):
        yield from page.get("items") or []
        if not every:
            return


def _response(status: int, raw: bytes) -> ApiResponse:
    text = raw.decode("utf-8", errors="replace")
    try:
        body: Any = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        body = text
    return ApiResponse(status, body, raw)
