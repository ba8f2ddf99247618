"""The clouds the race proofs (``tests/test_proof_races.py``) run on, and the throttling
injected into them: boto3 clients on a moto server at 127.0.0.1 and on AWS DynamoDB Local,
with a share of requests answered as AWS answers when it throttles.

moto's own transactions are not thread-safe, so calls to the moto server's DynamoDB are
serialized by the client (:class:`aws_fixtures.LockedClient`), as DynamoDB serializes
conflicting transactions; DynamoDB Local needs no such help. The rig and the race on these
clouds are ``tests/race_kit.py``.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

pytest.register_assert_rewrite("aws_fixtures")
from aws_fixtures import (  # noqa: E402
    FaultyClient,
    LockedClient,
    aws_client,
    dynamodb_local_endpoint,
    fake_aws_environment,
    throttled,
    unique,
)

#: The share of calls and requests a throttled rig answers with a throttling error.
THROTTLE_SHARE = 0.2


def client(service: str, endpoint: str, *, sdk_attempts: int) -> Any:
    """A boto3 client on a loopback endpoint with fake credentials. DynamoDB makes one attempt
    (the store retries); SQS and Scheduler use the SDK's standard retries, as deployed."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": sdk_attempts},
        max_pool_connections=32,
        connect_timeout=5,
        read_timeout=30,
    )
    return aws_client(service, endpoint, config=config)


@dataclass
class Cloud:
    """Clients on 127.0.0.1 and the shared bucket and schedule group."""

    name: str
    ddb: Any
    s3: Any
    sqs: Any
    scheduler: Any
    bucket: str
    group: str


@contextlib.contextmanager
def serve_moto() -> Iterator[str]:
    """A moto server on 127.0.0.1 (a free port) for the block; yields its address."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1"
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def open_cloud(name: str, moto_server: str) -> Iterator[Cloud]:
    """Clients for one cloud: ``"moto server"`` (everything on moto) or ``"DynamoDB Local"``
    (DynamoDB there, the rest on moto)."""
    local = dynamodb_local_endpoint() if name == "DynamoDB Local" else None
    with fake_aws_environment():
        lock = threading.Lock()

        def on_moto(service: str, attempts: int) -> Any:
            return LockedClient(client(service, moto_server, sdk_attempts=attempts), lock)

        ddb = client("dynamodb", local, sdk_attempts=1) if local else on_moto("dynamodb", 1)
        s3 = client("s3", moto_server, sdk_attempts=1)
        sqs = client("sqs", moto_server, sdk_attempts=3)
        scheduler = client("scheduler", moto_server, sdk_attempts=3)
        bucket, group = unique("race-offload"), unique("race-alarms")
        s3.create_bucket(Bucket=bucket)
        scheduler.create_schedule_group(Name=group)
        yield Cloud(name, ddb, s3, sqs, scheduler, bucket, group)


# --- injected throttling -------------------------------------------------------------------------


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data

    def read(self, *_: Any, **__: Any) -> bytes:
        return self._data


def throttle_requests(raw_client: Any, share: float, seed: int, tally: Counter[str]) -> None:
    """Answer a share of the client's HTTP requests with ``400 ThrottlingException`` before
    they are sent (botocore's ``before-send`` hook): the SDK's retry logic sees exactly what
    AWS would send when throttling."""
    rng = random.Random(seed)
    lock = threading.Lock()
    service = raw_client.meta.service_model.service_name
    seen = [0]

    def maybe_throttle(request: Any, **_: Any) -> AWSResponse | None:
        with lock:
            # The first request of each client is always throttled, so every service's retry
            # path is exercised however few calls a run happens to make.
            seen[0] += 1
            hit = seen[0] == 1 or rng.random() < share
        if not hit:
            return None
        tally[f"{service} throttled"] += 1
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
        headers = {
            "x-amzn-ErrorType": "ThrottlingException",
            "Content-Type": "application/x-amz-json-1.0",
        }
        return AWSResponse(request.url, 400, headers, _Body(body.encode()))

    raw_client.meta.events.register("before-send", maybe_throttle)


def throttle_calls(inner: Any, share: float, seed: int, tally: Counter[str]) -> FaultyClient:
    """DynamoDB with a share of calls answered ``ProvisionedThroughputExceededException``
    (not applied): the store's own retry loop must absorb them."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def fault(operation: str) -> Callable[[Callable[[], Any]], Any]:
        def run(call: Callable[[], Any]) -> Any:
            with lock:
                hit = rng.random() < share
            if hit:
                tally["dynamodb throttled"] += 1
                raise throttled(operation)
            return call()

        return run

    operations = {"transact_write_items": "TransactWriteItems", "query": "Query"}
    operations["get_item"] = "GetItem"
    return FaultyClient(inner, always={op: fault(name) for op, name in operations.items()})
