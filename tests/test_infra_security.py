"""The stack's security settings: least privilege per function, the webhook route's own throttle
and the webhook key secret.

Least privilege is checked twice. :func:`test_each_function_calls_exactly_its_grants` runs
each handler's flows on moto (the worker's runs, parks, alarms, offloads, retries and dead
letters; the signal function's webhook and by-task deliveries, large ones included; the API's
create, submit, list, view and webhook listing) with a botocore ``before-parameter-build`` hook that
records, per function, every AWS action its code makes (a TransactWriteItems counts as the
Put/Update/Delete/ConditionCheck it contains, a TransactGetItems as its GetItems, as IAM
authorises them) and the resource it is on.
The recording must equal :data:`bide.cdk.functions.FUNCTION_GRANTS`: nothing missing, nothing
unused. :func:`test_the_synthesized_policies_grant_exactly_that` then checks the synthesized
roles hold exactly those grants, plus what CDK adds with a reason (:data:`ADDED_BY_CDK`).
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import handler_fixtures
import pytest
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk.assertions import Template
from aws_fixtures import aws_client, unique
from handler_fixtures import (  # noqa: F401
    REPLY,
    Bench,
    FakeContext,
    aws_fixture,
    hook_event,
    http_event,
    make_bench,
    signal_event,
)
from test_auth_deployed import make_app as signin_app

from bide import constants as c
from bide.aws.sqs import SqsDeadLetters
from bide.aws.webhook_keys import SecretsManagerWebhookKeys
from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT
from bide.cdk.functions import FUNCTION_GRANTS
from bide.service import worker_batch
from bide.service.http import handle_api, handle_signal
from bide.tools.webhook_keys import new_key_document
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = (c.FUNCTION_WORKER, c.FUNCTION_SIGNAL, c.FUNCTION_API)

#: What a role holds beyond its code's own calls, and why.
ADDED_BY_CDK: dict[str, dict[str, set[str]]] = {
    name: {
        # Every function writes its own log group (and only it).
        "logs": {"logs:CreateLogStream", "logs:PutLogEvents"},
    }
    for name in FUNCTIONS
}
# The SQS event source mapping polls the wake queue for the worker with the worker's role:
# CDK's SqsEventSource grants what Lambda's poller calls (Receive, Delete, GetQueueAttributes,
# GetQueueUrl) and ChangeMessageVisibility, which the worker's own code also calls (a failed
# wake comes back in seconds).
ADDED_BY_CDK[c.FUNCTION_WORKER]["queue"] = {
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
}
# The worker creates schedules whose target role the Scheduler assumes: passing that one role,
# to the Scheduler only, is what CreateSchedule/UpdateSchedule require of the caller.
ADDED_BY_CDK[c.FUNCTION_WORKER]["scheduler_role"] = {"iam:PassRole"}
#: Calls the code makes that the event source's grant covers (see above).
CONSUMING = {("queue", "sqs:ChangeMessageVisibility")}


# --- recording what each function calls -----------------------------------------------------

_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",  # TransactGetItems
}


class Recorder:
    """Per function, every (resource kind, IAM action) its code called while it ran."""

    def __init__(self, bench: Bench, dead_letter_url: str) -> None:
        self.function: str | None = None
        self.seen: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.queues = {bench.queue_url: "queue", dead_letter_url: "dead_letters"}

    def attach(self, client: Any) -> None:
        inner = getattr(client, "_inner", client)
        inner.meta.events.register("before-parameter-build", self.on_call)

    def on_call(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if self.function is None:
            return  # the test's own set-up and checks, or Lambda's poller
        service, op = model.service_model.service_name, model.name
        found: list[tuple[str, str]]
        # IAM authorises a transaction's actions as the single-item operations they contain
        # (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
        if service == "dynamodb" and op in ("TransactWriteItems", "TransactGetItems"):
            found = [
                ("table", f"dynamodb:{_TRANSACT[kind]}")
                for item in params["TransactItems"]
                for kind in item
            ]
        elif service == "dynamodb":
            found = [("index" if params.get("IndexName") else "table", f"dynamodb:{op}")]
        elif service == "s3" and op == "CopyObject":
            # Reads the source, writes the target; tags it: s3:PutObjectTagging
            # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html).
            found = [("objects", "s3:GetObject"), ("objects", "s3:PutObject")]
            if params.get("Tagging"):
                found.append(("objects", "s3:PutObjectTagging"))
        elif service == "s3":
            found = [("objects", f"s3:{op}")]
            if op == "PutObject" and params.get("Tagging"):
                # Tags on upload need s3:PutObjectTagging too
                # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html).
                found.append(("objects", "s3:PutObjectTagging"))
        elif service == "sqs":
            found = [(self.queues[params["QueueUrl"]], f"sqs:{op}")]
        elif service == "scheduler":
            found = [("schedules", f"scheduler:{op}")]
        elif service == "secretsmanager":
            found = [("webhook_key", f"secretsmanager:{op}")]
        else:
            found = [("unexpected", f"{service}:{op}")]
        self.seen[self.function].update(found)

    @contextmanager
    def running(self, name: str) -> Iterator[None]:
        self.function = name
        try:
            yield
        finally:
            self.function = None


def call_api(bench: Bench, rec: Recorder, method: str, path: str, body: Any = None) -> Any:
    with rec.running(c.FUNCTION_API):
        response = asyncio.run(handle_api(bench.deps, http_event(method, path, body=body), None))
    assert response["statusCode"] < 300, response
    return json.loads(response["body"])


def call_signal(bench: Bench, rec: Recorder, event: dict[str, Any]) -> int:
    with rec.running(c.FUNCTION_SIGNAL):
        response = asyncio.run(handle_signal(bench.deps, event, FakeContext()))
    return int(response["statusCode"])


def tool_task(bench: Bench, rec: Recorder, sid: str) -> str:
    view = call_api(bench, rec, "GET", f"/sessions/{sid}")
    (task,) = [t for t in view["tasks"] if t["kind"] == "bide.tool"]
    return str(task["id"])


def test_each_function_calls_exactly_its_grants(aws: dict[str, Any], monkeypatch) -> None:
    bench = make_bench(aws)
    secrets = aws_client("secretsmanager")
    key_id = unique("webhook-key")
    secrets.create_secret(Name=key_id, SecretString=new_key_document())
    # max_age=0: every use reads the secret, so each function's reads are seen (deployed, a
    # function reads it once per cold start).
    bench.deps.webhook_keys = SecretsManagerWebhookKeys(key_id, secrets, max_age=0)
    dlq_url = bench.sqs.create_queue(
        QueueName=f"{unique('dead')}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    bench.deps.dead_letters = SqsDeadLetters(bench.sqs, dlq_url)
    bench.deps.max_receive_count = 3
    rec = Recorder(bench, dlq_url)
    for client in (bench.ddb, bench.s3, bench.sqs, bench.scheduler, secrets):
        rec.attach(client)
    real_worker = handler_fixtures.handle_worker

    async def worker(deps: Any, event: Any, context: Any) -> Any:
        with rec.running(c.FUNCTION_WORKER):
            return await real_worker(deps, event, context)

    monkeypatch.setattr(handler_fixtures, "handle_worker", worker)

    # A tool parks on a webhook with a deadline (mint: the key; arm: CreateSchedule), the API
    # lists sessions (the live index), views one and lists its webhooks; the webhook delivers
    # (the key again) and the run ends (disarm: DeleteSchedule).
    sid = call_api(bench, rec, "POST", "/sessions")["session_id"]
    content = {"content": 'call await_hook {"after": 3600}', "request_id": "r1"}
    call_api(bench, rec, "POST", f"/sessions/{sid}/inputs", content)
    bench.drain()
    call_api(bench, rec, "GET", "/sessions")
    [hook] = call_api(bench, rec, "GET", f"/sessions/{sid}/hooks")["items"]
    token = hook["url"].rsplit("/", 1)[1]
    event = hook_event(token, '{"text": "ok"}', headers={"content-type": "application/json"})
    assert call_signal(bench, rec, event) == 202
    bench.drain()

    # Armed again while armed: CreateSchedule conflicts and the worker updates it.
    napper = bench.start_napper([{"keys": ["k"], "after": 3600}])
    bench.drain()
    bench.start_napper([{"keys": ["k"], "after": 1800}], napper_session := unique("s"))
    bench.drain()
    bench.start_napper([{"keys": ["k"], "after": 900}], napper_session)
    bench.drain()
    assert napper

    # Large values: a big signal value (the signal function offloads the record, then reads
    # it back for the next delivery), a big result (the worker offloads), the view reads.
    big = "x" * 100_000
    bench.probe.big = big
    sid2 = call_api(bench, rec, "POST", "/sessions")["session_id"]
    call_api(
        bench,
        rec,
        "POST",
        f"/sessions/{sid2}/inputs",
        {"content": "call fetch_big {}", "request_id": "r2"},
    )
    bench.drain()
    task = tool_task(bench, rec, sid2)
    assert call_signal(bench, rec, signal_event(sid2, task, REPLY.name, "other", {"text": big}))
    assert call_signal(bench, rec, signal_event(sid2, task, REPLY.name, "go", {"text": "go"}))
    bench.drain()
    call_api(bench, rec, "GET", f"/sessions/{sid2}")
    # A large submission: the API offloads it.
    sid3 = call_api(bench, rec, "POST", "/sessions")["session_id"]
    call_api(bench, rec, "POST", f"/sessions/{sid3}/inputs", {"content": big, "request_id": "r3"})

    # An ended session (kept 30 days): values written after the end are created tagged (the
    # API's submission, the signal function's delivery), and the worker re-writes the older
    # ones tagged (CopyObject) while it stamps the session's items.
    bench.store.set_retention(30 * 86_400, clock=bench.clock.now)
    bench.deps.ended_sessions = bench.store
    sid4 = call_api(bench, rec, "POST", "/sessions")["session_id"]
    content = {"content": "call fetch_big {}", "request_id": "r4"}
    call_api(bench, rec, "POST", f"/sessions/{sid4}/inputs", content)
    bench.drain()
    task4 = tool_task(bench, rec, sid4)
    call_api(bench, rec, "POST", f"/sessions/{sid4}/inputs", {"content": big, "request_id": "r6"})
    call_api(bench, rec, "POST", f"/sessions/{sid4}/end")
    call_api(bench, rec, "POST", f"/sessions/{sid4}/inputs", {"content": big, "request_id": "r5"})
    assert call_signal(bench, rec, signal_event(sid4, task4, REPLY.name, "other", {"text": big}))
    bench.drain()

    # A call cut off before the function's timeout: the worker requeues its session.
    cut = unique("s")
    bench.start_napper([{"keys": ["k"]}], cut)
    messages = bench.receive()

    async def cut_off() -> Any:
        bench.probe.arm_pause()  # the phase awaits a "model call" that does not return
        entered = bench.probe.entered
        assert entered is not None

        async def sleep(seconds: float) -> None:
            await entered.wait()  # time passes while the call runs
            bench.clock.advance(seconds)

        bench.deps.sleep = sleep
        # 25 s left, 20 s margin: the call is cut off 5 s from now.
        run = handler_fixtures.handle_worker(
            bench.deps, bench.sqs_event(messages), FakeContext(25_000)
        )
        return await asyncio.wait_for(run, timeout=10)  # real time: only if it hangs

    assert asyncio.run(cut_off()) == {"batchItemFailures": []}
    for m in messages:
        bench.sqs.delete_message(QueueUrl=bench.queue_url, ReceiptHandle=m["ReceiptHandle"])
    assert {"session_id": cut, "reason": "still-active"} in bench.queued()

    # A failing wake: redelivered in seconds, then set aside on its last attempt.
    bad = unique("s-bad")
    real_run = worker_batch.run_session

    async def flaky(deps: Any, session_id: str, **kw: Any) -> Any:
        if session_id == bad:
            raise RuntimeError("throttled")
        return await real_run(deps, session_id, **kw)

    monkeypatch.setattr(worker_batch, "run_session", flaky)
    bench.deps.sleep = _no_sleep
    bench.deps.queue.wake(bad, "signal")
    (message,) = [m for m in bench.receive() if bad in m["Body"]]
    record = bench.sqs_record(message)
    for count in ("2", "3"):
        record["attributes"]["ApproximateReceiveCount"] = count
        asyncio.run(handler_fixtures.handle_worker(bench.deps, {"Records": [record]}, None))

    # Sign-in in steps (tests/test_auth_deployed.py): the step parks on a sign-in, the API
    # stores the sealed token (table + key secret), the worker reads it back. No new action.
    monkeypatch.setattr(worker_batch, "run_session", real_run)
    app_before, bench.deps.app = bench.deps.app, signin_app()
    signin = call_api(bench, rec, "POST", "/sessions")["session_id"]
    box = {"content": "make a box", "request_id": "r-box"}
    call_api(bench, rec, "POST", f"/sessions/{signin}/inputs", box)
    bench.drain()
    [request] = call_api(bench, rec, "GET", f"/sessions/{signin}/workflow")["authorizations"]
    path = f"/sessions/{signin}/authorizations/{request['id']}/complete"
    assert call_api(bench, rec, "POST", path, {"token": "gho_infra-token-1"})["result"] == (
        "delivered"
    )
    bench.drain()
    bench.deps.app = app_before

    for name in FUNCTIONS:
        granted = {(kind, a) for kind, actions in FUNCTION_GRANTS[name].items() for a in actions}
        assert rec.seen[name] - CONSUMING == granted, name


async def _no_sleep(seconds: float) -> None:
    return None


# --- the synthesized stack -------------------------------------------------------------------


def _stack(**service_options: Any) -> BideStack:
    app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
    return BideStack(app, "Bide", app_paths=[ROOT / "examples"], service_options=service_options)


@pytest.fixture(scope="module")
def stack() -> BideStack:
    return _stack()


@pytest.fixture(scope="module")
def template(stack: BideStack) -> Template:
    return Template.from_stack(stack)


def _id(stack: cdk.Stack, construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(element)


def _arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def _grants(template: Template, role_id: str) -> set[tuple[str, str]]:
    """(action, resource as JSON) over all of a role's statements."""
    policies = template.find_resources(
        "AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": role_id}]}}
    )
    found: set[tuple[str, str]] = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"]
            resources = statement["Resource"]
            for action in [actions] if isinstance(actions, str) else actions:
                for resource in resources if isinstance(resources, list) else [resources]:
                    found.add((action, json.dumps(resource, sort_keys=True)))
    return found


