"""Shared pieces of the handler tests: a small test App, a moto bench (DynamoDB table, S3
bucket, SQS FIFO wake queue, Scheduler group) with :class:`Deps` wired to it, and builders of
synthetic SQS events (API Gateway v2 events and Lambda contexts are built by
:mod:`handler_events`, re-exported here).

Everything runs inside moto's ``mock_aws`` with fake credentials: nothing reaches AWS.
Import the fixtures explicitly (``aws_fixture`` and ``bench_fixture``: pytest knows them as
``aws`` and ``bench``).

Long because: it is the one moto bench every handler test wires; splitting it further
would spread one fixture graph over several modules.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_fixtures import LockedClient, aws_client, fake_aws_environment, unique, wake_queue
from handler_events import (  # noqa: F401 (re-exported: handler tests import events from here)
    ACCOUNT,
    PRINCIPAL,
    FakeContext,
    hook_event,
    http_event,
    response_json,
    signal_event,
)
from pydantic import BaseModel

from bide import (
    Completed,
    Harness,
    ManualClock,
    RandomIds,
    SignalExpired,
    SignalFailed,
    SignalValue,
    Sleeping,
    Terminal,
    define_signal,
    define_task,
)
from bide.agent import Agent
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.app import App
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.aws.scheduler import SchedulerAlarms
from bide.aws.sqs import SqsWakeQueue
from bide.service.deps import Deps
from bide.service.http import handle_signal, handle_worker
from bide.service.observability import ObservedStore
from bide.service.webhooks import Webhook, mint_webhook
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool

ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/bide-scheduler"
WEBHOOK_BASE = "https://hooks.example.test"

# --- the test app ------------------------------------------------------------------------------


class Reply(BaseModel):
    text: str
    score: int = 0


REPLY = define_signal("test.reply", 1, Reply)


@dataclass
class Probe:
    """What the test app's tasks and tools report to the test, and how a test steers them."""

    executions: Counter[str] = field(default_factory=Counter)
    minted: dict[str, Webhook] = field(default_factory=dict)
    hmac_secret: str | None = None
    big: str = ""
    pause_next: bool = False  # the next napper run pauses before it parks
    entered: asyncio.Event | None = None
    release: asyncio.Event | None = None

    def arm_pause(self) -> None:
        """Make the next napper run wait for :attr:`release` (after setting :attr:`entered`).
        Call inside the event loop that will run the worker."""
        self.pause_next = True
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def maybe_pause(self) -> None:
        if self.pause_next and self.entered is not None and self.release is not None:
            self.pause_next = False
            self.entered.set()
            await self.release.wait()


class RoundArgs(BaseModel):
    keys: list[str] = []
    after: float | None = None  # seconds from now
    heartbeat: float | None = None


def napper(probe: Probe):
    """A task that sleeps through ``input["rounds"]``: each round sleeps on its keys and/or a
    deadline. A signal ends the task with the value; a deadline moves to the next round (or
    ends it ``expired`` after the last)."""

    def park(rt, index: int, rounds: list[dict[str, Any]]) -> Sleeping:
        spec = RoundArgs.model_validate(rounds[index])
        return Sleeping(
            checkpoint={"phase": "woke", "round": index},
            signals=tuple(REPLY.key(k) for k in spec.keys),
            until=None if spec.after is None else rt.now() + spec.after,
            heartbeat=spec.heartbeat,
        )

    async def sleep(task, rt) -> None:
        probe.executions["napper"] += 1
        await probe.maybe_pause()
        await rt.commit(park(rt, 0, task.input["rounds"]))

    async def woke(task, rt) -> None:
        probe.executions["napper"] += 1
        index = task.checkpoint["round"]
        rounds = task.input["rounds"]
        values = {}
        for key in RoundArgs.model_validate(rounds[index]).keys:
            state = await rt.read_signal(REPLY, key)
            if isinstance(state, SignalValue):
                values[key] = state.value.text
            if isinstance(state, SignalFailed):  # a failure instead of a value (issue 13)
                values[key] = f"failed: {state.type}: {state.message}"
        if not values and index + 1 < len(rounds):
            await rt.commit(park(rt, index + 1, rounds))
            return
        wake = task.wake.to_dict() if task.wake else None
        result = {"round": index, "values": values, "wake": wake}
        await rt.commit(Terminal(outcome=Completed(result=result)))

    return define_task("test.napper", 1, lambda _: "sleep", {"sleep": sleep, "woke": woke})


