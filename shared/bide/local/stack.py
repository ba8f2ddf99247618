"""The local stack: the sessions API, webhooks, worker and alarms on one machine, no AWS.

:class:`LocalStack` serves HTTP on 127.0.0.1, turns each request into the API Gateway v2
event the deployed HTTP API would send and calls the **same** handlers the Lambda functions
call (``bide.service.http``); runs the worker in-process from a local FIFO-per-session wake
queue; and fires a local alarm at each session's ``wake().at``. The store, the queue and the
alarms live in one SQLite file, so killing the process while work is parked loses nothing.

Besides the API's routes it answers ``GET /_local/status`` (local only, never deployed):
which workers run, which wakes are queued, which alarms are armed; and serves the dev console
(``GET /_console``) with its local-only JSON (``GET /_local/sessions``, ``GET
/_local/sessions/{id}``; see :mod:`bide.local.console`).

By default the stack behaves like AWS: alarms fire anywhere within the Scheduler's minute
(sometimes twice) and the wake queue deduplicates alarm wakes by content for 5 minutes
(:mod:`bide.local.alarms`, :mod:`bide.local.queue`); the worker dead-letters a wake on its
last attempt with the reason (``bide redrive`` lists and resends them). ``exact=True``
(``bide dev --exact``) fires alarms at their deadline and deduplicates nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ..app import App
from ..constants import WORKER_TIMEOUT_SECONDS
from ..engine.clock import Clock, SystemClock
from ..engine.errors import BideError
from ..engine.ids import IdSource, RandomIds
from ..engine.store.sqlite import SQLiteStore
from ..service.deps import Deps
from ..tools.webhook_keys import StaticWebhookKeys
from . import sse
from .alarms import LocalAlarms
from .console import Console, ProgressLog
from .db import LocalDb
from .events import LocalContext, Route, find_route, http_api_event
from .queue import LocalWakeQueue
from .redrive import LocalDeadLetters
from .server import MAX_BODY_BYTES, HttpRequest, HttpResponse, HttpServer
from .webhook_keys import local_keys

log = logging.getLogger("bide.local")

DEFAULT_PORT = 8787
DEFAULT_DB = ".bide/dev.sqlite"
STATUS_PATH = "/_local/status"
API_TIMEOUT_SECONDS = 30.0  # the api and signal functions' timeout
# How long a clean stop waits for running workers. A worker cut off is not lost (its tasks
# recover as pending and its wake stays queued) but each cut-off task counts a restart.
SHUTDOWN_GRACE_SECONDS = 10.0


class LocalStackError(BideError):
    """The local stack cannot start (the file is in use, the port is taken...)."""


class LocalStack:
    """Everything ``bide dev`` runs. Use ``async with LocalStack(app, path) as stack:``, or
    :meth:`start` and :meth:`close`."""

    def __init__(
        self,
        app: App,
        db_path: str = DEFAULT_DB,
        *,
        port: int = DEFAULT_PORT,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        webhook_base_url: str | None = None,
        worker_timeout_seconds: float = WORKER_TIMEOUT_SECONDS,
        max_body_bytes: int = MAX_BODY_BYTES,
        exact: bool = False,
        seed: int | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.app = app
        self.exact = exact
        self.seed = seed
        self.sleep = sleep
        self.db_path = db_path
        self.clock: Clock = clock or SystemClock()
        self.ids: IdSource = ids or RandomIds()
        self.worker_timeout_seconds = worker_timeout_seconds
        self._webhook_base_url = webhook_base_url
        self.server = HttpServer(self._handle, port=port, max_body_bytes=max_body_bytes)
        self._deps: Deps | None = None
        self._store: SQLiteStore | None = None
        self._db: LocalDb | None = None
        self._lock_file: IO[str] | None = None
        self.webhook_keys: StaticWebhookKeys | None = None
        """The key webhook tokens are derived under (``<db>.webhook-key``), once started."""
        self._tasks: list[asyncio.Task[None]] = []
        self._request_ids = itertools.count(1)
        self.progress = ProgressLog(self.clock)
        """The last progress each task reported (``ctx.progress``), for the console."""
        self.console = Console(self)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the file, bind the port, start the worker runner and the alarm clock."""
        from ..service import http  # noqa: F401  (fail now, not on the first request)

        try:
            self._open_files()
            try:
                await self.server.start()
            except OSError as exc:
                port = self.server.requested_port
                if exc.errno == errno.EADDRINUSE:
                    why = "the port is in use (another 'bide dev'?); pass another --port"
                else:
                    why = exc.strerror or str(exc)
                raise LocalStackError(f"cannot listen on 127.0.0.1:{port}: {why}") from exc
        except BaseException:
            await self.close()  # release the file lock and connections of a failed start
            raise
        # No await from here to the end: requests accepted since the bind are served only
        # once this coroutine yields, and by then the handlers' dependencies exist.
        assert self._store is not None and self._db is not None
        assert self.webhook_keys is not None
        queue = LocalWakeQueue(self._db, self.clock, exact=self.exact)
        alarms = LocalAlarms(
            self._db, queue, self.clock, exact=self.exact, seed=self.seed, ids=self.ids
        )
        self._deps = Deps(
            store=self._store,
            alarms=alarms,
            queue=queue,
            app=self.app,
            clock=self.clock,
            ids=self.ids,
            webhook_base_url=self._webhook_base_url or self.url,
            services={"workflow_progress": self.progress},
            sleep=self.sleep,
            dead_letters=LocalDeadLetters(self._db, self.clock),
            max_receive_count=queue.max_receives,
            webhook_keys=self.webhook_keys,
        )
        # This process holds the file's lock, so wakes taken by an earlier process were
        # abandoned when it died: hand them out again now rather than after a timeout.
        released = queue.release_abandoned()
        if released:
            log.info("re-queued %d wake(s) left by a previous run", released)
        self._tasks = [
            asyncio.ensure_future(queue.run(self._run_worker)),
            asyncio.ensure_future(alarms.run()),
        ]

    def _open_files(self) -> None:
        if self.db_path != ":memory:":
            Path(self.db_path).parent.mkdir(parents=True, exist_ok=True)
            self._lock_file = _lock(self.db_path)
        self._store = SQLiteStore(self.db_path)
        self._db = LocalDb(self.db_path)
        # Beside the file, never in it: a copy of the database is not a copy of the key.
        self.webhook_keys = local_keys(self.db_path)

    async def close(self) -> None:
        """Stop serving, let running workers finish (up to a grace period; any still running
        then are cancelled, their wakes stay queued and the next start continues them)."""
        await self.server.close()
        running = self._deps is not None and bool(self._tasks)
        if running and not await self.queue.finish_running(SHUTDOWN_GRACE_SECONDS):
            log.warning("stopping with workers still running: they continue on restart")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    async def __aenter__(self) -> LocalStack:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        """Run until cancelled; a background loop that dies takes the stack down with it."""
        done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()

    # --- views -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def deps(self) -> Deps:
        """The handlers' dependencies (after :meth:`start`)."""
        if self._deps is None:
            raise LocalStackError("the local stack is not started")
        return self._deps

    @property
    def queue(self) -> LocalWakeQueue:
        """The wake queue."""
        queue = self.deps.queue
        assert isinstance(queue, LocalWakeQueue)
        return queue

    @property
    def alarms(self) -> LocalAlarms:
        """The alarm clock."""
        alarms = self.deps.alarms
        assert isinstance(alarms, LocalAlarms)
        return alarms

    async def settle(self, timeout: float = 10.0) -> bool:
        """Wait until no worker runs and no wake is ready (alarms may still be armed)."""
        return await self.queue.drained(timeout)

    def status(self) -> dict[str, Any]:
        """What runs and what is scheduled: workers, queued wakes, alarms."""
        now = self.clock.now()
        return {
            "now": now,
            "workers_running": self.queue.running(),
            "wakes_queued": [
                {
                    "session_id": q.session_id,
                    "reason": q.reason,
                    "visible_in_seconds": round(max(0.0, q.visible_at - now), 3),
                    "receive_count": q.receive_count,
                }
                for q in self.queue.queued()
            ],
            "alarms": [{"session_id": a.session_id, "at": a.at} for a in self.alarms.alarms()],
            "dead_letters": self.queue.dead_letters(),
        }

    # --- dispatch ----------------------------------------------------------------------------

    def _context(self, function: str, timeout: float) -> LocalContext:
        return LocalContext(
            function_name=f"bide-{function}",
            aws_request_id=f"local-{next(self._request_ids)}",
            timeout_seconds=timeout,
            clock=self.clock,
        )

    async def _run_worker(self, event: dict[str, Any]) -> Any:
        from ..service.http import handle_worker

        context = self._context("worker", self.worker_timeout_seconds)
        return await handle_worker(self.deps, event, context)

    async def _handle(self, request: HttpRequest) -> HttpResponse:
        from ..service.http import handle_api, handle_signal

        if request.path == STATUS_PATH and request.method == "GET":
            return HttpResponse.json(200, self.status())
        if Console.takes(request.path):
            return await self.console.handle(request)
        found = find_route(request.method, request.path)
        if found is None:
            # What API Gateway answers for a path or method no route takes.
            return HttpResponse.json(404, {"message": "Not Found"})
        route, params = found
        context = self._context(route.target, API_TIMEOUT_SECONDS)

        def event_for(raw_query: str) -> dict[str, Any]:
            return http_api_event(
                method=request.method,
                raw_path=request.path,
                raw_query=raw_query,
                headers=request.headers,
                body=request.body,
                route=route,
                path_parameters=params,
                source_ip=request.peer,
                domain=request.host or f"127.0.0.1:{self.server.port}",
                request_id=context.aws_request_id,
                now=self.clock.now(),
                principal=local_principal(request, route),
            )

        if route.target == "api" and sse.wants_stream(request):
            # Local only: the events route as server-sent events (bide.local.sse).
            return await sse.stream(
                request,
                lambda query: handle_api(self.deps, event_for(query), context),
                asyncio.sleep,
                proxy_response,
            )
        event = event_for(request.query)
        handler = handle_signal if route.target == "signal" else handle_api
        started = asyncio.get_running_loop().time()
        result = await handler(self.deps, event, context)
        response = proxy_response(result)
        elapsed = (asyncio.get_running_loop().time() - started) * 1000
        # The route key, not the path: a webhook path holds its capability token.
        log.info("%s -> %d (%.0f ms)", route.key, response.status, elapsed)
        return response


