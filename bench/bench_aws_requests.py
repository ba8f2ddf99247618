"""AWS requests per signal -> result cycle and per timed wake, counted on moto.

The host services run as the Lambdas run them (DynamoDBStore behind ObservedStore, Scheduler
alarms, the SQS FIFO wake queue), inside moto's ``mock_aws`` with fake credentials: nothing
leaves the process. Every boto3 API call is counted with a botocore event hook
(``before-parameter-build``), by who makes it:

  bide       the signal function (``service.signals.deliver`` / ``deliver_webhook``) and the
             worker (``service.worker_batch.handle_worker``, the worker function's entry
             point, given each batch as Lambda's poller hands it: load, run until parked,
             act on wake());
  poller     what Lambda's SQS event source mapping does on our behalf for each batch of
             wakes it hands to the worker: one ReceiveMessage that returned messages and one
             DeleteMessageBatch (its idle long-polls are a fixed cost per queue, not per wake,
             and are not counted);
  scheduler  EventBridge Scheduler firing a one-time schedule: the invocation itself (not an
             API call; counted as one) and the SendMessage it makes to the wake queue;
  lambda     function invocations (api, signal, worker): not API calls, counted for pricing.

Scenarios (each counted alone, from a session parked as the scenario needs):

  tool start        a tool call is created (API-side load + commit + wake), the worker runs it:
                    it mints a capability webhook and parks on its signal;
  webhook -> result POST /hooks/{token} (deliver_webhook) then the worker: the tool reads the
                    value and returns its result (the call ends);
  signal -> result  the same by task id (the IAM route: service.signals.deliver);
  signal -> wait    steady state of a long-lived task: a signal wakes it, it reads the value and
                    sleeps on the next key (one signal-resumed wait);
  timed -> re-park  the session's alarm fires, the worker wakes a task whose deadline passed,
                    it sleeps again with a new deadline (the alarm is armed again);
  timed -> end      the same, but the task ends (the alarm is removed).

DynamoDB capacity is estimated from the items read and written under the documented on-demand
rules (transactional write: 2 WRU per KB of each item; strongly consistent read: 1 RRU per
4 KB; transactional read: 2 RRU per 4 KB of each item; a Query is rounded over all items
returned). Writes to the sparse local index are not
included. ``bench_cost.py`` measures cost on the handlers themselves, index writes included.

Run from the repository root:  PYTHONPATH=shared python bench/bench_aws_requests.py

Long because: each scenario's setup, counting and printed row sit together so a
reader can check what is and is not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from _common import boto3_client, fake_aws, sqs_record, timed_run
from pydantic import BaseModel

from bide import (
    Completed,
    Harness,
    ManualClock,
    RandomIds,
    SignalValue,
    Sleeping,
    Terminal,
    define_signal,
    define_task,
)
from bide.app import App
from bide.aws.dynamodb import PARTITION_KEY, SORT_KEY, DynamoDBStore, create_table
from bide.aws.scheduler import SchedulerAlarms, schedule_name
from bide.aws.sqs import SqsWakeQueue
from bide.service import observability as obs
from bide.service import signals as signal_service
from bide.service.deps import Deps
from bide.service.observability import ObservedStore
from bide.service.webhooks import Webhook, mint_webhook, parse_token
from bide.service.worker_batch import handle_worker
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool

ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/bide-scheduler"
WEBHOOK_BASE = "https://hooks.example.test"
SCENARIOS = (
    "tool start",
    "webhook -> result",
    "signal -> result",
    "signal -> wait",
    "timed -> re-park",
    "timed -> end",
)
REPEATS = 3  # each scenario runs this many times; the counts must agree (they are averaged)

# --- the app ----------------------------------------------------------------------------------


class Reply(BaseModel):
    text: str


REPLY = define_signal("bench.reply", 1, Reply)


class NoArgs(BaseModel):
    pass


async def await_reply(args: NoArgs, api: Any) -> Any:
    """Mint a webhook and park on it; return what it delivers."""
    state = await api.read_signal(REPLY, "done")
    if isinstance(state, SignalValue):
        return ToolResult.of_text(f"the hook said {state.value.text}")
    hook = await mint_webhook(api, REPLY, "done")
    MINTED[api.task_id] = hook
    return Sleep(signals=[REPLY.key("done")])


MINTED: dict[str, Webhook] = {}
TOOLS = ToolRegistry([define_tool("await_reply", "Wait for a webhook", NoArgs, await_reply)])


async def loop_wait(task: Any, rt: Any) -> None:
    """Sleep on signal key k<n>; on each wake read it and sleep on the next one."""
    n = task.checkpoint["n"]
    if task.wake is not None:
        await rt.read_signal(REPLY, f"k{n - 1}")
    await rt.commit(
        Sleeping(checkpoint={"phase": "wait", "n": n + 1}, signals=(REPLY.key(f"k{n}"),))
    )


Looper = define_task("bench.looper", 1, lambda _: {"phase": "wait", "n": 0}, {"wait": loop_wait})


async def nap(task: Any, rt: Any) -> None:
    """Sleep a minute, ``input["naps"]`` times, then end."""
    n = task.checkpoint["n"]
    if n >= task.input["naps"]:
        await rt.commit(Terminal(outcome=Completed(result=n)))
        return
    await rt.commit(Sleeping(checkpoint={"phase": "nap", "n": n + 1}, until=rt.now() + 60))


Napper = define_task("bench.napper", 1, lambda _: {"phase": "nap", "n": 0}, {"nap": nap})
APP = App(tasks=[Looper, Napper], signals=[REPLY], tools=TOOLS)

# --- counting ---------------------------------------------------------------------------------

Key = tuple[str, str]  # (origin, "service:Operation")
# Writes outside a transaction: 1 WRU per KB of the larger of the item before and after
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
_PLAIN_WRITES = ("PutItem", "UpdateItem", "DeleteItem")


@dataclass
class Tally:
    """Requests and DynamoDB capacity units of one scenario run."""

    requests: Counter[Key] = field(default_factory=Counter)
    wakes: Counter[str] = field(default_factory=Counter)  # wake messages sent, by reason
    wru: float = 0.0
    rru: float = 0.0


class Meter:
    """Counts the API calls of hooked clients into the current :class:`Tally` (if any)."""

    def __init__(self, inspector: Any) -> None:
        self.inspector = inspector  # an unhooked DynamoDB client: reads item sizes after writes
        self.tally: Tally | None = None
        self._before = 0  # a plain write's item size before it (the write in flight)
        self._last_params: dict[str, Any] = {}

    def hook(self, client: Any, origin: str) -> Any:
        service = client.meta.service_model.service_name

        def before(params: dict[str, Any], model: Any, **_: Any) -> None:
            if self.tally is None:
                return
            self._last_params = params
            self.tally.requests[(origin, f"{service}:{model.name}")] += 1
            if model.name == "SendMessage":
                self.tally.wakes[f"{origin}:{json.loads(params['MessageBody'])['reason']}"] += 1
            if model.name == "TransactWriteItems":
                self.tally.wru += sum(self._written_units(a) for a in params["TransactItems"])
            if model.name in _PLAIN_WRITES:  # the item before the write, read uncounted
                self._before = self._stored_bytes(params)

        def after(parsed: dict[str, Any], model: Any, **_: Any) -> None:
            if self.tally is None or service != "dynamodb":
                return
            if model.name in _PLAIN_WRITES:  # 1 WRU per KB of the larger image, not doubled
                size = max(self._before, self._stored_bytes(self._last_params), 1)
                self.tally.wru += math.ceil(size / 1024)
            if model.name == "GetItem":
                self.tally.rru += _read_units(item_bytes(parsed.get("Item") or {}))
            elif model.name == "Query":
                self.tally.rru += _read_units(sum(item_bytes(i) for i in parsed.get("Items", [])))
            elif model.name == "TransactGetItems":  # twice a plain read, per item
                for response in parsed.get("Responses", []):
                    self.tally.rru += 2 * _read_units(item_bytes(response.get("Item") or {}))

        client.meta.events.register("before-parameter-build.*.*", before)
        client.meta.events.register("after-call.*.*", after)
        return client

    def _stored_bytes(self, params: dict[str, Any]) -> int:
        """The size of the item a plain write names, as stored now (0 when absent)."""
        key = params.get("Key") or {
            k: v for k, v in params["Item"].items() if k in (PARTITION_KEY, SORT_KEY)
        }
        found = self.inspector.get_item(TableName=params["TableName"], Key=key)
        return item_bytes(found.get("Item") or {})

    def _written_units(self, action: dict[str, Any]) -> float:
        """2 WRU per KB (rounded up) of the item as written; 2 for a condition check."""
        ((kind, body),) = action.items()
        if kind == "Put":
            size = item_bytes(body["Item"])
        else:
            size = item_bytes(body["Key"])
            if kind == "Update":  # the item's size after the update: read it back, uncounted
                found = self.inspector.get_item(TableName=body["TableName"], Key=body["Key"])
                size = max(size, item_bytes(found.get("Item") or {}))
        return 2.0 * max(1, math.ceil(size / 1024))

    @contextlib.contextmanager
    def counting(self) -> Iterator[Tally]:
        self.tally = tally = Tally()
        try:
            yield tally
        finally:
            self.tally = None


def _read_units(size: int) -> float:
    return float(max(1, math.ceil(size / 4096)))  # strongly consistent: 1 RRU per 4 KB


def item_bytes(item: dict[str, Any]) -> int:
    """A DynamoDB item's size as the service counts it: attribute names plus values."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: dict[str, Any]) -> int:
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return len(str(v).lstrip("-").replace(".", "")) // 2 + 2
    if kind == "B":
        return len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_bytes(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + _value_bytes(x) for x in v)
    return sum(len(str(x)) for x in v)  # sets


