"""How records and documents become DynamoDB items, and the S3 offload of the large ones.

A commit's records and documents are reduced to the last write of each id and key (a
transaction touches an item once), then serialized and sized before anything is written
(:func:`prepare`). One whose JSON is larger than the offload threshold, or that the item or
transaction size limits would not hold inline, is written to S3 first, under a content-addressed
key, and its item holds the object's bucket, key and SHA-256 digest instead of the JSON
(:func:`to_item`); the digest is checked on every read (:meth:`S3Offload.read_body`). Kept apart
from the store because the size arithmetic and the object keys are their own argument: a
committed reference must never point at nothing or at changed content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..engine.errors import CommitTooLarge, StoreUnavailable
from ..engine.records import TaskRecord
from ..engine.store.base import Doc
from .retention import ENDED_TAG
from .retry import Retrier, new_client
from .table import (
    DOC_PREFIX,
    ITEM_LIMIT,
    LIVE_INDEX_KEY,
    LIVE_PREFIX,
    PARTITION_KEY,
    SORT_KEY,
    SORT_KEY_LIMIT,
    TASK_PREFIX,
    TRANSACTION_LIMIT,
    fits_sort_key,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef
    from mypy_boto3_s3.client import S3Client

    from .table import Item

#: Records and documents whose JSON is larger than this go to S3 by default (when a bucket is
#: configured).
DEFAULT_OFFLOAD_THRESHOLD: Final = 64 * 1024
# The head is updated in place and we never read it while committing, so its full size is
# unknown here; keep room for a head of the largest possible size.
ITEM_BYTES_BUDGET: Final = TRANSACTION_LIMIT - ITEM_LIMIT
# Our size estimate follows DynamoDB's published rules only roughly; stay clear of the edge.
ITEM_MARGIN: Final = 2 * 1024


@dataclass(frozen=True)
class Prepared:
    """One record or document ready to write: its JSON and where it will live."""

    sort_key: str
    body: bytes
    sha256: str
    #: The S3 key it is written to when offloaded (content-addressed).
    object_key: str
    #: The task record, or None for a document.
    record: TaskRecord | None = None
    offload: bool = False

    @property
    def what(self) -> str:
        """Names it in messages."""
        if self.record is not None:
            return f"task {self.record.id!r}"
        return f"document {self.sort_key[len(DOC_PREFIX) :]!r}"


def last_write_per_id(session_id: str, writes: Sequence[TaskRecord]) -> list[TaskRecord]:
    """``writes`` with each id once, at its last write, checked to belong to ``session_id``."""
    # A transaction may not touch one item twice; "insert or replace by id" applied in order
    # means the last write of an id is the one that stays.
    by_id: dict[str, TaskRecord] = {}
    for record in writes:
        if record.session_id != session_id:
            raise ValueError(f"task {record.id!r} belongs to session {record.session_id!r}")
        if not record.id:
            raise ValueError("a task id must not be empty")
        by_id.pop(record.id, None)
        by_id[record.id] = record
    return list(by_id.values())


def last_write_per_key(docs: Sequence[Doc]) -> list[Doc]:
    """``docs`` with each key once, at its last write."""
    # As for records: one action per item, and the last write of a key is the one that stays.
    by_key: dict[str, Doc] = {}
    for doc in docs:
        by_key.pop(doc.key, None)
        by_key[doc.key] = doc
    return list(by_key.values())


def prepare(
    session_id: str,
    records: list[TaskRecord],
    docs: list[Doc],
    *,
    offload_threshold: int,
    bucket: str | None,
) -> list[Prepared]:
    """Serialize, decide what goes to S3 and check every size before anything is written.

    Raises ValueError for a document key too long for a sort key and
    :class:`~bide.engine.errors.CommitTooLarge` when an item or the transaction cannot fit
    DynamoDB even after offloading (or without a ``bucket`` to offload to)."""
    prepared: list[Prepared] = []
    for record in records:
        body = record.to_json().encode()
        sha = hashlib.sha256(body).hexdigest()
        key = f"{session_id}/{record.id}/{record.rev}-{sha}.json"
        prepared.append(Prepared(TASK_PREFIX + record.id, body, sha, key, record))
    for doc in docs:
        sort_key = DOC_PREFIX + doc.key
        if not fits_sort_key(sort_key):
            raise ValueError(
                f"document key {doc.key[:60]!r}... of session {session_id!r} is "
                f"{len(doc.key.encode())} bytes of UTF-8; at most "
                f"{SORT_KEY_LIMIT - len(DOC_PREFIX)} fit a DynamoDB sort key"
            )
        body = dumps(doc.body).encode()
        sha = hashlib.sha256(body).hexdigest()
        key_sha = hashlib.sha256(doc.key.encode()).hexdigest()
        object_key = f"{session_id}/docs/{key_sha}/{sha}.json"
        prepared.append(Prepared(sort_key, body, sha, object_key))

    for n, p in enumerate(prepared):
        too_big_inline = inline_item_size(session_id, p) > ITEM_LIMIT - ITEM_MARGIN
        wants_s3 = len(p.body) > offload_threshold or too_big_inline
        # Without a bucket, a body over the threshold still goes inline if it fits.
        if too_big_inline and bucket is None:
            raise CommitTooLarge(
                f"{p.what} of session {session_id!r} serializes to {len(p.body)} bytes, "
                f"more than a DynamoDB item holds ({ITEM_LIMIT} bytes), and this store has "
                "no S3 bucket to offload it to. Nothing was written: configure a bucket or "
                "keep large values out of task records and documents."
            )
        if wants_s3 and bucket is not None:
            prepared[n] = dataclasses.replace(p, offload=True)

    def total() -> int:
        return sum(item_size(session_id, p) for p in prepared)

    if total() > ITEM_BYTES_BUDGET and bucket is not None:
        # Offload the largest inline items until the transaction fits.
        for i in sorted(range(len(prepared)), key=lambda i: -len(prepared[i].body)):
            if total() <= ITEM_BYTES_BUDGET:
                break
            if not prepared[i].offload:
                prepared[i] = dataclasses.replace(prepared[i], offload=True)
    if total() > ITEM_BYTES_BUDGET:
        raise CommitTooLarge(
            f"commit to session {session_id!r} needs about {total()} bytes of task and "
            f"document items; a DynamoDB transaction holds {TRANSACTION_LIMIT} bytes "
            "including the head. Nothing was written: configure an S3 bucket or split the "
            "commit."
        )
    return prepared


def to_item(
    session_id: str, p: Prepared, wseq: int, bucket: str | None
) -> dict[str, AttributeValueTypeDef]:
    """The task or document item for ``p``, written by the commit of seq ``wseq``: its JSON
    inline, or a reference to its object in ``bucket`` when ``p`` is offloaded."""
    item: dict[str, AttributeValueTypeDef] = {
        PARTITION_KEY: {"S": session_id},
        SORT_KEY: {"S": p.sort_key},
        "wseq": {"N": str(wseq)},
    }
    if p.record is not None:
        item["rev"] = {"N": str(p.record.rev)}
        if p.record.live:
            item[LIVE_INDEX_KEY] = {"S": LIVE_PREFIX + p.record.id}
    if p.offload:
        assert bucket is not None
        item["s3_bucket"] = {"S": bucket}
        item["s3_key"] = {"S": p.object_key}
        item["sha256"] = {"S": p.sha256}
    else:
        item["body"] = {"S": p.body.decode()}
    return item


def item_size(session_id: str, p: Prepared) -> int:
    """About how many bytes ``p``'s item takes in a transaction, as it will be written."""
    if p.offload:
        return 512 + 2 * len(session_id.encode()) + 2 * len(p.sort_key.encode()) + len(p.object_key)
    return inline_item_size(session_id, p)