class HookArgs(BaseModel):
    signed: bool = False
    after: float | None = None
    heartbeat: float | None = None


class NoArgs(BaseModel):
    pass


def tools(probe: Probe) -> ToolRegistry:
    async def await_hook(args: HookArgs, api) -> Any:
        probe.executions["await_hook"] += 1
        state = await api.read_signal(REPLY, "done")
        if isinstance(state, SignalValue):
            return ToolResult.of_text(f"hook said {state.value.text}")
        if isinstance(state, SignalExpired):
            return ToolResult.of_text("nobody called the hook", is_error=True)
        if isinstance(state, SignalFailed):  # uncaught: the call ends failed with it
            raise state.error()
        secret = probe.hmac_secret if args.signed else None
        hook = await mint_webhook(api, REPLY, "done", hmac_secret=secret)
        probe.minted[api.task_id] = hook
        until = None if args.after is None else api.now() + args.after
        return Sleep(signals=[REPLY.key("done")], until=until, heartbeat=args.heartbeat)

    async def fetch_big(args: NoArgs, api) -> Any:
        state = await api.read_signal(REPLY, "go")
        if isinstance(state, SignalValue):
            return ToolResult.of_text(probe.big)
        return Sleep(signals=[REPLY.key("go")])

    async def charge(args: NoArgs, api) -> Any:
        probe.executions["charge"] += 1
        await asyncio.sleep(0.02)  # real time: a racing worker gets to run meanwhile
        return ToolResult.of_text("charged")

    return ToolRegistry(
        [
            define_tool("await_hook", "Wait for a webhook call", HookArgs, await_hook),
            define_tool("fetch_big", "Return a very large result", NoArgs, fetch_big),
            define_tool("charge", "Charge a card (not replay-safe)", NoArgs, charge),
        ]
    )


_CALL = re.compile(r"^call (\w+)(?: (.*))?$")


def scripted_agent(registry: ToolRegistry) -> Agent:
    """An agent whose model follows orders: ``call <tool> <json args>`` calls the tool, a tool
    result is summed up, anything else is echoed."""

    def respond(request: ModelRequest):
        last = request.messages[-1]
        if last.role == "user":
            found = _CALL.match(last.text.strip())
            if found:
                arguments = json.loads(found.group(2) or "{}")
                return call_tool(found.group(1), arguments, id=f"c-{len(request.messages)}")
            return reply(f"echo: {last.text}")
        result = last_tool_result(request)
        return reply(f"tool said {result[:40]} ({len(result)} chars)")

    return Agent(ScriptedProvider(respond), registry)


def make_app(probe: Probe) -> App:
    """The test app: the napper task, the test tools and a scripted agent using them."""
    registry = tools(probe)
    return App(
        tasks=[napper(probe)],
        signals=[REPLY],
        tools=registry,
        agent=scripted_agent(registry),
    )


def default_app() -> App:
    """``BIDE_APP=handler_fixtures:default_app`` for the Lambda adapter tests."""
    return make_app(Probe())


# --- the bench -----------------------------------------------------------------------------------


