"""The Lambda adapters and their configuration: importing needs no environment, settings are
validated once with messages naming each variable, deps are built lazily and once, tracing is
opt-in, and each handler of bide.handlers works end to end against moto."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Before importing them: their asserts get pytest's messages (other modules register the same).
from handler_fixtures import (
    Bench,
    FakeContext,
    aws_fixture,
    bench_fixture,
    http_event,
    response_json,
)

from bide import constants as c
from bide.aws.dynamodb import DynamoDBStore
from bide.aws.scheduler import SchedulerAlarms
from bide.service.config import (
    ConfigError,
    LazyClient,
    deps_from_env,
    settings_from_env,
)
from bide.service.observability import ObservedStore

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

ROOT = Path(__file__).resolve().parents[1]

BASE_ENV = {
    c.ENV_APP: "handler_fixtures:default_app",
    c.ENV_TABLE: "bide-sessions",
    c.ENV_BUCKET: "bide-offload",
    c.ENV_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/bide-wakes.fifo",
}
ALARM_ENV = {
    c.ENV_QUEUE_ARN: "arn:aws:sqs:us-east-1:123456789012:bide-wakes.fifo",
    c.ENV_SCHEDULE_GROUP: "bide-alarms",
    c.ENV_SCHEDULER_ROLE_ARN: "arn:aws:iam::123456789012:role/bide-scheduler",
}


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "shared"), str(ROOT)])
    return env


def python(code: str, **extra_env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean_env(), **extra_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


# --- importing and tracing ----------------------------------------------------------------------


def test_handlers_import_without_any_environment_and_without_xray() -> None:
    code = (
        "import sys\n"
        "import bide.handlers.worker, bide.handlers.signal, bide.handlers.api\n"
        "heavy = ('aws_xray_sdk', 'aws_xray_sdk.core', 'boto3')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    # Neither the X-Ray SDK nor boto3 (clients are made on first use) is imported.
    assert python(code) == "[]"


def test_tracing_is_opt_in() -> None:
    code = "import sys, bide.handlers.worker; print('aws_xray_sdk.core' in sys.modules)"
    assert python(code, **{c.ENV_TRACING: "1"}) == "True"
    assert python(code, **{c.ENV_TRACING: "0"}) == "False"


# --- settings -----------------------------------------------------------------------------------


def test_missing_settings_are_named_with_what_they_hold() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_env({})
    message = str(caught.value)
    for var in (c.ENV_APP, c.ENV_TABLE, c.ENV_BUCKET, c.ENV_QUEUE_URL):
        assert var in message
    assert "DynamoDB table" in message and "required, but not set" in message


def test_invalid_settings_say_which_variable_and_why() -> None:
    cases = {
        c.ENV_APP: ("no-colon", "BIDE_APP"),
        c.ENV_QUEUE_URL: ("sqs-queue", "BIDE_WAKE_QUEUE_URL"),
        c.ENV_SAFETY_MARGIN_MS: ("-5", "BIDE_SAFETY_MARGIN_MS"),
        c.ENV_WEBHOOK_BASE_URL: ("ftp://x", "BIDE_WEBHOOK_BASE_URL"),
    }
    for var, (value, named) in cases.items():
        with pytest.raises(ConfigError, match=named):
            settings_from_env({**BASE_ENV, var: value})
    with pytest.raises(ConfigError, match="must be '1' or '0'"):
        settings_from_env({**BASE_ENV, c.ENV_TRACING: "yes"})


def test_scheduler_settings_come_together_and_the_worker_requires_them() -> None:
    partial = {**BASE_ENV, c.ENV_SCHEDULE_GROUP: "bide-alarms"}
    with pytest.raises(ConfigError, match=f"{c.ENV_QUEUE_ARN}, {c.ENV_SCHEDULER_ROLE_ARN}"):
        settings_from_env(partial)
    with pytest.raises(ConfigError, match="arms alarms"):
        settings_from_env(BASE_ENV, require_alarms=True)
    settings = settings_from_env({**BASE_ENV, **ALARM_ENV, c.ENV_TRACING: "1"}, require_alarms=True)
    assert settings.has_alarms and settings.tracing
    assert settings.safety_margin_ms == c.DEFAULT_SAFETY_MARGIN_MS
    with pytest.raises(ConfigError, match=c.ENV_BUCKET):
        settings_from_env({**BASE_ENV, c.ENV_BUCKET: "  "})  # blank is unset


def test_deps_from_env_builds_everything_lazily() -> None:
    deps = deps_from_env({**BASE_ENV, **ALARM_ENV, c.ENV_WEBHOOK_BASE_URL: "https://x.test/"})
    assert isinstance(deps.store, ObservedStore)
    inner = deps.store.inner
    assert isinstance(inner, DynamoDBStore)
    assert (inner.table_name, inner.bucket) == ("bide-sessions", "bide-offload")
    assert isinstance(deps.alarms, SchedulerAlarms) and deps.alarms.group == "bide-alarms"
    assert deps.webhook_base_url == "https://x.test"
    assert deps.app.agent is not None and deps.app.signal_token("test.reply")
    for client in (inner._ddb, deps.alarms.client, deps.queue.client):
        assert isinstance(client, LazyClient) and client._client is None  # nothing created yet


def test_a_function_without_scheduler_settings_refuses_to_arm() -> None:
    deps = deps_from_env(BASE_ENV)
    with pytest.raises(ConfigError, match=c.ENV_SCHEDULE_GROUP):
        deps.alarms.arm("s-1", 0.0)
    with pytest.raises(ConfigError, match=c.ENV_SCHEDULE_GROUP):
        deps.alarms.disarm("s-1")


def test_an_app_that_cannot_be_loaded_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"BIDE_APP='no_such_module:app'.*cannot import"):
        deps_from_env({**BASE_ENV, c.ENV_APP: "no_such_module:app"})


# --- the adapters, end to end -------------------------------------------------------------------


@pytest.fixture
def lambda_env(bench: Bench, monkeypatch):
    """The functions' environment, pointing at the bench's moto resources."""
    env = {
        c.ENV_APP: "handler_fixtures:default_app",
        c.ENV_TABLE: bench.table,
        c.ENV_BUCKET: bench.bucket,
        c.ENV_QUEUE_URL: bench.queue_url,
        c.ENV_QUEUE_ARN: bench.queue_arn,
        c.ENV_SCHEDULE_GROUP: bench.group,
        c.ENV_SCHEDULER_ROLE_ARN: ALARM_ENV[c.ENV_SCHEDULER_ROLE_ARN],
        c.ENV_WEBHOOK_BASE_URL: "https://api.example.test",
        c.ENV_TRACING: "0",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from bide.handlers import api, signal, worker

    modules = (api, signal, worker)
    for module in modules:
        module.configured.cache_clear()
    yield modules
    for module in modules:
        module.configured.cache_clear()


def test_the_three_functions_end_to_end(bench: Bench, lambda_env) -> None:
    api, signal, worker = lambda_env
    context = FakeContext()
    created = api.handler(http_event("POST", "/sessions"), context)
    assert created["statusCode"] == 201
    sid = response_json(created)["session_id"]
    submitted = api.handler(
        http_event("POST", f"/sessions/{sid}/inputs", body={"content": "hi", "request_id": "r"}),
        context,
    )
    assert submitted["statusCode"] == 202

    messages = bench.receive()
    answer = worker.handler(bench.sqs_event(messages), context)
    assert answer == {"batchItemFailures": []}
    view = response_json(api.handler(http_event("GET", f"/sessions/{sid}"), context))
    assert [e["text"] for e in view["entries"]] == ["hi", "echo: hi"]

    path = f"/sessions/{sid}/tasks/t-none/signals/test.reply/k"
    delivered = signal.handler(http_event("POST", path, body={"text": "x"}), context)
    assert (delivered["statusCode"], json.loads(delivered["body"])["result"]) == (404, "not_found")
    # Built once per cold start.
    assert api.configured() is api.configured()
    assert worker.configured()[1] is worker.configured()[1]
