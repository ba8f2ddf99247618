"""What the benches share: fake AWS, boto3 clients, Lambda's SQS records, medians, table rows,
a store wrapper that counts what passes through it, the workflow body that waits for ever.

Not a bench itself: ``make bench`` runs ``bench/bench_*.py`` and this name does not match.
The benches put ``bench/`` on the path by being run from it, so they import it as
``_common``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pydantic import BaseModel

from bide.engine.records import TaskRecord
from bide.engine.signals import SignalToken
from bide.engine.store import Doc, SessionSnapshot, Store, StoreWrapper
from bide.workflow import WorkflowTool, define_workflow_tool

REGION = "us-east-1"
# Fake credentials, no config or credentials file, no instance metadata: nothing a bench does
# can find a real account.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
_PROFILE_VARS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")  # would point boto3 at real credentials


@contextlib.contextmanager
def fake_env() -> Iterator[None]:
    """Fake credentials and no endpoint override or profile; restores the environment
    afterwards."""
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith("AWS_ENDPOINT_URL") or name in _PROFILE_VARS:
                del os.environ[name]
        os.environ.update(FAKE_ENV)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def fake_aws() -> Iterator[None]:
    """:func:`fake_env` (an endpoint override makes ``mock_aws`` stop intercepting), then
    moto's ``mock_aws``."""
    from unittest import mock

    from moto import mock_aws

    # moto refuses a TransactGetItems of more than 25 items, DynamoDB's old limit; it reads up
    # to 100 (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html),
    # which a worker's targeted read of a task and its sealed pages uses.
    limit = mock.patch("moto.dynamodb.responses.TRANSACTION_MAX_ITEMS", 100)
    with fake_env(), mock_aws(), limit:
        yield


def boto3_client(service: str, endpoint: str | None = None) -> Any:
    """A client in :data:`REGION` whose botocore retries are off (one attempt): the code
    under test decides how often to try, and a count of requests counts requests."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "total_max_attempts": 1})
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint, config=config)  # type: ignore[call-overload]


def sqs_record(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An SQS message (as ``ReceiveMessage`` returned it) as Lambda's event source mapping
    hands it to the function; ``extra`` adds fields of the record."""
    attributes = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
            "MessageGroupId": attributes.get("MessageGroupId", ""),
        },
        **extra,
    }


# --- figures and tables -------------------------------------------------------------------------


def median_ms(seconds: Iterable[float]) -> float:
    """The median of durations in seconds, in milliseconds."""
    return statistics.median(seconds) * 1000


def load_line() -> str:
    """The machine's one-minute load average and cores: printed with every timed figure."""
    return f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def cells(values: Sequence[Any], fmt: str = "", width: int = 12) -> str:
    """Right-aligned table cells; a string value is printed as it is."""
    return "".join(f"{v:>{width}}" if isinstance(v, str) else f"{v:>{width}{fmt}}" for v in values)


def row(label: str, values: Sequence[Any], fmt: str = "", *, label_width: int = 26) -> str:
    """One indented table row: a left-aligned label, then :func:`cells`."""
    return f"    {label:<{label_width}}" + cells(values, fmt)


def n_heads(history: Iterable[int]) -> list[str]:
    """Column heads ``N=10``, ``N=1,000``, ... for a table by history length."""
    return [f"N={n:,}" for n in history]


@contextlib.contextmanager
def timed_run() -> Iterator[None]:
    """Print how long the whole bench took, once it is done."""
    began = time.perf_counter()
    try:
        yield
    finally:
        print(f"\ntotal {time.perf_counter() - began:.1f} s")


# --- what a store reads and writes --------------------------------------------------------------


class Counting(StoreWrapper):
    """Counts the JSON bytes of the records and documents read from and written to ``inner``,
    and the task records read (``load`` reads every live one)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.read = 0
        self.written = 0
        self.records_read = 0

    def reset(self) -> None:
        self.read = self.written = self.records_read = 0

    def load(self, session_id: str) -> SessionSnapshot:
        snapshot = self.inner.load(session_id)
        self.read += sum(len(r.to_json().encode()) for r in snapshot.tasks.values())
        self.records_read += len(snapshot.tasks)
        return snapshot

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        record = self.inner.get_task(session_id, task_id)
        self._count(record)
        return record

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        seq, record = self.inner.task_at_head(session_id, task_id)
        self._count(record)
        return seq, record

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        seq, records, docs = self.inner.tasks_at_head(session_id, task_ids, keys)
        self.read += sum(len(r.to_json().encode()) for r in records.values())
        self.read += sum(doc_bytes(d) for d in docs.values())
        self.records_read += len(records)
        return seq, records, docs

    def task_and_doc_at_head(
        self, session_id: str, task_id: str, key: str
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        seq, record, doc = self.inner.task_and_doc_at_head(session_id, task_id, key)
        self._count(record, doc)
        return seq, record, doc

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        doc = self.inner.get_doc(session_id, key)
        self._count(None, doc)
        return doc

    def _count(self, record: TaskRecord | None, doc: Doc | None = None) -> None:
        """One read: the record's JSON bytes (a record read) and the document's, if any."""
        self.read += 0 if record is None else len(record.to_json().encode())
        self.read += 0 if doc is None else doc_bytes(doc)
        self.records_read += record is not None

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[Doc]:
        docs = self.inner.list_docs(session_id, prefix, start_after=start_after, limit=limit)
        self.read += sum(doc_bytes(d) for d in docs)
        return docs

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        self.written += sum(len(r.to_json().encode()) for r in writes)
        self.written += sum(doc_bytes(d) for d in docs)
        return self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)


def doc_bytes(doc: Doc) -> int:
    """A document's key and JSON body, in bytes."""
    return len(doc.key.encode()) + len(json.dumps(doc.body, separators=(",", ":")).encode())


# --- the workflow body the benches time ---------------------------------------------------------


def wait_in_body_tool(
    signal: SignalToken[Any], args: type[BaseModel], description: str
) -> WorkflowTool:
    """The workflow tool ``wait_in_body``: its body waits on ``signal`` for keys k0, k1, k2, ...
    for ever, one operation (two memos) a wait. One builder, so the SDK comparison
    (``bench_durable_sdk``) and the rounds counted on moto (``_workflow_rounds``) time the
    same body."""

    async def wait_in_body(args: Any, ctx: Any) -> Any:
        n = 0
        while True:
            await ctx.wait_for(signal, f"k{n}")
            n += 1

    return define_workflow_tool("wait_in_body", description, args, wait_in_body)
