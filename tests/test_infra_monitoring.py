"""The alarms and the dashboard of a BideService, and the metrics behind them.

The key check: every alarm on a custom (EMF) metric watches a metric the code really emits,
with the same namespace, name and full dimension set (CloudWatch files a metric under all of
its dimensions; the services' EMF writer adds ``service`` to each). The emitted set is not
read from a list: the failure paths of the worker and of both HTTP handlers are run here and
their EMF output is parsed. The registry the code counts through (``observability.METRICS``)
is checked too: every ``count`` in the code names one of its entries, and every entry is
counted somewhere.

Everything synthesizes with ``bide:skipBundling`` and nothing talks to AWS.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import ast
import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from bide import constants as c
from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT
from bide.cdk.service import ALARM_EMAIL_CONTEXT
from bide.engine.clock import ManualClock
from bide.service import http, worker_batch
from bide.service import observability as obs
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]
EMAIL = "ops@example.com"


@pytest.fixture(scope="module")
def mon_stack() -> BideStack:
    app = cdk.App(
        context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True, ALARM_EMAIL_CONTEXT: EMAIL}
    )
    return BideStack(app, "Bide", app_paths=[ROOT / "examples"])


@pytest.fixture(scope="module")
def mon_template(mon_stack: BideStack) -> Template:
    return Template.from_stack(mon_stack)


def _id(stack: cdk.Stack, construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(element)


def _alarms(template: Template) -> dict[str, dict[str, Any]]:
    return {
        k: v["Properties"] for k, v in template.find_resources("AWS::CloudWatch::Alarm").items()
    }


def _watched(alarm: dict[str, Any]) -> list[tuple[str, str, frozenset[tuple[str, Any]]]]:
    """(namespace, metric name, dimensions) of every metric an alarm reads: its own, or each
    metric of its math expression."""
    stats = (
        [alarm]
        if "MetricName" in alarm
        else [q["MetricStat"]["Metric"] for q in alarm.get("Metrics", []) if "MetricStat" in q]
    )
    return [
        (
            s["Namespace"],
            s["MetricName"],
            frozenset(
                (d["Name"], json.dumps(d["Value"], sort_keys=True)) for d in s.get("Dimensions", [])
            ),
        )
        for s in stats
    ]


# --- what the code emits, by running it -------------------------------------------------------


def _emf(out: str) -> set[tuple[str, str, frozenset[tuple[str, Any]]]]:
    """(namespace, metric name, dimensions) of every metric in the EMF lines of ``out``."""
    found = set()
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            [dimension_names] = directive["Dimensions"]
            dims = frozenset((n, json.dumps(blob[n])) for n in dimension_names)
            for metric in directive["Metrics"]:
                found.add((directive["Namespace"], metric["Name"], dims))
    return found


class _DeadLetters:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def dead_letter(self, session_id: str, body: str, reason: dict[str, Any]) -> None:
        self.sent.append(session_id)


def _failing_worker_batch(monkeypatch) -> None:
    """A batch of three wakes: one that cannot be read, one whose run raises on every attempt
    (its last delivery, so the worker dead-letters it), one whose run raises (not the last)."""

    async def raising(deps, session_id, stop_at=None):
        raise RuntimeError("the store fell over")

    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr(worker_batch, "run_session", raising)
    deps = SimpleNamespace(
        clock=ManualClock(),
        sleep=no_sleep,
        dead_letters=_DeadLetters(),
        max_receive_count=5,
        queue=SimpleNamespace(),
    )

    def record(n: int, body: str, receives: int) -> dict[str, Any]:
        return {
            "messageId": f"m{n}",
            "body": body,
            "attributes": {"ApproximateReceiveCount": str(receives), "MessageGroupId": f"g{n}"},
        }

    event = {
        "Records": [
            record(1, "not json at all", 1),
            record(2, json.dumps({"session_id": "s-last", "reason": "alarm"}), 5),
            record(3, json.dumps({"session_id": "s-again", "reason": "signal"}), 1),
        ]
    }
    answer = asyncio.run(worker_batch.handle_worker(deps, event, None))  # type: ignore[arg-type]
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m3"}]}
    assert deps.dead_letters.sent == ["s-last"]


def _crashing_requests(monkeypatch) -> None:
    """One request to each HTTP handler whose routing raises: both answer 500."""

    def broken(deps, group):
        raise RuntimeError("resolver exploded")

    monkeypatch.setattr(http, "_resolver_for", broken)
    for handle in (http.handle_api, http.handle_signal):
        response = asyncio.run(handle(SimpleNamespace(), {}, None))  # type: ignore[arg-type]
        assert response["statusCode"] == 500


def _nondeterministic_workflow() -> None:
    """A workflow run whose body changed while it was parked, with the sink the services
    wire (bide.service.deps): it reports the run as non-deterministic."""
    from kit import HOUR, run
    from test_workflow_support import Note, Tools

    from bide.workflow import define_workflow_tool
    from bide.workflow.nondeterminism import NONDETERMINISM_SINK

    version = {"hours": 1}

    async def body(args, ctx):
        await ctx.sleep(hours=version["hours"])
        return "done"

    async def go():
        tool = define_workflow_tool("wf", "", Note, body)
        t = await Tools(tool, services={NONDETERMINISM_SINK: obs.workflow_nondeterminism}).start()
        call = await t.call("wf", {})
        await t.h.run_until_parked()
        version["hours"] = 2
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        assert "non-determinism" in t.result(call).text

    run(go())
    obs.flush()


@pytest.fixture(scope="module")
def emitted() -> set[tuple[str, str, frozenset[tuple[str, Any]]]]:
    """What the worker's and the handlers' failure paths write as EMF, read from stdout."""
    import contextlib
    import io

    monkeypatch = pytest.MonkeyPatch()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            _failing_worker_batch(monkeypatch)
            _crashing_requests(monkeypatch)
            _nondeterministic_workflow()
    finally:
        monkeypatch.undo()
    return _emf(out.getvalue())


def test_the_failure_paths_emit_their_counts(emitted):
    names = {name for _ns, name, _dims in emitted}
    assert {
        obs.WORKER_FAILURES,
        obs.MALFORMED_WAKES,
        obs.DEAD_LETTERED_WAKES,
        obs.WAKES,
        obs.HANDLER_FAILURES,
        obs.WORKFLOW_NONDETERMINISM,
    } <= names
    assert {ns for ns, _name, _dims in emitted} == {c.METRICS_NAMESPACE}


def test_every_alarm_on_a_custom_metric_watches_a_metric_the_code_emits(mon_template, emitted):
    custom = [
        (alarm_id, watched)
        for alarm_id, alarm in _alarms(mon_template).items()
        for watched in _watched(alarm)
        if watched[0] == c.METRICS_NAMESPACE
    ]
    # Worker failures, malformed wakes, 500s of the api and signal functions, and workflow
    # runs that no longer replay their history.
    assert len(custom) == 5
    for alarm_id, watched in custom:
        assert watched in emitted, f"{alarm_id} watches {watched}, which nothing emits"


def test_count_refuses_a_metric_or_dimensions_the_registry_does_not_list():
    with pytest.raises(ValueError, match=r"not in observability\.METRICS"):
        obs.count("WorkerFailure")
    with pytest.raises(ValueError, match=r"dimensions \['function'\], not \[\]"):
        obs.count(obs.HANDLER_FAILURES)
    with pytest.raises(ValueError, match=r"not in observability\.METRICS"):
        obs.emitted_dimensions("Nope")
    assert obs.emitted_dimensions(obs.WORKER_FAILURES) == {"service": c.SERVICE_NAME}


def _counted_names() -> set[str]:
    """The metric constants every ``count(...)`` call in the package passes (by attribute name
    of bide.service.observability); a call with anything else fails the test."""
    counted: set[str] = set()
    for path in (ROOT / "shared" / "bide").rglob("*.py"):
        if "cdk" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            is_count = (
                isinstance(func, ast.Attribute)
                and func.attr == "count"
                and isinstance(func.value, ast.Name)
                and func.value.id == "obs"
            ) or (
                isinstance(func, ast.Name)
                and func.id == "count"
                and path.name == "observability.py"
            )
            if not is_count:
                continue
            first = node.args[0]
            name = first.attr if isinstance(first, ast.Attribute) else getattr(first, "id", None)
            assert name is not None and hasattr(obs, name), f"{path}: count({ast.unparse(first)})"
            counted.add(getattr(obs, name))
    return counted


def test_every_registered_metric_is_counted_somewhere_and_nothing_else_is():
    assert _counted_names() == set(obs.METRICS)


# --- alarms on what AWS measures --------------------------------------------------------------


def test_alarms_on_queues_functions_api_and_scheduler(mon_stack, mon_template):
    service = mon_stack.service
    alarms = _alarms(mon_template)
    by_metric: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for alarm in alarms.values():
        for ns, name, dims in _watched(alarm):
            by_metric.setdefault((ns, name), []).append({"alarm": alarm, "dims": dict(dims)})

    def dims(ns: str, name: str) -> list[dict[str, Any]]:
        return [entry["dims"] for entry in by_metric[(ns, name)]]

    queue_name = lambda q: json.dumps({"Fn::GetAtt": [_id(mon_stack, q), "QueueName"]})  # noqa: E731
    assert dims("AWS/SQS", "ApproximateAgeOfOldestMessage") == [
        {"QueueName": queue_name(service.queue)}
    ]
    [age] = by_metric[("AWS/SQS", "ApproximateAgeOfOldestMessage")]
    assert age["alarm"]["Threshold"] == 15 * 60
    assert sorted(
        d["QueueName"] for d in dims("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    ) == sorted(
        [queue_name(service.dead_letter_queue), queue_name(service.schedule_dead_letter_queue)]
    )
    functions = [service.worker, service.signal_function, service.api_function]
    for metric in ("Errors", "Throttles"):
        assert sorted(d["FunctionName"] for d in dims("AWS/Lambda", metric)) == sorted(
            json.dumps({"Ref": _id(mon_stack, fn)}) for fn in functions
        )
    api = {
        "ApiId": json.dumps({"Ref": _id(mon_stack, service.http_api)}),
        "Stage": json.dumps("$default"),
    }
    for metric in ("5xx", "4xx"):
        assert dims("AWS/ApiGateway", metric) == [api]
    # Each rate divides by the requests of the same API and stage.
    assert dims("AWS/ApiGateway", "Count") == [api, api]
    group = {"ScheduleGroup": json.dumps({"Ref": _id(mon_stack, service.schedule_group)})}
    for metric in ("TargetErrorCount", "InvocationDroppedCount"):
        assert dims("AWS/Scheduler", metric) == [group]


def test_the_api_error_rate_alarms_are_percentages_of_enough_requests(mon_template):
    alarms = _alarms(mon_template)
    rates = {p["AlarmDescription"]: p for p in alarms.values() if "Metrics" in p}
    assert len(rates) == 2
    for alarm in rates.values():
        [expression] = [q for q in alarm["Metrics"] if "Expression" in q]
        assert expression["Expression"] == "IF(requests >= 20, 100 * errors / requests, 0)"
        assert expression["ReturnData"] is True


def test_every_alarm_notifies_the_alarm_topic_and_the_topic_mails_the_operator(
    mon_stack, mon_template
):
    topic = _id(mon_stack, mon_stack.service.alarm_topic)
    mon_template.has_resource_properties(
        "AWS::SNS::Subscription",
        {"Protocol": "email", "Endpoint": EMAIL, "TopicArn": {"Ref": topic}},
    )
    alarms = _alarms(mon_template)
    assert len(alarms) == 18
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == [{"Ref": topic}]
        assert alarm["TreatMissingData"] == "notBreaching"


def test_a_dashboard_shows_every_alarm(mon_stack, mon_template):
    [dashboard] = mon_template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for alarm in mon_stack.service.alarms:
        assert _id(mon_stack, alarm) in body


def test_no_topic_without_an_email_and_cdk_nag_stays_clean(mon_stack):
    app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
    plain = BideStack(app, "Bide", app_paths=[ROOT / "examples"])
    template = Template.from_stack(plain)
    template.resource_count_is("AWS::SNS::Topic", 0)
    for stack in (plain, mon_stack):
        report = AwsSolutionsChecks(verbose=True).validate_scope(stack)
        findings = [
            f"{v.rule_name} at {r.construct_path}"
            for v in report.violations
            for r in v.violating_resources
        ]
        assert findings == []


def test_functions_log_json_with_system_logs_at_warn(mon_stack, mon_template):
    # Lambda's advanced logging controls (bide.cdk.functions.LOGGING_CONFIG): no START/END/
    # REPORT records for an invocation that succeeds, a failure's runtimeDone and report kept.
    service = mon_stack.service
    resources = mon_template.to_json()["Resources"]
    for fn in (service.worker, service.signal_function, service.api_function):
        name = fn.node.id
        config = resources[_id(mon_stack, fn)]["Properties"]["LoggingConfig"]
        assert config["LogFormat"] == "JSON", name
        assert config["SystemLogLevel"] == "WARN", name
        # Lambda's default application level, INFO: an EMF document has no level and counts
        # as INFO, so a stricter level would drop every metric.
        assert config.get("ApplicationLogLevel", "INFO") in ("TRACE", "DEBUG", "INFO"), name
        assert set(config) == {"LogFormat", "SystemLogLevel", "LogGroup"}, name
