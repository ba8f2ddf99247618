"""One workflow body's signal -> next wait, counted on moto (``bench_requests_history.py``).

The body is ``bench_durable_sdk.py``'s (``_common.wait_in_body_tool``): a workflow tool whose
body awaits ``ctx.wait_for(REPLY, f"k{n}")`` for n = 0, 1, 2, ... for ever (one operation per
wait, two memos per operation: its record and its resolution). History is built as the task
loop's is: the same app runs N rounds on an in-memory SQLite store, uncounted, and the tool
task's record and its sealed memo pages are then committed as they stand into the DynamoDB
store on moto.
A round is the signal function's ``deliver`` and the worker's run of the wake, as for the
task loop.

"warm" is a worker process that has read the task's sealed pages before (the process-wide
page cache holds them); "cold" clears that cache before each round's worker run, as a new
worker process would find it. "new worker process" also forgets that the process ran the
session whole (``bide.service.whole_runs``): a real new process's first run of a session is a
whole pass (its load a ``Query``, the pages listed by the replay), kept apart so the cold
row's targeted pass is not mistaken for a new process's first run.
"""

from __future__ import annotations

from dataclasses import replace

from _common import wait_in_body_tool
from bench_aws_requests import APP, REPLY, Looper, Napper, NoArgs, Stack, Tally

from bide import Harness, RandomIds, SQLiteStore, TaskRecord
from bide.app import App
from bide.engine import memo_pages
from bide.service import signals as signal_service
from bide.service import whole_runs
from bide.tools import ToolRegistry

WARM = "workflow signal -> next wait"
COLD = "workflow, cold worker"
NEW = "workflow, new worker process"


FLOW_TOOLS = ToolRegistry(
    [*APP.tools.tools, wait_in_body_tool(REPLY, NoArgs, "Wait for replies in a body")]
)
FLOW_APP = App(tasks=[Looper, Napper], signals=[REPLY], tools=FLOW_TOOLS)


def use_flow_app(stack: Stack) -> None:
    """Give the stack's handlers the app that also knows the workflow tool."""
    if stack.deps.app is not FLOW_APP:
        stack.deps = replace(stack.deps, app=FLOW_APP)


async def built_body(stack: Stack, session_id: str, n: int) -> str:
    """A workflow tool call whose body has completed ``n`` waits (on SQLite, uncounted),
    copied with its sealed pages into the DynamoDB store. The task's id."""
    sqlite = SQLiteStore()
    harness = Harness(sqlite, session_id, FLOW_APP.task_kinds(), clock=stack.clock, ids=RandomIds())
    await harness.attach()
    task_id = await harness.create_task(FLOW_TOOLS.task, FLOW_TOOLS.call("wait_in_body", {}))
    await harness.run_until_parked()
    for i in range(n):
        await harness.deliver(task_id, REPLY, f"k{i}", {"text": "x"})
        await harness.run_until_parked()
    record = sqlite.get_task(session_id, task_id)
    assert isinstance(record, TaskRecord) and record.state.status == "sleeping", record
    pages = sqlite.list_docs(session_id, memo_pages.task_prefix(task_id))
    assert len(pages) == record.memo_pages, (len(pages), record.memo_pages)
    stack.deps.store.commit(session_id, 0, [record], pages)
    sqlite.close()
    return task_id


async def measure_body(stack: Stack, n: int, rounds: int) -> dict[str, list[Tally]]:
    """``rounds`` counted rounds, warm, cold then as a new worker process, of a body after
    ``n`` waits of history."""
    use_flow_app(stack)
    out: dict[str, list[Tally]] = {WARM: [], COLD: [], NEW: []}
    session = f"hist-flow-{n}"
    task_id = await built_body(stack, session, n)
    await _round(stack, session, task_id, n, WARM)  # uncounted: the worker reads its pages
    _check_parked(stack, session, task_id, n + 1)
    for i in range(n + 1, n + 1 + 3 * rounds):
        scenario = (WARM, COLD, NEW)[(i - n - 1) // rounds]
        with stack.meter.counting() as tally:
            await _round(stack, session, task_id, i, scenario)
        _check_parked(stack, session, task_id, i + 1)
        out[scenario].append(tally)
    return out


async def _round(stack: Stack, session: str, task_id: str, i: int, scenario: str) -> None:
    """Signal ``k<i>`` (the signal function), then the worker runs the wake."""
    stack.invoked("signal")
    decision = signal_service.deliver(
        stack.deps, session, task_id, REPLY.name, f"k{i}", {"text": "x"}
    )
    assert decision.result.value == "delivered", decision
    if scenario != WARM:
        memo_pages.PAGES.clear()  # no page read before, as a new worker process
    if scenario == NEW:
        # Nor any session run whole: a new process's first run of a session is a whole pass.
        whole_runs._runs.clear()
    await stack.worker()


def _check_parked(stack: Stack, session: str, task_id: str, key: int) -> None:
    """The body is parked on ``k<key>`` (read outside the counted round)."""
    record = stack.deps.store.get_task(session, task_id)
    assert record is not None and record.state.status == "sleeping", record
    parked = record.state.checkpoint["checkpoint"]  # the body waits on the next key
    assert parked["name"] == f"{REPLY.name}/k{key}", parked
