"""Cost per million signal-resumed waits, all in and measured, at 3, 100 and 1,000 waits of
history; against Lambda durable functions' ``create_callback`` priced the same way.

The real Lambda entry points run on moto (``mock_aws``, fake credentials, nothing leaves the
process), configured from their environment as deployed (``BIDE_APP=cost_app:APP``):

  API Gateway event -> ``bide.handlers.signal.handler``, by the webhook route
  (``POST /hooks/{token}``; the task mints a fresh webhook per wait, as ``create_callback``
  mints a callback id) or by the IAM route (``POST /sessions/.../signals/{signal}/{key}``,
  the caller owning the session); then Lambda's SQS poller is played (one ReceiveMessage
  that finds the wake, one DeleteMessageBatch) and the batch goes to
  ``bide.handlers.worker.handler``, which reads the value and sleeps on the next key.

Counted per round (``cost_meter``: botocore hooks on the boto3 session the handlers use):
every AWS request by service and operation; DynamoDB request units from the items' sizes
under AWS's rules, the local index's writes included; SQS requests per 64 KB chunk; S3 and
Scheduler requests; Lambda invocations and duration from the handlers' own CPU time
(``time.thread_time`` around each handler call, less the CPU moto spends serving it and the
metering), scaled to the function's CPU share at the stack's memory size, billed per 1 ms;
API Gateway requests; CloudWatch Logs bytes: the lines the handlers write (JSON logs at
INFO, the stack's level; EMF metrics), Lambda's own records as the stack's logging config sends
them (``bide.cdk.functions.LOGGING_CONFIG``: none for a successful invocation at system log
level WARN) and the stage's access log line.

History is built uncounted on SQLite with the same app and copied into DynamoDB; a warm round
(cold start, webhook key read) precedes ROUNDS counted rounds, whose request counts must
agree; CPU is their median. Durable functions: a ``create_callback`` loop on the SDK's local
runner after the same history (``cost_durable``); its resume invocation's CPU is measured the
same way.

Run from the repository root:  PYTHONPATH=shared python bench/bench_cost.py
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

import boto3
import cost_model as cm
from _common import REGION, fake_aws, sqs_record, timed_run
from bench_aws_requests import REPLY
from cost_app import APP, HOOKS, HookLooper, Looper
from cost_durable import durable_resume_cpu
from cost_meter import Meter, Round
from cost_report import print_report

from bide import Harness, RandomIds, SQLiteStore, TaskRecord
from bide import constants as c
from bide.aws.dynamodb import DynamoDBStore, create_table
from bide.engine.store.base import Doc
from bide.service.owners import OWNER_KEY

HISTORY = tuple(int(x) for x in os.environ.get("COST_HISTORY", "3,100,1000").split(","))
ROUTES = ("webhook", "iam")
# The extra, labelled column: a busy queue, BUSY waits of BUSY sessions per poll (the event
# source mapping's largest FIFO batch), at the smallest history.
BUSY = 10
BUSY_HISTORY = HISTORY[0]
ROUNDS = 3
ACCOUNT = "123456789012"
CALLER = f"arn:aws:iam::{ACCOUNT}:user/signaller"
TABLE, BUCKET, GROUP, SECRET = "bide-cost", "bide-cost-offload", "bide-cost-alarms", "bide-key"
MEMORY = cm.stack_memory_mb()
ACCESS_LOG = cm.access_log_format()
LOGGING = cm.lambda_logging()


class Context:
    """The parts of a Lambda context the handlers and their log lines read."""

    def __init__(self, function: str) -> None:
        self.function_name = f"bide-{function}"
        self.memory_limit_in_mb = MEMORY[function]
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:bide-{function}"
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


class Deployment:
    """The stack's resources on moto and the handlers configured against them."""

    def __init__(self) -> None:
        setup = boto3.Session(region_name=REGION)  # the bench's own, unmetered clients
        self.ddb = setup.client("dynamodb")
        create_table(self.ddb, TABLE)
        setup.client("s3").create_bucket(Bucket=BUCKET)
        self.sqs = setup.client("sqs")
        self.queue_url = self.sqs.create_queue(
            QueueName="bide-cost-wakes.fifo",
            Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"},
        )["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        setup.client("scheduler").create_schedule_group(Name=GROUP)
        key = json.dumps({"current": "k" * 64, "previous": []})
        setup.client("secretsmanager").create_secret(Name=SECRET, SecretString=key)
        self.store = DynamoDBStore(TABLE, self.ddb, bucket=BUCKET, s3_client=setup.client("s3"))
        os.environ.update(
            {
                c.ENV_APP: "cost_app:APP",
                c.ENV_TABLE: TABLE,
                c.ENV_BUCKET: BUCKET,
                c.ENV_QUEUE_URL: self.queue_url,
                c.ENV_QUEUE_ARN: arn["Attributes"]["QueueArn"],
                c.ENV_SCHEDULE_GROUP: GROUP,
                c.ENV_SCHEDULER_ROLE_ARN: f"arn:aws:iam::{ACCOUNT}:role/bide-scheduler",
                c.ENV_WEBHOOK_BASE_URL: "https://hooks.example.test",
                c.ENV_WEBHOOK_KEY_SECRET: SECRET,
            }
        )
        # The handlers' clients come from boto3's default session: meter that one.
        boto3.setup_default_session(region_name=REGION)
        self.meter = Meter(self.ddb)
        self.meter.install(boto3.DEFAULT_SESSION.events)  # type: ignore[union-attr]
        from bide.handlers import signal, worker
        from bide.service import observability as obs

        self.signal, self.worker, self.obs = signal.handler, worker.handler, obs
        obs.logger.setLevel("INFO")  # the stack sets no level: the services' default

    def invoke(self, function: str, handler: Any, event: dict[str, Any], r: Round | None) -> Any:
        """Run one invocation: its CPU time (less moto's and the meter's) and its log bytes."""
        out = io.StringIO()
        stream = self.obs.log_handler
        previous = stream.setStream(out)
        context = Context(function)
        overhead = self.meter.overhead_s
        try:
            with contextlib.redirect_stdout(out):  # EMF metrics are printed
                began = time.process_time()  # the routes run in a worker thread
                answer = handler(event, context)
                cpu = time.process_time() - began - (self.meter.overhead_s - overhead)
        finally:
            stream.setStream(previous)
        self.last_log = out.getvalue()
        if r is not None:
            r.requests[f"lambda:{function}"] += 1
            r.cpu_s[function] = r.cpu_s.get(function, 0.0) + cpu
            ms = cm.billed_ms(cpu, MEMORY[function])
            # Lambda's own records, as the stack's logging config sends them (none at WARN).
            platform = cm.platform_log(LOGGING, context.aws_request_id, ms, MEMORY[function])
            r.log_bytes += len(out.getvalue().encode()) + len(platform.encode())
        return answer

    def api_request(self, event: dict[str, Any], r: Round | None) -> dict[str, Any]:
        """API Gateway: the request, the signal function, the access log line."""
        answer = self.invoke("signal", self.signal, event, r)
        if answer["statusCode"] not in (200, 202):
            raise RuntimeError(f"the signal function answered {answer}; its log: {self.last_log}")
        if r is not None:
            r.apigw += 1
            caller = event["requestContext"].get("authorizer", {}).get("iam", {})
            values = {
                "$context.requestId": "JpZrNhpWIAMEbxw=",
                "$context.requestTime": "01/Dec/2026:12:00:00 +0000",
                "$context.routeKey": event["routeKey"],
                "$context.status": str(answer["statusCode"]),
                "$context.identity.sourceIp": "192.0.2.1",
                "$context.identity.userArn": caller.get("userArn", "-"),
                "$context.responseLength": str(len(answer.get("body") or "")),
                "$context.responseLatency": "48",
                "$context.integrationErrorMessage": "-",
            }
            line = json.dumps({k: values[v] for k, v in ACCESS_LOG.items()}, separators=(",", ":"))
            r.log_bytes += len(line.encode()) + 1
        return answer

    def poll_and_work(self, r: Round | None) -> None:
        """Be Lambda's SQS poller until the queue is empty: each batch, one worker call."""
        while True:
            found = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
            )
            messages = found.get("Messages", [])
            if not messages:
                return
            records = [sqs_record(m, eventSource="aws:sqs") for m in messages]
            answer = self.invoke("worker", self.worker, {"Records": records}, r)
            if answer["batchItemFailures"]:
                raise RuntimeError(f"the worker failed wakes: {answer}")
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in
                       enumerate(messages)]  # fmt: skip
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            if r is not None:
                size = sum(len(m["Body"].encode()) for m in messages)
                r.requests["sqs:ReceiveMessage (poller)"] += 1
                r.requests["sqs:DeleteMessageBatch (poller)"] += 1
                r.sqs_chunks += cm.sqs_chunks(size) + 1


