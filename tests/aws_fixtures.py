"""Shared pieces of the AWS store tests: fake credentials, a moto bench, a DynamoDB Local bench
(with S3 from a moto server on 127.0.0.1), client wrappers that serialize or inject faults,
and the record builders the DynamoDB-specific checks (``dynamodb_checks.py`` and
``dynamodb_doc_checks.py``) use.

Nothing here can reach a real AWS endpoint: clients carry fake credentials and either run
inside moto's ``mock_aws`` (with every endpoint override removed, since an override makes moto
stop intercepting) or point at an explicit loopback endpoint.

Import fixtures explicitly (``from aws_fixtures import aws_bench``): ``tests/conftest.py`` is
owned elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from bide.aws.dynamodb import (
    DynamoDBStore,
    create_table,
)
from bide.aws.retention import EXPIRES_AT

REGION = "us-east-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}
LOCAL_ENDPOINT_VAR = "BIDE_DYNAMODB_LOCAL_ENDPOINT"

# botocore's own retries off: the store's retry loop is what these tests exercise.
_NO_SDK_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


def unique(prefix: str) -> str:
    """A fresh name, so tests sharing one table or bucket never see each other's data."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def aws_client(
    service: str, endpoint_url: str | None = None, *, config: Config = _NO_SDK_RETRIES
) -> Any:
    """A boto3 client with fake credentials, optionally on an explicit (loopback) endpoint;
    by default with the SDK's own retries off."""
    return boto3.client(
        service,  # type: ignore[call-overload]
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
        config=config,
    )


def wake_queue(sqs: Any, prefix: str = "wakes", visibility_timeout: int = 30) -> tuple[str, str]:
    """A new FIFO queue for session wakes (a unique name from ``prefix``): its URL and ARN."""
    queue_url = sqs.create_queue(
        QueueName=f"{unique(prefix)}.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": str(visibility_timeout)},
    )["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return queue_url, found["Attributes"]["QueueArn"]


# --- client wrappers --------------------------------------------------------------------------


class LockedClient:
    """Serializes every call made through it (all copies share one lock).

    moto's TransactWriteItems is not thread-safe: it checks conditions and applies items
    without a lock and rolls back by restoring a deep copy of the whole table, so two threads
    can both pass a condition, and a rollback can undo another thread's commit. DynamoDB itself
    serializes conflicting transactions; this wrapper gives moto the same property so the racing
    tests check the store, not moto. (DynamoDB Local needs no such help.)
    """

    def __init__(self, inner: Any, lock: threading.Lock) -> None:
        self._inner = inner
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr) or name in ("get_waiter", "get_paginator"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


Fault = Callable[[Callable[[], Any]], Any]
"""Given the real call (not yet made), do something instead: raise, call then raise, edit."""


def client_error(code: str, operation: str, status: int = 400, **extra: Any) -> ClientError:
    """A ClientError as botocore builds it from an AWS error response."""
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": f"injected {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
        **extra,
    }
    return ClientError(response, operation)  # type: ignore[arg-type]


def fail_before(exc: BaseException) -> Fault:
    """The request never reaches the service."""

    def fault(call: Callable[[], Any]) -> Any:
        raise exc

    return fault


def fail_after(exc: BaseException) -> Fault:
    """The service applies the request, then the answer is lost."""

    def fault(call: Callable[[], Any]) -> Any:
        call()
        raise exc

    return fault


def edit_result(edit: Callable[[Any], Any]) -> Fault:
    """The service answers, and ``edit`` changes the answer (e.g. to fake a torn read)."""

    def fault(call: Callable[[], Any]) -> Any:
        return edit(call())

    return fault


class FaultyClient:
    """Wraps a client: records every call and runs planned faults per operation name.

    ``plan[op]`` is a list consumed one fault per call; ``always[op]`` applies to every call.
    """

    def __init__(
        self,
        inner: Any,
        plan: dict[str, list[Fault]] | None = None,
        always: dict[str, Fault] | None = None,
    ) -> None:
        self._inner = inner
        self.plan = plan or {}
        self.always = always or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr) or name in ("get_waiter", "get_paginator"):
            return attr

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            fault = self.always.get(name)
            if fault is None and self.plan.get(name):
                fault = self.plan[name].pop(0)
            if fault is None:
                return attr(**kwargs)
            return fault(lambda: attr(**kwargs))

        return call

    def count(self, name: str) -> int:
        """How many calls of operation ``name`` were made."""
        return sum(1 for op, _ in self.calls if op == name)


# --- benches ----------------------------------------------------------------------------------


@dataclass
class AwsBench:
    """One DynamoDB table and one S3 bucket (plus clients on them) shared by a module's tests;
    each test uses its own session ids."""

    ddb: Any
    other_ddb: Any  # a second client on the same table, as a second Lambda would hold
    s3: Any
    table: str
    bucket: str
    sleeps: list[float] = field(default_factory=list)

    def store(
        self, client: Any = None, *, bucket: bool = True, real_sleep: bool = False, **kw: Any
    ) -> DynamoDBStore:
        """A store on this bench. ``bucket=False`` gives a store without S3 offload. Backoff
        sleeps are recorded in :attr:`sleeps` instead of slept, unless ``real_sleep`` (short
        real sleeps, for racing writers) or ``sleep`` is given."""
        if real_sleep:
            kw.setdefault("base_delay", 0.002)
            kw.setdefault("max_delay", 0.05)
        else:
            kw.setdefault("sleep", self.sleeps.append)
        return DynamoDBStore(
            self.table,
            client if client is not None else self.ddb,
            bucket=self.bucket if bucket else None,
            s3_client=self.s3,
            **kw,
        )


