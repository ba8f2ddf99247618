"""CloudWatch embedded metric format (EMF): counts buffered, written as few documents as the
specification allows.

A document is one JSON object on one log line: ``_aws.CloudWatchMetrics`` is an array of
metric directives, each with its own dimension sets, and the root holds every dimension's
value and every metric's values. So one document carries counts under different dimension
sets; it cannot carry two values of one root member: two counts under the same dimension
name with different values (``action=armed`` and ``action=idle``), or one metric under two
dimension values, go to separate documents. :meth:`MetricBuffer.documents` packs the counts
into the first document that has room, so it writes one document unless that happens.

The rules followed, from the specification (CloudWatch User Guide, "Specification: Embedded
metric format",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):

* the root is a JSON object with ``_aws``; ``_aws`` has ``Timestamp`` (milliseconds since the
  epoch, an integer) and ``CloudWatchMetrics`` (the directives);
* a directive has ``Namespace``, ``Dimensions`` (an array of dimension sets, each an array of
  root member names) and ``Metrics`` (at most :data:`MAX_METRICS_PER_DIRECTIVE` definitions,
  each a ``Name`` and an optional ``Unit``);
* a dimension set names at most :data:`MAX_DIMENSIONS` dimensions, each a root member whose
  value is a string; a metric is a root member whose value is a number or an array of at
  most :data:`MAX_VALUES` numbers;
* a document is a log event, at most 256 KB (the counts here stay far below).

CloudWatch's own rules on a dimension's value (the ``Dimension`` API type: 1 to 1024 ASCII
characters, not all blank, no control characters) are checked when a count is added, so a
bad value fails the caller instead of silently dropping a metric at ingestion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

MAX_METRICS_PER_DIRECTIVE = 100
MAX_DIMENSIONS = 30
MAX_VALUES = 100
MAX_DIMENSION_VALUE_CHARS = 1024

_Key = tuple[str, tuple[tuple[str, str], ...]]  # (metric name, sorted dimension items)


def _check_dimension(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise ValueError(f"dimension {name!r}: the value must be a string, not {value!r}")
    if not 1 <= len(value) <= MAX_DIMENSION_VALUE_CHARS or not value.strip():
        raise ValueError(
            f"dimension {name!r}: the value must be 1 to {MAX_DIMENSION_VALUE_CHARS} "
            f"characters, not all blank (got {len(value)} characters)"
        )
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"dimension {name!r}: the value must be printable ASCII: {value!r}")


class MetricBuffer:
    """Counts of one namespace, each under its own dimensions plus ``common`` ones (the same
    on every metric: part of each metric's identity), until :meth:`drain`.

    ``unit`` is every metric's unit (a CloudWatch unit name); ``now`` returns the wall time in
    seconds, read when documents are made (the metrics' timestamp)."""

    def __init__(
        self,
        namespace: str,
        now: Callable[[], float],
        *,
        common: Mapping[str, str] | None = None,
        unit: str = "Count",
    ) -> None:
        common = dict(common or {})
        for name, value in common.items():
            _check_dimension(name, value)
        if len(common) > MAX_DIMENSIONS:
            raise ValueError(f"at most {MAX_DIMENSIONS} dimensions, not {len(common)}")
        self.namespace = namespace
        self.common = common
        self.unit = unit
        self._now = now
        self._values: dict[_Key, list[float]] = {}

    def add(self, name: str, value: float, dimensions: Mapping[str, str]) -> None:
        """Add one value of ``name`` under ``dimensions``. ValueError, and nothing added, for
        a value that is not a finite number, a dimension that is also a common one or a
        metric's name, too many dimensions or a dimension value CloudWatch refuses."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"metric {name!r}: the value must be a number, not {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"metric {name!r}: the value must be finite, not {value!r}")
        if not name or name == "_aws":
            raise ValueError(f"metric name {name!r} cannot be a root member of a document")
        clash = sorted((set(dimensions) & set(self.common)) | ({name} & set(dimensions)))
        if clash:
            raise ValueError(f"metric {name!r}: dimensions {clash} clash with a common one")
        if len(dimensions) + len(self.common) > MAX_DIMENSIONS:
            raise ValueError(
                f"metric {name!r}: at most {MAX_DIMENSIONS} dimensions with the common "
                f"ones, not {len(dimensions) + len(self.common)}"
            )
        for dimension, dimension_value in dimensions.items():
            _check_dimension(dimension, dimension_value)
        key = (name, tuple(sorted(dimensions.items())))
        self._values.setdefault(key, []).append(value)

    def __bool__(self) -> bool:
        return bool(self._values)

    def documents(self) -> list[dict[str, Any]]:
        """The EMF documents holding every value added (none when nothing was)."""
        timestamp = int(self._now() * 1000)
        packed: list[_Document] = []
        for (name, dimensions), values in self._values.items():
            for start in range(0, len(values), MAX_VALUES):
                chunk = values[start : start + MAX_VALUES]
                target = next((d for d in packed if d.fits(name, dimensions)), None)
                if target is None:
                    target = _Document(self.common)
                    packed.append(target)
                target.put(name, dimensions, chunk)
        return [d.render(self.namespace, self.unit, timestamp) for d in packed]

    def drain(self) -> list[dict[str, Any]]:
        """:meth:`documents`, then start afresh."""
        try:
            return self.documents()
        finally:
            self._values.clear()


class _Document:
    """One document being packed: its root members and, per dimension set, its metrics."""

    def __init__(self, common: Mapping[str, str]) -> None:
        self.common = tuple(common)
        self.dimensions: dict[str, str] = dict(common)
        self.metrics: dict[str, list[float]] = {}
        self.directives: dict[tuple[str, ...], list[list[str]]] = {}

    def fits(self, name: str, dimensions: tuple[tuple[str, str], ...]) -> bool:
        """Whether ``name`` under ``dimensions`` can join without changing a root member."""
        if name in self.metrics or name in self.dimensions:
            return False
        return all(self.dimensions.get(k, v) == v and k not in self.metrics for k, v in dimensions)

    def put(self, name: str, dimensions: tuple[tuple[str, str], ...], values: list[float]) -> None:
        self.dimensions.update(dimensions)
        self.metrics[name] = values
        names = tuple(sorted({*(k for k, _ in dimensions), *self.common}))
        groups = self.directives.setdefault(names, [])
        if not groups or len(groups[-1]) >= MAX_METRICS_PER_DIRECTIVE:
            groups.append([])
        groups[-1].append(name)

    def render(self, namespace: str, unit: str, timestamp: int) -> dict[str, Any]:
        directives = [
            {
                "Namespace": namespace,
                "Dimensions": [list(names)],
                "Metrics": [{"Name": m, "Unit": unit} for m in group],
            }
            for names, groups in self.directives.items()
            for group in groups
        ]
        root: dict[str, Any] = {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": directives}}
        root.update(self.dimensions)
        root.update(self.metrics)
        return root