@dataclass
class Bench:
    """One test's AWS resources on moto, Deps wired to them and helpers to drive the worker."""

    deps: Deps
    store: DynamoDBStore
    probe: Probe
    clock: ManualClock
    ddb: Any
    sqs: Any
    scheduler: Any
    s3: Any
    table: str
    bucket: str
    queue_url: str
    queue_arn: str
    group: str
    responses: list[dict[str, Any]] = field(default_factory=list)

    # --- sessions and tasks

    def harness(self, session_id: str) -> Harness:
        return Harness(
            self.deps.store,
            session_id,
            self.deps.app.task_kinds(),
            clock=self.clock,
            ids=self.deps.ids,
            services=self.deps.harness_services(),
        )

    def start_napper(self, rounds: list[dict[str, Any]], session_id: str | None = None) -> str:
        """Create a napper task in a fresh session and wake the session; its task id."""
        sid = session_id or unique("s")
        kind = next(k for k in self.deps.app.tasks if k.name == "test.napper")

        async def create() -> str:
            harness = self.harness(sid)
            await harness.attach()
            return await harness.create_task(kind, {"rounds": rounds})

        task_id = asyncio.run(create())
        self.deps.queue.wake(sid, "test")
        return task_id

    def start_tool(self, name: str, arguments: dict[str, Any], session_id: str) -> str:
        """Create a tool call task and wake the session; its task id."""
        registry = self.deps.app.tools

        async def create() -> str:
            harness = self.harness(session_id)
            await harness.attach()
            return await harness.create_task(registry.task, registry.call(name, arguments))

        task_id = asyncio.run(create())
        self.deps.queue.wake(session_id, "test")
        return task_id

    def task(self, session_id: str, task_id: str):
        return self.store.get_task(session_id, task_id)

    def seq(self, session_id: str) -> int:
        return self.store.head(session_id)

    # --- the signal function and the requests behind it

    def post_signal(self, event: dict[str, Any]) -> tuple[int, Any]:
        """The signal function's answer to ``event`` (always JSON): its status and body."""
        response = run(handle_signal(self.deps, event, None))
        assert response["headers"]["Content-Type"] == "application/json"
        return response["statusCode"], response_json(response)

    def aws_requests(self, action: Callable[[], Any]) -> tuple[Any, list[tuple[str, Any]]]:
        """``action()``'s result and each AWS request it made (DynamoDB, SQS, Scheduler), in
        order, with its parameters."""
        made: list[tuple[str, Any]] = []

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            made.append((model.name, params))

        clients = {id(c): c for c in (self.ddb, self.sqs, self.scheduler)}
        for client in clients.values():
            client.meta.events.register("before-parameter-build.*.*", record)
        try:
            return action(), made
        finally:
            for client in clients.values():
                client.meta.events.unregister("before-parameter-build.*.*", record)

    # --- the wake queue

    def receive(self, visibility: int = 30) -> list[dict[str, Any]]:
        found = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=visibility,
            AttributeNames=["All"],
        )
        messages: list[dict[str, Any]] = found.get("Messages", [])
        return messages

    def queued(self) -> list[dict[str, Any]]:
        """The wake messages waiting in the queue (bodies), left in place."""
        seen: list[dict[str, Any]] = []
        while batch := self.receive():
            seen += batch
        for message in seen:
            self.sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        return [json.loads(m["Body"]) for m in seen]

    def sqs_event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"Records": [self.sqs_record(m) for m in messages]}

    def sqs_record(self, message: dict[str, Any]) -> dict[str, Any]:
        attributes = message.get("Attributes", {})
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": {
                "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
                "MessageGroupId": attributes.get("MessageGroupId", ""),
                "MessageDeduplicationId": attributes.get("MessageDeduplicationId", ""),
                "SentTimestamp": attributes.get("SentTimestamp", "0"),
            },
            "messageAttributes": {},
            "md5OfBody": hashlib.md5(message["Body"].encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": "us-east-1",
        }

    async def drain_async(self, max_batches: int = 50) -> int:
        """Be Lambda's SQS poller: hand batches to the worker until the queue is empty;
        delete what succeeded, make failures visible again. The number of batches."""
        for batches in range(max_batches):
            messages = self.receive()
            if not messages:
                return batches
            response = await handle_worker(self.deps, self.sqs_event(messages), FakeContext())
            self.responses.append(response)
            failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            for message in messages:
                handle = message["ReceiptHandle"]
                if message["MessageId"] in failed:
                    self.sqs.change_message_visibility(
                        QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
                    )
                else:
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=handle)
        raise AssertionError(f"the queue did not drain in {max_batches} batches")

    def drain(self, max_batches: int = 50) -> int:
        return asyncio.run(self.drain_async(max_batches))

    def drain_in_thread(self) -> int:
        """:meth:`drain` from code already inside an event loop."""
        out: list[int] = []
        errors: list[BaseException] = []

        def target() -> None:
            try:
                out.append(self.drain())
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return out[0]

    # --- alarms

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule in the bench's group, in full."""
        listed = self.scheduler.list_schedules(GroupName=self.group)["Schedules"]
        return [self.scheduler.get_schedule(Name=s["Name"], GroupName=self.group) for s in listed]

    def fire_alarm(self, session_id: str) -> None:
        """Be EventBridge Scheduler at the schedule's time: send its target Input to the queue
        with its message group, then delete the one-time schedule (ActionAfterCompletion)."""
        from bide.aws.scheduler import schedule_name

        name = schedule_name(session_id)
        schedule = self.scheduler.get_schedule(Name=name, GroupName=self.group)
        target = schedule["Target"]
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=target["Input"],
            MessageGroupId=target["SqsParameters"]["MessageGroupId"],
            MessageDeduplicationId=unique("fire"),
        )
        self.scheduler.delete_schedule(Name=name, GroupName=self.group)


