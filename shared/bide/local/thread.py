"""Run a :class:`~bide.local.stack.LocalStack` on a background thread's event loop.

For tests, notebooks and scripts that want to call the stack over HTTP with blocking clients
(``urllib``, the CLI's :func:`bide.cli.main`) from the main thread::

    with BackgroundStack(LocalStack(app, "dev.sqlite", port=0)) as stack:
        ApiClient(stack.url).request("POST", "/sessions", {})
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from .stack import LocalStack

T = TypeVar("T")

START_TIMEOUT_SECONDS = 30.0


class BackgroundStack:
    """Starts the stack on a daemon thread on enter; closes it and joins on exit."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="bide-local-stack", daemon=True)

    @property
    def url(self) -> str:
        """The stack's base URL."""
        return self.stack.url

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run ``make()`` on the stack's loop and return its result."""

        async def run() -> T:
            return await make()

        future: Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(timeout)

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until no worker runs and no wake is ready (see :meth:`LocalStack.settle`)."""
        return self.call(lambda: self.stack.settle(timeout), timeout + 5)

    def status(self) -> dict[str, Any]:
        """:meth:`LocalStack.status`, read on the stack's loop."""

        async def status() -> dict[str, Any]:
            return self.stack.status()

        return self.call(status)

    def __enter__(self) -> BackgroundStack:
        self._thread.start()
        try:
            self.call(self.stack.start, START_TIMEOUT_SECONDS)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.call(self.stack.close)
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
