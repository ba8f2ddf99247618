"""``bide smoke`` against the strict AWS twin: the real API, signal and worker handlers with the
repository's default app (``examples.agent_app``), DynamoDB on moto through the twin, the
twin's FIFO wake queue, event source mapping and Scheduler, all in simulated time.

The smoke client talks to ``http://127.0.0.1:<port>`` through an injected transport that does
what API Gateway does in front of the functions: it refuses an IAM route without a SigV4
``Authorization`` header for ``execute-api``, turns the request into a payload 2.0 event
(the caller's principal on IAM routes, none on ``/hooks/{token}``) and calls the function's
handler. No request leaves the process; nothing tries a real AWS endpoint.

A healthy stack passes every step; a stack without the worker's event source mapping fails
at the webhook step, and one whose schedules target the wrong queue at the alarm step, each
with what to check next.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from handler_fixtures import PRINCIPAL, FakeContext, http_event
from twin_fixtures import TwinBench, twin_bench

from bide import cli
from bide.aws.scheduler import SchedulerAlarms
from bide.local.client import ApiClient, ApiResponse, PreparedRequest, _response
from bide.local.smoke import Smoke
from bide.service.http import handle_api, handle_signal
from bide.testing.aws.stack import SCHEDULE_GROUP, SCHEDULER_ROLE_ARN
from examples.agent_app import build_app

URL = "http://127.0.0.1:8799"
_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=\w+/\d{8}/us-east-1/execute-api/aws4_request, "
    r"SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}"
)


class GatewayAdapter:
    """API Gateway's part: routes, IAM auth, payload 2.0 events, the functions' handlers."""

    def __init__(self, bench: TwinBench) -> None:
        self.bench = bench
        self.requests: list[str] = []

    async def __call__(self, request: PreparedRequest) -> ApiResponse:
        parts = urlsplit(request.url)
        assert (parts.scheme, parts.hostname, parts.port) == ("http", "127.0.0.1", 8799)
        self.requests.append(f"{request.method} {parts.path}")
        headers = {k.lower(): v for k, v in request.headers.items()}
        query = dict(parse_qsl(parts.query))
        if request.method == "POST" and parts.path.startswith("/hooks/"):
            event = http_event(
                "POST",
                parts.path,
                raw=request.body or b"",
                headers=headers,
                route_key="POST /hooks/{token}",
                principal=None,
            )
            answer = self.invoke(handle_signal, event)
        else:
            if not _SIGV4.fullmatch(headers.get("authorization", "")):
                return _response(403, b'{"message":"Missing Authentication Token"}')
            event = http_event(
                request.method,
                parts.path,
                raw=request.body,
                headers=headers,
                principal=PRINCIPAL,
                query=query,
            )
            answer = self.invoke(handle_api, event)
        return _response(answer["statusCode"], answer.get("body", "").encode())

    def invoke(self, handler: Any, event: dict[str, Any]) -> dict[str, Any]:
        # A function invocation runs on its own event loop (its own Lambda process), and the
        # simulated loop waits for it without letting simulated time pass: Powertools runs
        # a synchronous route in a thread, which the simulated loop would not wait for.
        with ThreadPoolExecutor(max_workers=1) as pool:
            run = pool.submit(asyncio.run, handler(self.bench.deps, event, FakeContext()))
            return dict(run.result(timeout=60))


@contextmanager
def deployed(**options: Any) -> Iterator[TwinBench]:
    with twin_bench(seed=5, app=build_app(), **options) as bench:
        bench.deps.webhook_base_url = URL
        yield bench


def smoke_on(bench: TwinBench, *, worker: bool = True, timeout: float = 600) -> tuple[bool, str]:
    out = io.StringIO()
    client = ApiClient(URL, sign=True, region="us-east-1")
    adapter = GatewayAdapter(bench)
    smoke = Smoke(
        client,
        transport=adapter,
        now=bench.twin.clock.now,
        timeout=timeout,
        alarm_seconds=60,
        poll_seconds=5,
        out=out,
    )

    async def scenario() -> bool:
        mapping = bench.worker.start() if worker else None
        try:
            return await smoke.run()
        finally:
            if mapping is not None:
                mapping.cancel()

    passed = bench.twin.clock.run(scenario())
    assert adapter.requests, "the smoke client sent nothing through the adapter"
    return passed, out.getvalue()


def test_a_healthy_stack_passes_every_step(monkeypatch):
    monkeypatch.delenv("BIDE_MODEL_PROVIDER", raising=False)
    with deployed() as bench:
        started = bench.twin.clock.now()
        passed, output = smoke_on(bench)
        elapsed = bench.twin.clock.now() - started
    assert passed, output
    lines = output.splitlines()
    assert [line[:10] for line in lines[:7]] == [f"PASS  {n}/7 " for n in range(1, 8)]
    assert "webhook minted" in lines[2] and "answered with the posted value" in lines[4]
    assert "a 60s alarm wakes the session" in lines[6]
    assert lines[7].startswith("smoke passed")
    # The alarm step took the alarm's own wait at least: it was the Scheduler that woke it.
    assert float(re.search(r"\(([\d.]+)s\)", lines[6]).group(1)) >= 60
    assert elapsed < 600
    assert bench.twin.scheduler.invocations, "no schedule fired"


def test_without_the_event_source_mapping_it_fails_at_the_webhook(monkeypatch):
    monkeypatch.delenv("BIDE_MODEL_PROVIDER", raising=False)
    with deployed() as bench:
        passed, output = smoke_on(bench, worker=False, timeout=120)
    assert not passed
    assert "PASS  2/7 submit the webhook prompt" in output
    assert (
        "FAIL  3/7 the worker runs the session and mints a webhook: no webhook was minted" in output
    )
    assert "next: no worker run minted the webhook: check that the worker's event source" in output
    assert "smoke FAILED at step 3 of 7" in output


def test_with_schedules_targeting_the_wrong_queue_it_fails_at_the_alarm(monkeypatch):
    monkeypatch.delenv("BIDE_MODEL_PROVIDER", raising=False)
    with deployed() as bench:
        bench.deps.alarms = SchedulerAlarms(
            bench.twin.scheduler,
            group=SCHEDULE_GROUP,
            queue_arn="arn:aws:sqs:us-east-1:123456789012:not-the-wake-queue.fifo",
            role_arn=SCHEDULER_ROLE_ARN,
        )
        passed, output = smoke_on(bench)
        dead = list(bench.twin.scheduler.invocations)
    assert not passed
    assert "PASS  5/7 the session resumes with the posted value" in output
    assert "FAIL  7/7 a 60s alarm wakes the session: no answer after" in output
    assert "the Scheduler role may sqs:SendMessage to the wake queue" in output
    assert any(i.error == "AWS.SimpleQueueService.NonExistentQueue" for i in dead)


def test_an_app_whose_model_does_not_call_the_smoke_tool_is_named(monkeypatch):
    # The example app's model without its smoke turn: it calls run_ci, which parks on the CI's
    # webhook instead.
    import examples.agent_app as example

    monkeypatch.delenv("BIDE_MODEL_PROVIDER", raising=False)
    monkeypatch.setattr(example, "smoke_reply", lambda request: None)
    with deployed() as bench:
        passed, output = smoke_on(bench)
    assert not passed
    step = "FAIL  3/7 the worker runs the session and mints a webhook: the session parked on "
    assert step + "another webhook: run_ci (app.ci-result)" in output
    assert "next: the model did not call bide_smoke" in output


def test_an_unsigned_client_is_refused_at_the_first_step(monkeypatch):
    monkeypatch.delenv("BIDE_MODEL_PROVIDER", raising=False)
    with deployed() as bench:
        out = io.StringIO()
        smoke = Smoke(
            ApiClient(URL, sign=False),
            transport=GatewayAdapter(bench),
            now=bench.twin.clock.now,
            out=out,
        )
        assert bench.twin.clock.run(smoke.run()) is False
    assert "FAIL  1/7 create a session: POST /sessions: HTTP 403" in out.getvalue()
    assert "execute-api:Invoke" in out.getvalue()


def test_the_cli_command(monkeypatch, capsys):
    # Nothing listens on the port: the command fails at its first step, with exit code 1,
    # without trying anything but 127.0.0.1.
    monkeypatch.setattr(cli, "HTTP_TIMEOUT_SECONDS", 2.0)
    code = cli.main(["smoke", "--url", "http://127.0.0.1:9", "--timeout", "5", "--poll", "1"])
    assert code == cli.EXIT_REFUSED
    out = capsys.readouterr().out
    assert "FAIL  1/7 create a session:" in out and "smoke FAILED at step 1 of 7" in out
    with pytest.raises(SystemExit) as usage:
        cli.main(["smoke", "--url", URL, "--alarm-seconds", "0"])
    assert usage.value.code == cli.EXIT_USAGE
    assert "--alarm-seconds: must be 1 to 900 seconds, not '0'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text", ["bide smoke: wait 60s (alarm)", "bide smoke: wait 900s (webhook)"]
)
def test_the_scripted_model_calls_the_smoke_tool(text):
    from bide.agent.providers import ModelRequest, UserMessage
    from bide.service.smoke import smoke_reply

    response = smoke_reply(ModelRequest(messages=[UserMessage(text=text)]))
    assert response is not None
    (call,) = response.tool_calls
    assert call.name == "bide_smoke"
    assert call.arguments == {"wait_seconds": int(text.split("wait ")[1].split("s")[0])}
    assert smoke_reply(ModelRequest(messages=[UserMessage(text="fix the flaky test")])) is None