def _resources(stack: BideStack, name: str) -> dict[str, list[Any]]:
    service = stack.service
    table = _id(stack, service.table)
    schedules = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":scheduler:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":schedule/",
                {"Ref": _id(stack, service.schedule_group)},
                "/*",
            ],
        ]
    }
    return {
        "table": [_arn(table)],
        "index": [{"Fn::Join": ["", [_arn(table), "/index/live"]]}],
        "objects": [{"Fn::Join": ["", [_arn(_id(stack, service.bucket)), "/*"]]}],
        "queue": [_arn(_id(stack, service.queue))],
        "dead_letters": [_arn(_id(stack, service.dead_letter_queue))],
        "schedules": [schedules],
        "webhook_key": [{"Ref": _id(stack, service.webhook_key)}],
        "logs": [_arn(_id(stack, service.node.find_child(f"{name}-logs")))],
        "scheduler_role": [_arn(_id(stack, service.scheduler_role))],
    }


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_synthesized_policies_grant_exactly_that(stack, template, name) -> None:
    fn = {
        c.FUNCTION_WORKER: stack.service.worker,
        c.FUNCTION_SIGNAL: stack.service.signal_function,
        c.FUNCTION_API: stack.service.api_function,
    }[name]
    where = _resources(stack, name)
    expected = {
        (action, json.dumps(resource, sort_keys=True))
        for grants in (FUNCTION_GRANTS[name], ADDED_BY_CDK[name])
        for kind, actions in grants.items()
        for action in actions
        for resource in where[kind]
    }
    assert _grants(template, _id(stack, fn.role)) == expected


