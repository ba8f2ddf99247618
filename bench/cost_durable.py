"""The durable-functions side of ``bench_cost.py``: the CPU time of one resume invocation of a
``create_callback`` loop after N waits of history, on the AWS Durable Execution SDK's local
runner (``DurableFunctionTestRunner``)::

    for i in range(...):
        callback = context.create_callback(name=f"w{i}")   # one operation
        (hand callback.callback_id out)
        callback.result()                                   # suspends until it completes

Each wait of the history is completed as soon as its id is handed out, so the history is built
one invocation per wait (each replaying the ones before). Then one warm round and ROUNDS timed
rounds: complete the pending callback; the backend invokes the function again, which replays
every earlier wait and suspends on the next one.

Measured as Bide's handlers are: ``time.thread_time`` in the threads that run the invocation,
the invocation's own thread (the SDK's wrapper: decoding the operations it is handed) plus the
SDK's handler thread while the user function runs (the replay and the new wait). The SDK's
checkpoint thread and the emulated backend are not counted, so this is a lower bound of what
the function would be billed for.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner

ROUNDS = 3
WAIT_S = 900.0  # building 1,000 waits takes minutes; longer is a failure, not a figure


class CallbackLoop:
    """One durable execution of the loop and what its invocations leave behind."""

    def __init__(self, history: int) -> None:
        self.history = history
        self.runner: Any = None
        self.ids: list[str] = []
        self.cpu: list[float] = []
        self.active = 0
        self.changed = threading.Condition()

    def _handed_out(self, callback_id: str) -> None:
        """A new wait reached (replays hand out nothing): the history's are completed at once."""
        with self.changed:
            if callback_id in self.ids:
                return
            self.ids.append(callback_id)
            feed = len(self.ids) <= self.history
            self.changed.notify_all()
        if feed:
            self.runner.send_callback_success(callback_id, b"1")

    def handler(self) -> Any:
        @durable_execution
        def loop(event: Any, context: DurableContext) -> int:
            began = time.thread_time()
            try:
                for i in range(event["waits"]):
                    callback = context.create_callback(name=f"w{i}")
                    # A replayed create_callback hands out the id it recorded: only i past the
                    # ids seen is a new wait. An index test, so a replay pays no bookkeeping of
                    # ours (a search of the id list cost ~7 ms of the CPU timed here at 1,000).
                    if i >= len(self.ids):
                        self._handed_out(callback.callback_id)
                    callback.result()
                return int(event["waits"])
            finally:
                self._add(time.thread_time() - began)

        def invocation(event: Any, lambda_context: Any) -> Any:
            with self.changed:
                self.active += 1
            began = time.thread_time()
            try:
                return loop(event, lambda_context)
            finally:
                self._add(time.thread_time() - began)
                with self.changed:
                    self.active -= 1
                    self.changed.notify_all()

        return invocation

    def _add(self, seconds: float) -> None:
        with self.changed:
            self.cpu.append(seconds)

    def settle(self, waits: int) -> None:
        """Block until ``waits`` callbacks exist and no invocation runs."""
        with self.changed:
            ok = self.changed.wait_for(
                lambda: len(self.ids) >= waits and self.active == 0, timeout=WAIT_S
            )
        if not ok or len(self.ids) != waits:
            raise RuntimeError(f"create_callback loop: {len(self.ids)} callbacks, not {waits}")


def durable_resume_cpu(history: int) -> float:
    """Median CPU seconds of the invocations that resume the loop once after ``history``
    waits (after one warm round)."""
    loop = CallbackLoop(history)
    samples: list[float] = []
    with DurableFunctionTestRunner(handler=loop.handler(), poll_interval=0.01) as runner:
        loop.runner = runner
        runner.run_async(
            input=json.dumps({"waits": 10**9}), execution_timeout=3_600,
            execution_name=f"cost-{history}",
        )  # fmt: skip
        loop.settle(history + 1)
        for i in range(ROUNDS + 1):
            with loop.changed:
                loop.cpu.clear()
            runner.send_callback_success(loop.ids[-1], json.dumps(i).encode())
            loop.settle(history + 2 + i)
            time.sleep(0.05)  # the invocation's threads finish their accounting
            if i:
                with loop.changed:
                    samples.append(sum(loop.cpu))
    return statistics.median(samples)


if __name__ == "__main__":
    for n in (3, 100):
        print(n, f"{durable_resume_cpu(n) * 1000:.2f} ms")
