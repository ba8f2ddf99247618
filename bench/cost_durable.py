"""The durable-functions side of ``bench_cost.py``: the CPU time of one resume invocation of
``bench_durable_sdk``'s callback loop after N waits of history, on the SDK's local runner.

Measured as Bide's handlers are: ``time.thread_time`` in the threads that run the invocation,
the invocation's own thread (the SDK's wrapper: decoding the operations it is handed) plus the
SDK's handler thread while the user function runs (the replay of every earlier wait and the new
one). The SDK's checkpoint thread and the emulated backend are not counted, so this is a lower
bound of what the function would be billed for.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner
from bench_durable_sdk import SdkLoop

ROUNDS = 3


class TimedLoop(SdkLoop):
    """``bench_durable_sdk``'s loop, with each invocation's CPU time recorded."""

    def __init__(self, feed_until: int) -> None:
        super().__init__(feed_until=feed_until)
        self.cpu: list[float] = []
        self._lock = threading.Lock()

    def _add(self, seconds: float) -> None:
        with self._lock:
            self.cpu.append(seconds)

    def handler(self) -> Callable[[Any, Any], Any]:
        @durable_execution
        def loop(event: Any, context: DurableContext) -> int:
            began = time.thread_time()
            try:
                for i in range(event["waits"]):
                    context.wait_for_callback(self.submitter, name=f"w{i}")
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


def durable_resume_cpu(history: int) -> float:
    """Median CPU seconds of the invocations that resume the loop once after ``history``
    waits (one warm round first)."""
    loop = TimedLoop(feed_until=history)
    runner = DurableFunctionTestRunner(handler=loop.handler(), poll_interval=0.01)
    loop.runner = runner
    samples: list[float] = []
    try:
        runner.run_async(
            input=json.dumps({"waits": 10**9}), execution_timeout=3_600,
            execution_name=f"cost-{history}",
        )  # fmt: skip
        loop.settle(history + 1)
        for i in range(ROUNDS + 1):
            time.sleep(0.05)  # let the last invocation's threads finish their accounting
            loop.cpu.clear()
            runner.send_callback_success(loop.ids[-1], json.dumps(i).encode())
            loop.settle(history + 2 + i)
            time.sleep(0.05)
            if i:
                samples.append(sum(loop.cpu))
    finally:
        runner.close()
    return statistics.median(samples)


if __name__ == "__main__":
    for n in (3, 100):
        print(n, f"{durable_resume_cpu(n) * 1000:.2f} ms")
