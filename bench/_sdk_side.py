"""The AWS Durable Execution SDK's side of ``bench_durable_sdk.py``, run in a process of its own.

The SDK's local test runner (``DurableFunctionTestRunner``) keeps threads and a large
in-memory backend in the process that uses it. Timed in the same process as Bide's rounds,
each system's rounds ran beside the other's threads, objects and garbage collector (a Bide
round at 1,000 operations took about 11 ms there and about 6 ms in a process of its own). So
the runners live in a child process (:class:`SdkProcess`, spawned: it inherits none of the
parent's objects) that builds the sessions and times each round itself, with the same code
and marks as before; the parent only asks for a round and waits, idle, for its figures. The
child answers once the runner's work after a round's last mark is done (:func:`quiet`), so
it does not run beside the next round timed either.

Not a bench itself: ``make bench`` runs ``bench/bench_*.py`` and this name does not match.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner

WAIT_S = 120.0  # a round that takes longer than this is a failure, not a figure

CREATE, WAIT_FOR = "create_callback", "wait_for_callback"


@dataclass
class SdkLoop:
    """One durable execution of the callback loop, and the marks its invocations leave."""

    primitive: str  # CREATE or WAIT_FOR
    feed_until: int  # the first feed_until callbacks are answered at once (the history)
    runner: Any = None
    ids: list[str] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    active: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def reached(self, callback_id: str) -> bool:
        """A new wait's id is out (never called on replay); answers it when it is part of the
        history. True when it did."""
        now = time.perf_counter()
        with self.changed:
            self.ids.append(callback_id)
            self.marks.setdefault("reach", now)
            self.changed.notify_all()
        if len(self.ids) > self.feed_until:
            return False
        self.runner.send_callback_success(callback_id, b"1")
        return True

    def submitter(self, callback_id: str, _ctx: Any) -> None:
        """wait_for_callback's submitter: a step, so it runs once per new wait."""
        self.reached(callback_id)

    def handler(self) -> Callable[[Any, Any], Any]:
        @durable_execution
        def loop(event: Any, context: DurableContext) -> int:
            for i in range(event["waits"]):
                if self.primitive == WAIT_FOR:
                    context.wait_for_callback(self.submitter, name=f"w{i}")
                    continue
                callback = context.create_callback(name=f"w{i}")
                # A replayed create_callback hands out the id it recorded: only i past the ids
                # seen is a new wait (an index test, so the replay pays no bookkeeping of ours).
                if i >= len(self.ids) and self.reached(callback.callback_id):
                    context.state.create_checkpoint_sync()  # history only: see the docstring
                callback.result()
            return int(event["waits"])

        def invocation(event: Any, lambda_context: Any) -> Any:
            with self.changed:
                self.active += 1
                self.marks.setdefault("start", time.perf_counter())
            try:
                return loop(event, lambda_context)
            finally:
                with self.changed:
                    self.active -= 1
                    self.marks["end"] = time.perf_counter()
                    self.changed.notify_all()

        return invocation

    def settle(self, waits: int) -> None:
        """Block until ``waits`` callbacks exist and no invocation runs."""
        with self.changed:
            ok = self.changed.wait_for(
                lambda: len(self.ids) >= waits and self.active == 0, timeout=WAIT_S
            )
        if not ok or len(self.ids) != waits:
            raise RuntimeError(f"SDK {self.primitive} loop: {len(self.ids)} callbacks, not {waits}")


class SdkSession:
    """A local test runner holding one execution of the loop, parked after ``history`` waits."""

    def __init__(self, history: int, name: str, primitive: str) -> None:
        self.history = history
        self.loop = SdkLoop(primitive, feed_until=history)  # callbacks 1..N answered at once
        self.runner = DurableFunctionTestRunner(handler=self.loop.handler(), poll_interval=0.01)
        self.loop.runner = self.runner
        self.rounds = 0
        try:
            self.runner.run_async(
                input=json.dumps({"waits": 10**9}), execution_timeout=3_600, execution_name=name
            )
            self.loop.settle(history + 1)  # callback N+1 is pending
        except BaseException:
            self.runner.close()
            raise

    def round(self) -> dict[str, float]:
        """Seconds from send_callback_success to the invocation's start, to the next wait
        reached, and to the invocation's end."""
        self.loop.marks.clear()
        pending = self.loop.ids[-1]
        began = time.perf_counter()
        self.runner.send_callback_success(pending, json.dumps(self.rounds).encode())
        self.loop.settle(self.history + 2 + self.rounds)
        self.rounds += 1
        return {name: mark - began for name, mark in self.loop.marks.items()}

    def close(self) -> None:
        self.runner.close()


# --- the process of its own -------------------------------------------------------------------

Marks = dict[str, float]


def quiet(step: float = 0.005, idle: float = 0.0005, limit: float = 2.0) -> None:
    """Wait (at most ``limit`` seconds) until this process's threads used less than ``idle``
    seconds of CPU in ``step`` seconds. After a round's marks are taken, the runner still
    finishes the invocation in its threads (some 5 ms of CPU at 1,000 operations); the next
    round timed, the SDK's or Bide's, must not share the machine with that work."""
    end = time.monotonic() + limit
    used = time.process_time()  # every thread of this process
    while time.monotonic() < end:
        time.sleep(step)
        now = time.process_time()
        if now - used < idle:
            return
        used = now


def serve(conn: Connection) -> None:
    """The child's loop: ``("open", history, batch)`` builds one session of each loop parked
    after ``history`` waits, ``("round",)`` times one round of each (``[create_callback
    marks, wait_for_callback marks]``), ``("close",)`` closes them, ``("exit",)`` ends."""
    sessions: list[SdkSession] = []

    def close() -> None:
        while sessions:
            sessions.pop().close()

    while True:
        request = conn.recv()
        try:
            reply: Any = None
            if request[0] == "open":
                close()
                history, batch = request[1], request[2]
                for primitive, label in ((CREATE, "create"), (WAIT_FOR, "waitfor")):
                    sessions.append(SdkSession(history, f"{label}-{history}-{batch}", primitive))
            elif request[0] == "round":
                reply = []
                for session in sessions:
                    reply.append(session.round())
                    quiet()  # the round's leftover work is done before anything else is timed
            elif request[0] in ("close", "exit"):
                close()
            else:
                raise ValueError(f"unknown request {request!r}")
        except Exception:
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("ok", reply))
        if request[0] == "exit":
            return


class SdkProcess:
    """The SDK's runners in a spawned child process (see the module's docstring)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve, args=(child,), name="sdk-runners")
        self._process.start()
        child.close()

    def _call(self, *request: Any) -> Any:
        self._conn.send(request)
        if not self._conn.poll(3 * WAIT_S):
            raise RuntimeError(f"the SDK process did not answer {request[0]!r} in time")
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"the SDK process failed on {request[0]!r}:\n{value}")
        return value

    def open(self, history: int, batch: int) -> None:
        """A session of each loop (create_callback, wait_for_callback) parked after
        ``history`` waits, replacing the previous ones."""
        self._call("open", history, batch)

    def round(self) -> tuple[Marks, Marks]:
        """One round of each loop, timed in the child (see :meth:`SdkSession.round`)."""
        create, wait_for = self._call("round")
        return create, wait_for

    def close(self) -> None:
        """Close the sessions and end the child."""
        try:
            if self._process.is_alive():
                self._call("exit")
        finally:
            self._process.join(timeout=30)
            if self._process.is_alive():  # it did not end: ours to stop
                self._process.terminate()
                self._process.join(timeout=10)
            self._conn.close()
