"""``bide dev``: the local stack in the foreground of a terminal, until Ctrl-C.

The CLI parses the arguments and loads the app; this runs the stack, prints the lines tools
wait for ("listening on", then the console's address) and stops it cleanly on a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal as signals
import sys
from typing import Any

from ..engine.clock import SystemClock
from .render import when
from .stack import LocalStack, LocalStackError


def local_logging(*, quiet: bool) -> None:
    """Logs to stderr (stdout carries only the server's own lines), no EMF metric blobs: they
    are for CloudWatch, and locally would only flood the terminal (set
    ``POWERTOOLS_METRICS_DISABLED=false`` to see them)."""
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    from ..service import observability  # configures the "bide" logger (JSON lines)

    root = logging.getLogger(observability.logger.name)
    for handler in root.handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    if quiet:
        root.setLevel(logging.WARNING)


async def serve_until_signalled(
    app: Any,
    *,
    app_name: str,
    db: str,
    port: int,
    webhook_base_url: str | None,
    exact: bool = False,
) -> None:
    """Start the local stack, say where it listens, serve until SIGINT/SIGTERM, stop it.
    Raises :class:`LocalStackError` when it cannot start or fails while serving. ``exact``:
    alarms fire on time and the queue deduplicates nothing (see :class:`LocalStack`)."""
    stack = LocalStack(app, db, port=port, webhook_base_url=webhook_base_url, exact=exact)
    await stack.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signals.SIGINT, signals.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            loop.add_signal_handler(signum, stopping.set)
    alarms = stack.alarms.alarms()
    # The console's address goes second: tools wait for the "listening on" line.
    print(
        f"bide dev: listening on {stack.url}  app={app_name}  db={db}  "
        f"queued wakes={len(stack.queue.queued())}  alarms={len(alarms)}"
        + ("  exact timing" if exact else "")
        + (f" (next {when(alarms[0].at, SystemClock().now())})" if alarms else ""),
        flush=True,
    )
    print(f"bide dev: console at {stack.url}/_console", flush=True)
    serving = asyncio.ensure_future(stack.serve_forever())
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        serving.cancel()
        await asyncio.gather(serving, stop, return_exceptions=True)
        await stack.close()
        print("bide dev: stopped", flush=True)
    if serving.done() and not serving.cancelled() and serving.exception() is not None:
        raise LocalStackError(f"the local stack failed: {serving.exception()}")