# --- the bench --------------------------------------------------------------------------------


@dataclass
class Stack:
    deps: Deps
    clock: ManualClock
    meter: Meter
    sqs: Any  # the poller's (deletes) and the Scheduler's clients (hooked as such)
    scheduler_sqs: Any
    poll: Any  # the poller's receives (counted by hand: only those that find messages)
    scheduler: Any
    queue_url: str
    group: str
    ddb: Any  # the store's DynamoDB client (hooked as bide's)

    def harness(self, session_id: str) -> Harness:
        return Harness(
            self.deps.store,
            session_id,
            self.deps.app.task_kinds(),
            clock=self.clock,
            ids=self.deps.ids,
            services=self.deps.harness_services(),
        )

    async def create(self, session_id: str, kind: Any, input: Any) -> str:
        """What the api function does to start work: attach, create, wake the session."""
        self.invoked("api")
        h = self.harness(session_id)
        await h.attach()
        task_id = await h.create_task(kind, input)
        self.deps.queue.wake(session_id, "api")
        return task_id

    def invoked(self, function: str) -> None:
        """Count one Lambda invocation of ``function`` (not an API call: a billed request)."""
        if self.meter.tally is not None:
            self.meter.tally.requests[("lambda", f"lambda:{function} invocation")] += 1

    async def worker(self) -> None:
        """Be Lambda's SQS poller and the worker: take every queued wake, run its session. A
        batch is one worker invocation. Receives that find nothing are the poller's idle cost,
        not a wake's: only receives that return messages are counted."""
        while True:
            found = self.poll.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
            )
            messages = found.get("Messages", [])
            if not messages:
                return
            if self.meter.tally is not None:
                self.meter.tally.requests[("poller", "sqs:ReceiveMessage")] += 1
            self.invoked("worker")
            # The worker function's own entry point, given the batch as the poller hands it.
            batch = {"Records": [sqs_record(m) for m in messages]}
            with contextlib.redirect_stdout(io.StringIO()):  # its log lines and EMF metrics
                answer = await handle_worker(self.deps, batch, None)
            if answer["batchItemFailures"]:
                raise RuntimeError(f"the worker failed wakes: {answer}")
            # The event source mapping deletes what the function handled, in one batch call.
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ]
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)

    def fire_alarm(self, session_id: str) -> None:
        """Be EventBridge Scheduler at the schedule's time: send its input to the queue; the
        one-time schedule deletes itself (ActionAfterCompletion DELETE)."""
        name = schedule_name(session_id)
        schedule = self.scheduler.get_schedule(Name=name, GroupName=self.group)
        if self.meter.tally is not None:
            self.meter.tally.requests[("scheduler", "scheduler:Invocation")] += 1
        target = schedule["Target"]
        self.scheduler_sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=target["Input"],
            MessageGroupId=target["SqsParameters"]["MessageGroupId"],
            MessageDeduplicationId=f"fire-{time.monotonic_ns()}",
        )
        self.scheduler.delete_schedule(Name=name, GroupName=self.group)