@pytest.fixture(name="aws", scope="module")
def aws_fixture() -> Iterator[dict[str, Any]]:
    """One moto account per test module (each test makes its own resources)."""
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        lock = threading.Lock()
        # Serialized: moto's transactions are not thread-safe (see LockedClient).
        yield {
            "ddb": LockedClient(aws_client("dynamodb"), lock),
            "s3": LockedClient(aws_client("s3"), lock),
            "sqs": LockedClient(aws_client("sqs"), lock),
            "scheduler": LockedClient(aws_client("scheduler"), lock),
        }


def make_bench(aws: dict[str, Any]) -> Bench:
    ddb, s3, sqs, scheduler = aws["ddb"], aws["s3"], aws["sqs"], aws["scheduler"]
    table, bucket, group = unique("bide"), unique("bide-offload"), unique("bide-alarms")
    create_table(ddb, table)
    s3.create_bucket(Bucket=bucket)
    queue_url, queue_arn = wake_queue(sqs)
    scheduler.create_schedule_group(Name=group)
    probe = Probe()
    clock = ManualClock()
    store = DynamoDBStore(table, ddb, bucket=bucket, s3_client=s3, base_delay=0.002, max_delay=0.05)
    deps = Deps(
        store=ObservedStore(store),
        alarms=SchedulerAlarms(scheduler, group=group, queue_arn=queue_arn, role_arn=ROLE_ARN),
        queue=SqsWakeQueue(sqs, queue_url),
        app=make_app(probe),
        clock=clock,
        ids=RandomIds(),  # webhook secrets come from the id source: they must be random
        webhook_base_url=WEBHOOK_BASE,
    )
    return Bench(
        deps, store, probe, clock, ddb, sqs, scheduler, s3, table, bucket, queue_url, queue_arn,
        group,
    )  # fmt: skip


@pytest.fixture(name="bench")
def bench_fixture(aws: dict[str, Any]) -> Bench:
    return make_bench(aws)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


__all__ = [
    "REPLY",
    "WEBHOOK_BASE",
    "Bench",
    "FakeContext",
    "Probe",
    "aws_fixture",
    "bench_fixture",
    "default_app",
    "hook_event",
    "http_event",
    "make_app",
    "make_bench",
    "response_json",
    "run",
    "signal_event",
]
