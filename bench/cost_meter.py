"""Metering for ``bench_cost.py``: every AWS request the handlers' boto3 session makes, by
service and operation, with the DynamoDB request units and SQS chunks it costs under AWS's
rules (``cost_model``), and the CPU time moto and the metering spend (taken off the handlers'
measured CPU time)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cost_model as cm
from bench_aws_requests import item_bytes

from bide.aws.table import LIVE_INDEX_KEY, PARTITION_KEY, SORT_KEY


@dataclass
class Round:
    """What one signal-resumed wait used."""

    requests: Counter[str] = field(default_factory=Counter)  # "service:Operation"
    wru: float = 0.0
    wru_index: float = 0.0
    rru: float = 0.0
    sqs_chunks: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)  # function -> CPU seconds
    log_bytes: int = 0
    apigw: int = 0


class Meter:
    """Counts the hooked session's AWS calls into the current :class:`Round`; measures the CPU
    time moto and the meter itself spend, so it can be taken off the handlers' time."""

    def __init__(self, inspector: Any) -> None:
        self.inspector = inspector  # another session's client: reads items, uncounted
        self.round: Round | None = None
        self.overhead_s = 0.0  # CPU not the handlers': moto serving requests, the meter
        self._inside = False
        self._before: list[dict[str, Any]] = []
        self._params: dict[str, Any] = {}

    def install(self, events: Any) -> None:
        events.register("before-parameter-build.*.*", self._timed(self._before_call))
        events.register("after-call.*.*", self._timed(self._after_call))

    def _timed(self, hook: Any) -> Any:
        def run(**kwargs: Any) -> None:
            began = time.thread_time()
            self._inside = True
            try:
                hook(**kwargs)
            finally:
                self._inside = False
                self.overhead_s += time.thread_time() - began

        return run

    @contextlib.contextmanager
    def moto_timed(self) -> Iterator[None]:
        """Time moto's request handling (the stub that answers every botocore request)."""
        from moto.core.botocore_stubber import BotocoreStubber

        original = BotocoreStubber.__call__

        def timed(stub: Any, *args: Any, **kwargs: Any) -> Any:
            if self._inside:
                return original(stub, *args, **kwargs)
            began = time.thread_time()
            try:
                return original(stub, *args, **kwargs)
            finally:
                self.overhead_s += time.thread_time() - began

        BotocoreStubber.__call__ = timed  # type: ignore[method-assign]
        try:
            yield
        finally:
            BotocoreStubber.__call__ = original  # type: ignore[method-assign]

    def _before_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self.round is None:
            return
        service = model.service_model.service_name
        self._params = params
        self.round.requests[f"{service}:{model.name}"] += 1
        if service == "sqs" and model.name == "SendMessage":
            self.round.sqs_chunks += cm.sqs_chunks(len(params["MessageBody"].encode()))
        elif service == "sqs":
            self.round.sqs_chunks += 1
        if model.name == "TransactWriteItems":
            self._before = [self._item(a) for a in params["TransactItems"]]
        elif model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            self._before = [self._item({model.name[:-4]: params})]

    def _after_call(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        r, params = self.round, self._params
        if r is None or model.service_model.service_name != "dynamodb":
            return
        name = model.name
        if name in ("TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem"):
            actions = (
                params["TransactItems"] if name == "TransactWriteItems" else [{name[:-4]: params}]
            )
            factor = 2 if name == "TransactWriteItems" else 1
            for action, old in zip(actions, self._before, strict=True):
                new = self._item(action)
                size = max(item_bytes(old), item_bytes(new))
                r.wru += factor * cm.write_units(size)
                r.wru_index += _index_writes(old, new)
        elif name == "GetItem":
            units = cm.read_units(self._read_size(params, parsed.get("Item")))
            r.rru += units if params.get("ConsistentRead") else units / 2
        elif name == "Query":
            units = cm.read_units(sum(item_bytes(i) for i in parsed.get("Items", [])))
            r.rru += units if params.get("ConsistentRead") else units / 2
        elif name == "TransactGetItems":
            gets = [action["Get"] for action in params["TransactItems"]]
            for get, response in zip(gets, parsed.get("Responses", []), strict=True):
                r.rru += 2 * cm.read_units(self._read_size(get, response.get("Item")))

    def _read_size(self, request: dict[str, Any], returned: dict[str, Any] | None) -> int:
        """The size a read is billed by: the whole item's, even when a projection returned
        only some attributes ("Projection expression has no effect on provisioned throughput
        consumption. DynamoDB determines capacity units consumed based on item size":
        https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ProjectionExpressions.html)."""
        if not returned:
            return 0
        if "ProjectionExpression" not in request:
            return item_bytes(returned)
        return item_bytes(self._item({"Get": request}))

    def _item(self, action: dict[str, Any]) -> dict[str, Any]:
        """The item an action targets, as stored now (empty when absent or a check)."""
        ((kind, body),) = action.items()
        if kind == "ConditionCheck":
            return {}
        key = body.get("Key")
        if key is None:
            item = body["Item"]
            key = {k: item[k] for k in (PARTITION_KEY, SORT_KEY)}
        found = self.inspector.get_item(TableName=body["TableName"], Key=key, ConsistentRead=True)
        return dict(found.get("Item") or {})


def _index_writes(old: dict[str, Any], new: dict[str, Any]) -> float:
    """Write units the live index (projection ALL) costs for one item changing old -> new:
    one write of the entry when it is put, updated or removed, two when its key changes."""
    before, after = old.get(LIVE_INDEX_KEY), new.get(LIVE_INDEX_KEY)
    if before is None and after is None:
        return 0.0
    if before is not None and after is not None and before != after:
        return float(cm.write_units(item_bytes(old)) + cm.write_units(item_bytes(new)))
    return float(cm.write_units(item_bytes(new if after is not None else old)))