#: The header naming the caller on the local stack (trusted from 127.0.0.1 only).
PRINCIPAL_HEADER = "x-bide-principal"
_LOOPBACK_PEERS = frozenset({"127.0.0.1", "::1"})


def local_principal(request: HttpRequest, route: Route) -> str | None:
    """Who calls an IAM-authorised route of the local stack: the ``X-Bide-Principal`` header
    of a request from this machine, else ``local`` (one local principal). The capability
    webhook route has none, as on AWS; nor has a request from elsewhere."""
    from ..service.owners import LOCAL_PRINCIPAL

    if route.template.startswith("/hooks/") or request.peer not in _LOOPBACK_PEERS:
        return None
    named = [v.strip() for n, v in request.headers if n.lower() == PRINCIPAL_HEADER]
    return named[-1] if named and named[-1] else LOCAL_PRINCIPAL


def proxy_response(result: Any) -> HttpResponse:
    """An HTTP response from a Lambda proxy result (payload format 2.0).

    A dict with ``statusCode`` is taken as is (headers, ``cookies``, ``body``,
    ``isBase64Encoded``); anything else is what API Gateway infers: 200 with the value as JSON.
    """
    if not isinstance(result, dict) or "statusCode" not in result:
        inferred = result if isinstance(result, str) else json.dumps(result)
        return HttpResponse(200, inferred.encode(), [("Content-Type", "application/json")])
    headers = [(str(k), str(v)) for k, v in (result.get("headers") or {}).items()]
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers += [(str(name), str(v)) for v in values]
    headers += [("Set-Cookie", str(c)) for c in result.get("cookies") or []]
    raw = result.get("body")
    body = b""
    if raw is not None:
        body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
    return HttpResponse(int(result["statusCode"]), body, headers)


def _lock(db_path: str) -> IO[str]:
    """Hold an exclusive lock on ``<db>.lock`` for the process's life: two stacks on one file
    would hand each other's wakes out twice. The OS drops the lock when the process dies."""
    handle = open(f"{db_path}.lock", "a")  # noqa: SIM115  (held open until close())
    with contextlib.suppress(ImportError):
        import fcntl

        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise LocalStackError(
                f"another 'bide dev' is using {db_path}: stop it or pass --db another file"
            ) from None
    return handle
