"""The EMF documents :func:`bide.service.observability.flush` writes.

Each document is checked against the rules of the CloudWatch embedded metric format
specification (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/
CloudWatch_Embedded_Metric_Format_Specification.html): the ``_aws`` metadata, every directive's
members, every dimension named present on the root as a string, every metric present on the
root as a number or an array of at most 100 numbers, at most 100 metrics per directive and 30
dimensions per set. Then what CloudWatch would extract from them (namespace, metric name,
dimensions, unit: values) is compared with what Powertools' EMF provider, which the services
used before, writes for the same counts: the metrics keep their identity, so the alarms of
:mod:`bide.cdk.monitoring` keep watching them.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import pytest

from bide.constants import METRICS_NAMESPACE, SERVICE_NAME
from bide.service import emf
from bide.service import observability as obs
from bide.service.emf import MetricBuffer

UNITS = {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes",
         "Gigabytes", "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits",
         "Percent", "Count", "Count/Second", "None"}  # fmt: skip
NOW = 1_796_188_474.321


def check_document(doc: dict[str, Any], *, now: float | None = None) -> None:
    """Fail unless ``doc`` follows the specification's rules (see the module's docstring)."""
    text = json.dumps(doc, allow_nan=False)  # valid JSON: no NaN or Infinity
    assert json.loads(text) == doc
    meta = doc["_aws"]
    assert set(meta) == {"Timestamp", "CloudWatchMetrics"}
    stamp = meta["Timestamp"]
    assert isinstance(stamp, int) and not isinstance(stamp, bool)
    if now is not None:
        assert stamp == int(now * 1000)  # milliseconds since the epoch
    directives = meta["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
        assert isinstance(directive["Namespace"], str) and 1 <= len(directive["Namespace"]) <= 255
        assert isinstance(directive["Dimensions"], list) and directive["Dimensions"]
        for dimension_set in directive["Dimensions"]:
            assert len(dimension_set) <= emf.MAX_DIMENSIONS
            for name in dimension_set:
                assert isinstance(doc.get(name), str), name  # a root member, a string
        metrics = directive["Metrics"]
        assert 1 <= len(metrics) <= emf.MAX_METRICS_PER_DIRECTIVE
        for definition in metrics:
            assert set(definition) <= {"Name", "Unit"} and definition.get("Unit", "None") in UNITS
            value = doc[definition["Name"]]  # a root member: a number or an array of numbers
            values = value if isinstance(value, list) else [value]
            assert 1 <= len(values) <= emf.MAX_VALUES
            for v in values:
                assert isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


Identity = tuple[str, str, frozenset[tuple[str, str]], str]


def extracted(docs: list[dict[str, Any]]) -> dict[Identity, list[float]]:
    """What CloudWatch extracts: every metric's values by (namespace, name, dimensions,
    unit), over every directive and dimension set of every document."""
    found: dict[Identity, list[float]] = defaultdict(list)
    for doc in docs:
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dims = frozenset((name, doc[name]) for name in dimension_set)
                for definition in directive["Metrics"]:
                    value = doc[definition["Name"]]
                    key = (directive["Namespace"], definition["Name"], dims,
                           definition.get("Unit", "None"))  # fmt: skip
                    values = value if isinstance(value, list) else [value]
                    found[key] += [float(v) for v in values]
    return {key: sorted(values) for key, values in found.items()}


def emf_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


# Every metric of METRICS, some under several dimension values, some more than once.
COUNTS: list[tuple[str, float, dict[str, str]]] = [
    (obs.WAKES, 1, {"reason": "signal"}),
    (obs.WAKES, 1, {"reason": "alarm"}),
    (obs.WAKES, 1, {"reason": "signal"}),
    (obs.PARKS, 1, {}),
    (obs.PARKS, 1, {}),
    (obs.WORKER_ACTIONS, 1, {"action": "armed"}),
    (obs.WORKER_ACTIONS, 1, {"action": "idle"}),
    (obs.WORKER_FAILURES, 1, {}),
    (obs.MALFORMED_WAKES, 1, {}),
    (obs.DEAD_LETTERED_WAKES, 1, {}),
    (obs.SIGNAL_RESULTS, 1, {"result": "delivered", "route": "hook"}),
    (obs.SIGNAL_RESULTS, 1, {"result": "duplicate", "route": "signal"}),
    (obs.COMMIT_CONFLICTS, 3, {}),
    (obs.HANDLER_FAILURES, 1, {"function": "api"}),
    (obs.WORKFLOW_NONDETERMINISM, 1, {}),
]


def powertools_documents(counts: list[tuple[str, float, dict[str, str]]], capsys) -> list[Any]:
    """What the services wrote before: one Powertools EMF provider per dimension set."""
    from aws_lambda_powertools.metrics import MetricUnit
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

    blobs: dict[tuple[tuple[str, str], ...], AmazonCloudWatchEMFProvider] = {}
    for name, value, dimensions in counts:
        key = tuple(sorted(dimensions.items()))
        if key not in blobs:
            blobs[key] = AmazonCloudWatchEMFProvider(
                namespace=METRICS_NAMESPACE, service=SERVICE_NAME
            )
            for dimension, dimension_value in key:
                blobs[key].add_dimension(name=dimension, value=dimension_value)
        blobs[key].add_metric(name=name, unit=MetricUnit.Count, value=value)
    capsys.readouterr()
    for blob in blobs.values():
        blob.flush_metrics()
    return emf_lines(capsys.readouterr().out)


@pytest.fixture(name="metrics_on")
def metrics_on_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    obs.flush()  # nothing left over from another test


def flushed(counts: list[tuple[str, float, dict[str, str]]], capsys) -> list[dict[str, Any]]:
    capsys.readouterr()
    for name, value, dimensions in counts:
        obs.count(name, value, **dimensions)
    obs.flush()
    return emf_lines(capsys.readouterr().out)


def test_the_documents_follow_the_specification_and_keep_every_metrics_identity(
    metrics_on, capsys
) -> None:
    docs = flushed(COUNTS, capsys)
    for doc in docs:
        check_document(doc)
    # One document but for the second WorkerActions value (action= cannot hold two values).
    assert len(docs) == 2
    assert [d.get(obs.WORKER_ACTIONS) for d in docs] == [[1], [1]]
    assert {d["action"] for d in docs} == {"armed", "idle"}
    mine = extracted(docs)
    # The same metrics, dimensions (service included), units and values as Powertools wrote.
    assert mine == extracted(powertools_documents(COUNTS, capsys))
    # And each under the dimensions METRICS lists, plus the service dimension.
    for _namespace, name, dims, _unit in mine:
        counted_under = {k: v for k, v in dims if k != obs.SERVICE_DIMENSION}
        assert dict(dims) == obs.emitted_dimensions(name, **counted_under)
    assert {name for _, name, _, _ in mine} == set(obs.METRICS)


def test_counts_that_do_not_clash_make_one_document(metrics_on, capsys) -> None:
    worker = [
        (obs.WAKES, 1, {"reason": "signal"}),
        (obs.WORKER_ACTIONS, 1, {"action": "armed"}),
        (obs.PARKS, 1, {}),
    ]
    [doc] = flushed(worker, capsys)
    check_document(doc)
    assert [d["Dimensions"] for d in doc["_aws"]["CloudWatchMetrics"]] == [
        [["reason", "service"]], [["action", "service"]], [["service"]]
    ]  # fmt: skip
    assert flushed([], capsys) == []  # nothing counted: nothing written


def test_disabled_metrics_write_nothing_and_are_dropped(metrics_on, monkeypatch, capsys) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    assert flushed([(obs.PARKS, 1, {})], capsys) == []
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setenv("POWERTOOLS_DEV", "true")  # explicitly enabled wins over dev mode
    [doc] = flushed([(obs.WAKES, 1, {"reason": "alarm"})], capsys)
    assert obs.PARKS not in doc  # the disabled flush dropped its counts
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED")
    assert flushed([(obs.PARKS, 1, {})], capsys) == []  # dev mode alone disables


def buffer() -> MetricBuffer:
    return MetricBuffer("Ns", lambda: NOW, common={"service": "svc"})


def test_more_than_100_metrics_take_several_directives() -> None:
    counts = buffer()
    for i in range(250):
        counts.add(f"M{i}", i, {"kind": "a"})
    [doc] = counts.drain()
    check_document(doc, now=NOW)
    directives = doc["_aws"]["CloudWatchMetrics"]
    assert [len(d["Metrics"]) for d in directives] == [100, 100, 50]
    assert sum(len(v) for v in extracted([doc]).values()) == 250
    assert counts.drain() == []  # drained


def test_more_than_100_values_of_one_metric_take_several_documents() -> None:
    counts = buffer()
    for i in range(250):
        counts.add("Hits", i, {})
    docs = counts.drain()
    for doc in docs:
        check_document(doc, now=NOW)
    assert [len(doc["Hits"]) for doc in docs] == [100, 100, 50]
    [(identity, values)] = extracted(docs).items()
    assert identity == ("Ns", "Hits", frozenset({("service", "svc")}), "Count")
    assert values == [float(i) for i in range(250)]


def test_a_dimension_or_metric_that_would_change_a_root_member_splits_the_document() -> None:
    counts = buffer()
    counts.add("A", 1, {"x": "1"})
    counts.add("B", 1, {"x": "2"})  # x cannot be 1 and 2 in one document
    counts.add("x", 5, {})  # nor a number where it is a dimension
    counts.add("C", 1, {"x": "1"})  # fits the first
    docs = counts.drain()
    for doc in docs:
        check_document(doc, now=NOW)
    assert [sorted(k for k in d if k != "_aws") for d in docs] == [
        ["A", "C", "service", "x"], ["B", "service", "x"], ["service", "x"]
    ]  # fmt: skip
    assert docs[2]["x"] == [5]


def test_thirty_dimensions_per_set_at_most() -> None:
    counts = buffer()
    ok = {f"d{i}": "v" for i in range(emf.MAX_DIMENSIONS - 1)}  # with service: 30
    counts.add("A", 1, ok)
    with pytest.raises(ValueError, match="at most 30 dimensions"):
        counts.add("B", 1, {**ok, "one_more": "v"})
    [doc] = counts.drain()
    check_document(doc, now=NOW)
    assert "B" not in doc


@pytest.mark.parametrize(
    ("value", "dimensions", "error"),
    [
        (float("nan"), {}, "finite"),
        (float("inf"), {}, "finite"),
        (True, {}, "a number"),
        ("1", {}, "a number"),
        (1, {"d": ""}, "1 to 1024 characters"),
        (1, {"d": "   "}, "not all blank"),
        (1, {"d": "x" * 1025}, "1 to 1024 characters"),
        (1, {"d": "caf\u00e9"}, "printable ASCII"),
        (1, {"d": "a\nb"}, "printable ASCII"),
        (1, {"d": 3}, "must be a string"),
        (1, {"service": "other"}, "clash"),
        (1, {"A": "v"}, "clash"),
    ],
)
def test_bad_counts_are_refused_and_nothing_is_added(value, dimensions, error) -> None:
    counts = buffer()
    with pytest.raises(ValueError, match=error):
        counts.add("A", value, dimensions)
    assert not counts and counts.drain() == []


def test_count_refuses_a_metric_or_dimensions_metrics_does_not_list() -> None:
    with pytest.raises(ValueError, match=r"not in observability\.METRICS"):
        obs.count("Nope")
    with pytest.raises(ValueError, match="counted under dimensions"):
        obs.count(obs.WAKES, route="x")