@contextlib.contextmanager
def fake_aws_environment() -> Iterator[None]:
    """Fake credentials, no profile, no endpoint override (an override disables mock_aws)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_CREDENTIALS.items():
            env.setenv(name, value)
        for name in list(os.environ):
            if name.startswith("AWS_ENDPOINT_URL"):
                env.delenv(name)
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            env.delenv(name, raising=False)
        env.setenv("AWS_CONFIG_FILE", os.devnull)
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        yield


@contextlib.contextmanager
def moto_bench() -> Iterator[AwsBench]:
    """A moto account (``mock_aws``) with a bide table and a bucket. DynamoDB clients are
    serialized with one shared lock (see :class:`LockedClient`)."""
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        lock = threading.Lock()
        ddb = LockedClient(aws_client("dynamodb"), lock)
        other = LockedClient(aws_client("dynamodb"), lock)
        s3 = aws_client("s3")
        table, bucket = "bide-test", "bide-test-offload"
        create_table(ddb, table)
        s3.create_bucket(Bucket=bucket)
        yield AwsBench(ddb, other, s3, table, bucket)


def dynamodb_local_endpoint() -> str:
    """The DynamoDB Local endpoint from the environment, or skip the test with the reason."""
    endpoint = os.environ.get(LOCAL_ENDPOINT_VAR, "").strip()
    if not endpoint:
        pytest.skip(
            f"{LOCAL_ENDPOINT_VAR} is not set: start AWS DynamoDB Local "
            "(scripts/dynamodb_local.sh start PORT) and export its URL to run these tests; "
            "make test starts one for its run"
        )
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if host.endswith(("amazonaws.com", "amazonaws.com.cn", "api.aws")):
        pytest.fail(f"{LOCAL_ENDPOINT_VAR}={endpoint} is a real AWS endpoint; refusing to run")
    return endpoint


@contextlib.contextmanager
def local_bench() -> Iterator[AwsBench]:
    """A table on AWS DynamoDB Local and a bucket on a moto S3 server on 127.0.0.1 (port 0).
    Skips with the reason when ``$BIDE_DYNAMODB_LOCAL_ENDPOINT`` is unset (see
    :func:`dynamodb_local_endpoint`)."""
    endpoint = dynamodb_local_endpoint()
    from moto.server import ThreadedMotoServer

    s3_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3_server.start()
    try:
        host, port = s3_server.get_host_and_port()
        s3 = aws_client("s3", f"http://{host}:{port}")
        ddb = aws_client("dynamodb", endpoint)
        table, bucket = unique("bide-test"), unique("bide-offload")
        create_table(ddb, table)
        s3.create_bucket(Bucket=bucket)
        try:
            other = aws_client("dynamodb", endpoint)
            yield AwsBench(ddb, other, s3, table, bucket)
        finally:
            ddb.delete_table(TableName=table)
    finally:
        s3_server.stop()


BENCHES = {"moto": moto_bench, "dynamodb_local": local_bench}
"""The DynamoDB implementations the store is tested on, by test id. The id ``dynamodb_local``
is what ``make test-py312`` deselects (``-k "not dynamodb_local"``)."""


@pytest.fixture(scope="module", params=list(BENCHES))
def aws_bench(request: pytest.FixtureRequest) -> Iterator[AwsBench]:
    """One bench per DynamoDB implementation, shared by a module's tests (each test uses its
    own session ids). Module-scoped, so pytest runs every test on one bench, tears it down, then
    runs them on the next: moto's ``mock_aws`` is never active while DynamoDB Local runs."""
    with BENCHES[request.param]() as bench:
        yield bench


# --- reading a partition as stored -------------------------------------------------------------


def partition_items(bench: Any, pk: str) -> list[dict[str, Any]]:
    """Every item of partition ``pk`` in the table of ``bench`` (anything with ``ddb`` and
    ``table``, as :class:`AwsBench` and the handler bench have), raw, every page read."""
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {
        "TableName": bench.table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        "ConsistentRead": True,
    }
    while True:
        page = bench.ddb.query(**request)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def expiries(bench: Any, pk: str) -> dict[str, int | None]:
    """Each item of partition ``pk`` by sort key: its TTL expiry (None when unstamped)."""
    return {
        i["sk"]["S"]: (int(i[EXPIRES_AT]["N"]) if EXPIRES_AT in i else None)
        for i in partition_items(bench, pk)
    }


# --- DynamoDB-specific checks -----------------------------------------------------------------

_rev = itertools.count(1)


def throttled(operation: str) -> ClientError:
    """DynamoDB's answer when a table's throughput is exceeded."""
    return client_error("ProvisionedThroughputExceededException", operation)