def http_event(route: str, path: str, body: bytes, principal: str | None) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event."""
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route,
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "content-length": str(len(body))},
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "api",
            "domainName": "api.example.test",
            "domainPrefix": "api",
            "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "192.0.2.1", "userAgent": "bench"},
            "requestId": str(uuid.uuid4()),
            "routeKey": route,
            "stage": "$default",
            "time": "01/Dec/2026:12:00:00 +0000",
            "timeEpoch": 1_796_126_400_000,
        },
        "body": body.decode(),
        "isBase64Encoded": False,
    }  # fmt: skip
    if principal is not None:
        event["requestContext"]["authorizer"] = {
            "iam": {"accountId": ACCOUNT, "callerId": "AIDABENCH", "userArn": principal}
        }
    return event


async def build_history(d: Deployment, session_id: str, kind: Any, n: int) -> str:
    """Run ``n`` waits of ``kind`` on SQLite (uncounted), copy the task into DynamoDB and
    record ``CALLER`` as the session's owner. The task's id."""
    sqlite = SQLiteStore()
    harness = Harness(sqlite, session_id, APP.task_kinds(), ids=RandomIds())
    await harness.attach()
    task_id = await harness.create_task(kind, None)
    await harness.run_until_parked()
    for i in range(n):
        await harness.deliver(task_id, REPLY, f"k{i}", {"text": "x"})
        await harness.run_until_parked()
    record = sqlite.get_task(session_id, task_id)
    assert isinstance(record, TaskRecord) and record.state.status == "sleeping", record
    seq = d.store.commit(session_id, 0, [record])
    d.store.commit(session_id, seq, [], [Doc(OWNER_KEY, {"principal": CALLER})])
    sqlite.close()
    return task_id


def one_wait(
    d: Deployment, route: str, session_id: str, task_id: str, n: int, r: Round | None
) -> None:
    """Signal key k<n> by ``route``, then run the worker: the task sleeps on k<n+1>."""
    send_signal(d, route, session_id, task_id, n, r)
    d.poll_and_work(r)
    check_sleeping(d, session_id, task_id, n)


def send_signal(
    d: Deployment, route: str, session_id: str, task_id: str, n: int, r: Round | None
) -> None:
    """Signal key k<n> by ``route``; the value must be delivered."""
    body = json.dumps({"text": "x"}).encode()
    if route == "webhook":
        token = HOOKS[session_id]
        event = http_event("POST /hooks/{token}", f"/hooks/{token}", body, None)
        event["pathParameters"] = {"token": token}
    else:
        signal = REPLY.name
        path = f"/sessions/{session_id}/tasks/{task_id}/signals/{signal}/k{n}"
        event = http_event(
            "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}", path, body,
            CALLER,
        )  # fmt: skip
        event["pathParameters"] = {
            "session_id": session_id, "task_id": task_id, "signal": signal, "key": f"k{n}"
        }  # fmt: skip
    answer = d.api_request(event, r)
    if json.loads(answer["body"])["result"] != "delivered":
        raise RuntimeError(f"{route} k{n}: {answer}")


def check_sleeping(d: Deployment, session_id: str, task_id: str, n: int) -> None:
    """The task woke on k<n> and sleeps on the next key."""
    record = d.store.get_task(session_id, task_id)
    assert record is not None and record.state.status == "sleeping", record
    assert record.state.checkpoint["n"] == n + 2, record.state  # type: ignore[union-attr]


def measure(d: Deployment, route: str, n: int) -> list[Round]:
    """ROUNDS counted waits after ``n`` of history (and one warm, uncounted)."""
    session_id = f"{route}-{n}"
    kind = HookLooper if route == "webhook" else Looper
    task_id = asyncio.run(build_history(d, session_id, kind, n))
    # Warm rounds, uncounted: cold starts and the webhook key's first read. The history's last
    # webhook was minted on SQLite, so the webhook loop's first warm round goes by task id.
    one_wait(d, "iam", session_id, task_id, n, None)
    one_wait(d, route, session_id, task_id, n + 1, None)
    rounds = []
    for i in range(n + 2, n + 2 + ROUNDS):
        r = Round()
        d.meter.round = r
        try:
            one_wait(d, route, session_id, task_id, i, r)
        finally:
            d.meter.round = None
        rounds.append(r)
    if any(r.requests != rounds[0].requests for r in rounds):
        raise RuntimeError(f"{route} at {n}: request counts differ: {[r.requests for r in rounds]}")
    return rounds


def measure_busy(d: Deployment, n: int) -> list[Round]:
    """The extra, labelled shape of a busy queue: BUSY sessions (one task each, ``n`` waits of
    history) are signalled by the IAM route, then one poll hands their BUSY wakes to one worker
    run, as the event source mapping does with a full batch. Each round is divided by BUSY:
    per wait, the signal function's requests and duration stay whole, the worker's invocation
    and the poller's two SQS requests are shared (its billed duration is rounded up per wait,
    which bills the worker a little more than one invocation would)."""
    sessions = []
    for i in range(BUSY):
        session_id = f"busy-{n}-{i}"
        task_id = asyncio.run(build_history(d, session_id, Looper, n))
        one_wait(d, "iam", session_id, task_id, n, None)  # warm, uncounted
        sessions.append((session_id, task_id))
    rounds = []
    for i in range(n + 1, n + 1 + ROUNDS):
        r = Round()
        d.meter.round = r
        try:
            for session_id, task_id in sessions:
                send_signal(d, "iam", session_id, task_id, i, r)
            d.poll_and_work(r)
        finally:
            d.meter.round = None
        if r.requests["lambda:worker"] != 1:
            raise RuntimeError(f"busy at {n}: the poll took {r.requests['lambda:worker']} runs")
        for session_id, task_id in sessions:
            check_sleeping(d, session_id, task_id, i)
        rounds.append(per_wait(r, BUSY))
    if any(r.requests != rounds[0].requests for r in rounds):
        raise RuntimeError(f"busy at {n}: request counts differ: {[r.requests for r in rounds]}")
    return rounds


def per_wait(r: Round, waits: int) -> Round:
    """One round of ``waits`` waits, divided by them."""
    return Round(
        requests=Counter({k: v / waits for k, v in r.requests.items()}),  # type: ignore[misc]
        wru=r.wru / waits,
        wru_index=r.wru_index / waits,
        rru=r.rru / waits,
        sqs_chunks=r.sqs_chunks / waits,  # type: ignore[arg-type]
        cpu_s={f: cpu / waits for f, cpu in r.cpu_s.items()},
        log_bytes=round(r.log_bytes / waits),
        apigw=r.apigw / waits,  # type: ignore[arg-type]
    )


def median_round(rounds: list[Round]) -> Round:
    """The rounds' counts (equal) with their median CPU time and mean units and log bytes."""
    first = rounds[0]
    return Round(
        requests=first.requests,
        wru=statistics.mean(r.wru for r in rounds),
        wru_index=statistics.mean(r.wru_index for r in rounds),
        rru=statistics.mean(r.rru for r in rounds),
        sqs_chunks=first.sqs_chunks,
        cpu_s={f: statistics.median(r.cpu_s[f] for r in rounds) for f in first.cpu_s},
        log_bytes=round(statistics.mean(r.log_bytes for r in rounds)),
        apigw=first.apigw,
    )


def main() -> None:
    results: dict[tuple[str, int], Round] = {}
    with fake_aws():
        d = Deployment()
        with d.meter.moto_timed():
            for n in HISTORY:
                for route in ROUTES:
                    results[(route, n)] = median_round(measure(d, route, n))
            results[("busy", BUSY_HISTORY)] = median_round(measure_busy(d, BUSY_HISTORY))
    durable = {n: durable_resume_cpu(n) for n in HISTORY}
    print_report(results, durable, MEMORY, HISTORY, (*ROUTES, "busy"), ROUNDS)


if __name__ == "__main__":
    with timed_run():
        main()