def test_only_the_worker_arms_alarms_and_nobody_reads_them_back() -> None:
    for name in (c.FUNCTION_SIGNAL, c.FUNCTION_API):
        assert "schedules" not in FUNCTION_GRANTS[name]
        assert "dead_letters" not in FUNCTION_GRANTS[name]
    assert "scheduler:GetSchedule" not in FUNCTION_GRANTS[c.FUNCTION_WORKER]["schedules"]
    assert "index" not in FUNCTION_GRANTS[c.FUNCTION_SIGNAL]


def _stage(template: Template, stack: BideStack) -> dict[str, Any]:
    return template.to_json()["Resources"][_id(stack, stack.service.stage)]


def test_the_webhook_route_has_its_own_throttle(stack, template) -> None:
    stage = _stage(template, stack)
    props = stage["Properties"]
    # The IAM routes keep the stage's default; the unauthenticated route gets less.
    assert props["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 200,
        "ThrottlingRateLimit": 100,
    }
    # Both unauthenticated routes: a value and a failure (issue 13) share the limits.
    limits = {"ThrottlingBurstLimit": 40, "ThrottlingRateLimit": 20}
    assert props["RouteSettings"] == {
        "POST /hooks/{token}": limits,
        "POST /hooks/{token}/failure": limits,
        "POST /hooks/{token}/heartbeat": limits,
    }
    # RouteSettings may only name a route that exists: the stage is deployed after it.
    assert _id(stack, stack.service.webhook_route) in stage["DependsOn"]
    assert _id(stack, stack.service.webhook_failure_route) in stage["DependsOn"]


