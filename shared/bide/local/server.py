"""A small HTTP/1.1 server on asyncio streams for the local stack (standard library only).

One request per connection (every response says ``Connection: close``), a bounded header
block, a required ``Content-Length`` for bodies (no chunked uploads), a body limit and a
deadline for reading the request. Anything malformed gets a 4xx JSON answer and the
connection is closed; nothing a client sends can stop the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger("bide.local.http")

MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
READ_TIMEOUT_SECONDS = 30.0
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(r"^HTTP/(\d)\.(\d)$")


@dataclass(frozen=True)
class HttpRequest:
    """A parsed request: the raw path and query, headers in order (names as sent)."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    peer: str
    host: str = ""


@dataclass
class HttpResponse:
    """A response to write."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: AsyncIterator[bytes] | None = None
    """A body written as it comes (server-sent events): no Content-Length; the body ends
    when the iterator does, or the client goes away, and the connection closes."""

    @classmethod
    def json(cls, status: int, value: object) -> HttpResponse:
        """A JSON response."""
        return cls(status, json.dumps(value).encode(), [("Content-Type", "application/json")])


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class BadRequest(Exception):
    """A request the server refuses before any handler sees it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one; see :attr:`port`)."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = MAX_BODY_BYTES,
        read_timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self.handler = handler
        self.host = host
        self.requested_port = port
        self.max_body_bytes = max_body_bytes
        self.read_timeout = read_timeout
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.requested_port, limit=MAX_HEADER_BYTES
        )

    async def close(self) -> None:
        """Stop accepting, cancel connections still being served, then wait for the server.

        The order matters: since Python 3.12.1 ``Server.wait_closed()`` also waits for every
        open connection, and an event stream (SSE) whose client went away is only noticed at
        its next keep-alive write, so waiting first would hang the close."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            response = await self._respond(reader, writer)
            if response is not None:
                await _write(writer, response)
        except asyncio.CancelledError:
            # The server is closing. End quietly: asyncio's stream callback logs a connection
            # task that ends cancelled as an error.
            pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        except Exception:  # never let one connection take the server down
            log.exception("error while serving a connection")
        finally:
            writer.close()
            if task is not None:
                self._connections.discard(task)

    async def _respond(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> HttpResponse | None:
        peer = writer.get_extra_info("peername")
        try:
            # asyncio.timeout, not wait_for: see bide.local.db.sleep_until_poked.
            async with asyncio.timeout(self.read_timeout):
                request = await _read_request(reader, writer, self.max_body_bytes, _peer_ip(peer))
        except TimeoutError:
            return _error(408, "the request was not received in time")
        except BadRequest as exc:
            return _error(exc.status, exc.message)
        if request is None:
            return None  # connection closed before a request started
        try:
            return await self.handler(request)
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            return _error(500, "Internal Server Error")


def _peer_ip(peer: object) -> str:
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "127.0.0.1"


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse.json(status, {"message": message})


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int, peer: str
) -> HttpRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431, f"request line and headers exceed {MAX_HEADER_BYTES} bytes") from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest(400, "the request ended before its headers did") from None
    lines = head[:-4].decode("latin-1").split("\r\n")
    method, target, _version = _request_line(lines[0])
    headers = _headers(lines[1:])
    path, _, query = target.partition("?")
    lowered = {name.lower(): value for name, value in headers}
    length = _content_length(headers, method, lowered)
    if length > max_body:
        raise BadRequest(413, f"body of {length} bytes exceeds the limit of {max_body} bytes")
    if length and lowered.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        raise BadRequest(400, f"the body is shorter than Content-Length ({length})") from None
    return HttpRequest(method, path, query, headers, body, peer, lowered.get("host", ""))


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise BadRequest(400, "malformed method")
    match = _VERSION.match(version)
    if match is None:
        raise BadRequest(400, "malformed HTTP version")
    if match.group(1) != "1":
        raise BadRequest(505, f"{version} is not supported; use HTTP/1.1")
    if not target.startswith("/") or any(ord(c) < 0x21 or ord(c) > 0x7E for c in target):
        raise BadRequest(400, "the request target must be a path starting with '/'")
    return method, target, version


def _headers(lines: list[str]) -> list[tuple[str, str]]:
    if len(lines) > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} headers")
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        # No obsolete line folding and no space before the colon (RFC 9112 section 5).
        if not colon or not _TOKEN.match(name):
            raise BadRequest(400, f"malformed header line {line[:40]!r}")
        headers.append((name, value.strip(" \t")))
    return headers


def _content_length(headers: list[tuple[str, str]], method: str, lowered: dict[str, str]) -> int:
    if "transfer-encoding" in lowered:
        raise BadRequest(411, "chunked bodies are not supported: send Content-Length")
    values = {v.strip() for n, v in headers if n.lower() == "content-length"}
    if not values:
        if method in _BODY_METHODS:
            raise BadRequest(411, f"{method} needs a Content-Length header")
        return 0
    if len(values) > 1:
        raise BadRequest(400, "conflicting Content-Length headers")
    (value,) = values
    if not value.isdigit() or len(value) > 15:
        raise BadRequest(400, f"Content-Length is not a number of bytes: {value[:20]!r}")
    return int(value)


async def _write(writer: asyncio.StreamWriter, response: HttpResponse) -> None:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Status"
    skip = {"content-length", "connection", "transfer-encoding"}
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    # A handler's header value must not be able to start a header of its own.
    lines += [f"{n}: {_one_line(v)}" for n, v in response.headers if n.lower() not in skip and n]
    if response.stream is None:
        lines.append(f"Content-Length: {len(response.body)}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")
    writer.write(head + response.body)
    await writer.drain()
    if response.stream is not None:
        # HTTP/1.1 without Content-Length: the body runs until the connection closes.
        async for chunk in response.stream:
            writer.write(chunk)
            await writer.drain()


def _one_line(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")