def inline_item_size(session_id: str, p: Prepared) -> int:
    """About how many bytes ``p``'s item would take with its JSON inline."""
    # Attribute names plus values, as DynamoDB counts them, with the small attributes rounded
    # up generously (the sort key counted twice: a live task's index key repeats its id).
    return len(p.body) + len(session_id.encode()) + 2 * len(p.sort_key.encode()) + 64


def dumps(body: Any) -> str:
    """A document body's JSON."""
    # The same JSON as the SQLite store writes; NaN and infinities are not JSON.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class S3Offload:
    """The S3 side of one store: writes offloaded bodies to ``bucket`` and reads them back
    (from whichever bucket an item names). The client is created on first use when not given,
    with botocore's retries off; calls go through the store's ``retry``."""

    def __init__(self, bucket: str | None, client: S3Client | None, retry: Retrier) -> None:
        self.bucket = bucket
        self._client = client
        self._owns_client = False
        self._retry = retry

    def put(self, p: Prepared, *, ended: bool = False) -> None:
        """Write ``p``'s body to its object (``p`` must be offloaded); ``ended``: for a
        session that has ended, tagged for the bucket's lifecycle rule
        (:mod:`bide.aws.retention`)."""
        # Written before the transaction, so a committed reference never points at nothing.
        # The key is content-addressed: a commit that then fails leaves an unreferenced object
        # behind but never changes an object another commit references, so it is never
        # deleted here (a concurrent winner may have written the very same key).
        assert self.bucket is not None
        bucket, key = self.bucket, p.object_key

        def write() -> object:
            if ended:
                return self._s3().put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=p.body,
                    ContentType="application/json",
                    Tagging=ENDED_TAG,
                )
            return self._s3().put_object(
                Bucket=bucket, Key=key, Body=p.body, ContentType="application/json"
            )

        self._retry.run(f"offload {p.what}", write)

    def client(self) -> S3Client:
        """The S3 client (created now if needed)."""
        return self._s3()

    def read_body(self, item: Item, what: str) -> str | bytes:
        """The JSON of a task or document item: inline, or from S3 with its digest checked."""
        if "body" in item:
            return item["body"]["S"]
        bucket, key, sha = item["s3_bucket"]["S"], item["s3_key"]["S"], item["sha256"]["S"]
        body = self._retry.run(f"read offloaded {what}", lambda: self._get_object(bucket, key))
        if hashlib.sha256(body).hexdigest() != sha:
            raise StoreUnavailable(
                f"offloaded {what} s3://{bucket}/{key} does not match its digest; it was "
                "changed outside bide"
            )
        return body

    def close(self) -> None:
        """Close the client if this object created it."""
        if self._owns_client and self._client is not None:
            self._client.close()
        self._owns_client = False

    def _s3(self) -> S3Client:
        if self._client is None:
            self._client = new_client("s3")
            self._owns_client = True
        return self._client

    def _get_object(self, bucket: str, key: str) -> bytes:
        return self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