def test_the_webhook_throttle_is_a_prop() -> None:
    stack = _stack(
        webhook_throttle=apigw.ThrottleSettings(rate_limit=5, burst_limit=7),
        throttle=apigw.ThrottleSettings(rate_limit=50, burst_limit=60),
    )
    props = _stage(Template.from_stack(stack), stack)["Properties"]
    limits = {"ThrottlingBurstLimit": 7, "ThrottlingRateLimit": 5}
    assert props["RouteSettings"] == {
        "POST /hooks/{token}": limits,
        "POST /hooks/{token}/failure": limits,
        "POST /hooks/{token}/heartbeat": limits,
    }
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 60, "ThrottlingRateLimit": 50}


def test_the_webhook_key_is_a_generated_secret_named_to_every_function(stack, template) -> None:
    (secret_id, secret), *others = template.find_resources("AWS::SecretsManager::Secret").items()
    assert not others
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["GenerateStringKey"] == "current"
    assert json.loads(generated["SecretStringTemplate"]) == {"previous": []}
    assert generated["PasswordLength"] >= 32
    assert "SecretString" not in secret["Properties"]  # the key is never in the template
    for fn in (stack.service.worker, stack.service.signal_function, stack.service.api_function):
        props = template.to_json()["Resources"][_id(stack, fn)]["Properties"]
        assert props["Environment"]["Variables"][c.ENV_WEBHOOK_KEY_SECRET] == {"Ref": secret_id}