def build_stack() -> Stack:
    obs.logger.setLevel("ERROR")  # the worker's info lines are not the bench's output
    inspector = boto3_client("dynamodb")
    meter = Meter(inspector)
    table, bucket, group = "bide-bench", "bide-bench-offload", "bide-bench-alarms"
    create_table(inspector, table)
    boto3_client("s3").create_bucket(Bucket=bucket)
    setup_sqs = boto3_client("sqs")
    queue_url = setup_sqs.create_queue(
        QueueName="bide-bench-wakes.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]
    queue_arn = setup_sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    unhooked_scheduler = boto3_client("scheduler")
    unhooked_scheduler.create_schedule_group(Name=group)
    clock = ManualClock()
    ddb = meter.hook(boto3_client("dynamodb"), "bide")
    store = DynamoDBStore(
        table,
        ddb,
        bucket=bucket,
        s3_client=meter.hook(boto3_client("s3"), "bide"),
    )
    deps = Deps(
        store=ObservedStore(store),
        alarms=SchedulerAlarms(
            meter.hook(boto3_client("scheduler"), "bide"),
            group=group,
            queue_arn=queue_arn,
            role_arn=ROLE_ARN,
        ),
        queue=SqsWakeQueue(meter.hook(boto3_client("sqs"), "bide"), queue_url),
        app=APP,
        clock=clock,
        ids=RandomIds(),  # webhook secrets come from the id source: they must be random
        webhook_base_url=WEBHOOK_BASE,
    )
    return Stack(
        deps,
        clock,
        meter,
        meter.hook(boto3_client("sqs"), "poller"),
        meter.hook(boto3_client("sqs"), "scheduler"),
        boto3_client("sqs"),
        unhooked_scheduler,
        queue_url,
        group,
        ddb,
    )


# --- scenarios --------------------------------------------------------------------------------


async def run_scenarios(stack: Stack, run: int) -> dict[str, Tally]:
    out: dict[str, Tally] = {}
    meter = stack.meter

    # A tool call that mints a webhook and parks; its webhook; the same by task id.
    hooked, by_id = f"hook-{run}", f"byid-{run}"
    with meter.counting() as out["tool start"]:
        call = await stack.create(hooked, TOOLS.task, TOOLS.call("await_reply", {}))
        await stack.worker()
    other = await stack.create(by_id, TOOLS.task, TOOLS.call("await_reply", {}))
    await stack.worker()

    with meter.counting() as out["webhook -> result"]:
        token = MINTED[call].url.rsplit("/", 1)[1]
        assert parse_token(token)[0] == hooked
        body = json.dumps({"text": "hi"}).encode()
        headers = {"content-type": "application/json"}
        stack.invoked("signal")
        decision, _ = signal_service.deliver_webhook(stack.deps, token, headers, body)
        await stack.worker()
    assert decision.result.value == "delivered", decision
    assert stack.deps.store.get_task(hooked, call).state.status == "terminal"  # type: ignore[union-attr]

    with meter.counting() as out["signal -> result"]:
        stack.invoked("signal")
        signal_service.deliver(stack.deps, by_id, other, REPLY.name, "done", {"text": "hi"})
        await stack.worker()
    assert stack.deps.store.get_task(by_id, other).state.status == "terminal"  # type: ignore[union-attr]

    # One long-lived task: signal -> wake -> sleep on the next key (after a few rounds).
    looping = f"loop-{run}"
    looper = await stack.create(looping, Looper, None)
    await stack.worker()
    for n in range(3):
        with meter.counting() as out["signal -> wait"]:  # the last round is the one kept
            stack.invoked("signal")
            signal_service.deliver(stack.deps, looping, looper, REPLY.name, f"k{n}", {"text": "x"})
            await stack.worker()
    record = stack.deps.store.get_task(looping, looper)
    assert record is not None and record.state.status == "sleeping", record

    # A task that naps twice: the first alarm re-parks it, the second ends it.
    napping = f"nap-{run}"
    napper = await stack.create(napping, Napper, {"naps": 2})
    await stack.worker()
    for scenario in ("timed -> re-park", "timed -> end"):
        stack.clock.advance(61)
        with meter.counting() as out[scenario]:
            stack.fire_alarm(napping)
            await stack.worker()
    record = stack.deps.store.get_task(napping, napper)
    assert record is not None and record.state.status == "terminal", record
    return out


def measure_requests() -> dict[str, Tally]:
    """Requests (and DynamoDB capacity units) per scenario."""
    runs: list[dict[str, Tally]] = []
    with fake_aws():
        stack = build_stack()
        for run in range(REPEATS):
            runs.append(asyncio.run(run_scenarios(stack, run)))
    result: dict[str, Tally] = {}
    for scenario in SCENARIOS:
        tallies = [r[scenario] for r in runs]
        if any(t.requests != tallies[0].requests for t in tallies):
            raise RuntimeError(f"{scenario}: request counts differ between runs: {tallies}")
        result[scenario] = Tally(
            requests=tallies[0].requests,
            wakes=tallies[0].wakes,
            wru=sum(t.wru for t in tallies) / len(tallies),
            rru=sum(t.rru for t in tallies) / len(tallies),
        )
    return result


def print_table(result: dict[str, Tally]) -> None:
    keys = sorted({k for t in result.values() for k in t.requests})
    width = max(len(f"{o} {op}") for o, op in keys) + 2
    heads = ["start", "hook>res", "sig>res", "sig>wait", "time>park", "time>end"]
    print("    " + " " * width + "".join(f"{h:>10}" for h in heads))
    for origin, op in keys:
        cells = "".join(f"{result[s].requests[(origin, op)]:>10}" for s in SCENARIOS)
        print(f"    {f'{origin} {op}':<{width}}" + cells)
    rows = {
        "total (requests + invocations)": [sum(result[s].requests.values()) for s in SCENARIOS],
        "  made by bide": [
            sum(n for (o, _), n in result[s].requests.items() if o == "bide") for s in SCENARIOS
        ],
    }
    for label, values in rows.items():
        print(f"    {label:<{width}}" + "".join(f"{v:>10}" for v in values))
    for label, attr in (("DynamoDB WRU (est.)", "wru"), ("DynamoDB RRU (est.)", "rru")):
        values = [getattr(result[s], attr) for s in SCENARIOS]
        print(f"    {label:<{width}}" + "".join(f"{v:>10.1f}" for v in values))
    print()
    print("    wake messages sent (sender:reason):")
    for scenario in SCENARIOS:
        wakes = ", ".join(f"{k} x{n}" for k, n in sorted(result[scenario].wakes.items()))
        print(f"      {scenario:<18} {wakes or '-'}")


def main() -> None:
    print("AWS requests per scenario on moto (botocore before-parameter-build hooks).")
    print("Columns: tool start (creates a call that mints a webhook and parks), webhook ->")
    print("result, signal (by task id) -> result, signal -> next wait (long-lived task), timed")
    print("wake -> re-park, timed wake -> end. Rows: who made the request and which.")
    result = measure_requests()
    print()
    print_table(result)
    print()
    print(f"    Each scenario ran {REPEATS} times with identical counts; capacity units are")
    print("    estimated from item sizes (writes to the sparse live index not included).")


if __name__ == "__main__":
    with timed_run():
        main()
