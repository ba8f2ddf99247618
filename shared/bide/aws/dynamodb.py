"""The AWS store: one DynamoDB table, one partition per session, large records in S3.

Item layout (``pk`` = session id):

``sk = "HEAD"``
    The session head: ``seq``, the *live manifest* ``live = {task id: wseq}`` and ``txn``,
    the request token of the commit that wrote it. Its index key ``lsk`` is ``"HEAD"``.
``sk = "T#<task id>"``
    One item per task, live or ended: the record's JSON in ``body`` (or a reference to an S3
    object holding it) and ``wseq``, the seq of the commit that wrote it. Live tasks also carry
    the index key ``lsk = "L#<task id>"``; ended tasks do not.
``sk = "D#<document key>"``
    One item per document: its JSON in ``body`` (or a reference to an S3 object) and ``wseq``.
    Never an ``lsk``, so documents stay out of :meth:`~DynamoDBStore.load`; they are read with
    one GetItem (:meth:`~DynamoDBStore.get_doc`) or one Query on the ``D#<prefix>`` range of
    the session's partition (:meth:`~DynamoDBStore.list_docs`), in key order.

The local secondary index ``live`` on (``pk``, ``lsk``) is sparse: it holds the head and the
live tasks of each session and nothing else, so :meth:`DynamoDBStore.load` is one strongly
consistent Query whose cost follows the live set, never the session's history. A local (not
global) index because only local indexes can be read with ``ConsistentRead``. One item per
task (rather than moving items between "live" and "ended" sort keys) keeps every task write
one transaction action, so a commit of 99 writes always fits DynamoDB's 100-action limit
whatever mix of live and ended records it holds, and :meth:`~DynamoDBStore.get_task` is one
GetItem. The price: an item collection (one session, table plus index) is capped at 10 GB.

Every commit is one ``TransactWriteItems``: the head, conditioned on the expected seq, plus one
unconditional Put per task and per document, so a commit holds at most
:data:`~bide.engine.store.base.MAX_COMMIT_ITEMS` (99) records and documents together. A record or
document whose JSON is larger than the offload threshold (or that the item or transaction size
limits would not hold) is written to S3 first, under a content-addressed key, and its item
holds the object's bucket, key and SHA-256 digest, checked on every read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ..engine.errors import CommitTooLarge, ConflictError, StoreUnavailable
from ..engine.records import TaskRecord
from ..engine.store.base import MAX_COMMIT_ITEMS, Doc, SessionSnapshot

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        CreateTableInputTypeDef,
        QueryInputTypeDef,
        TransactWriteItemTypeDef,
    )
    from mypy_boto3_s3.client import S3Client

    Item = Mapping[str, AttributeValueTypeDef]

T = TypeVar("T")

# --- table layout (create_table and infrastructure code must agree on these) ----------------

PARTITION_KEY: Final = "pk"
SORT_KEY: Final = "sk"
LIVE_INDEX: Final = "live"
LIVE_INDEX_KEY: Final = "lsk"
HEAD_SORT_KEY: Final = "HEAD"
_TASK_PREFIX: Final = "T#"
_LIVE_PREFIX: Final = "L#"
_DOC_PREFIX: Final = "D#"

# --- DynamoDB limits ------------------------------------------------------------------------

#: Record and document writes per commit (the Store contract's limit): a transaction holds at
#: most 100 actions and one is the head.
MAX_TASK_WRITES: Final = MAX_COMMIT_ITEMS
#: DynamoDB's item size limit.
ITEM_LIMIT: Final = 400 * 1024
#: Records and documents whose JSON is larger than this go to S3 by default (when a bucket is
#: configured).
DEFAULT_OFFLOAD_THRESHOLD: Final = 64 * 1024
_TRANSACTION_LIMIT: Final = 4 * 1024 * 1024
_TRANSACTION_ACTIONS: Final = 100
assert MAX_TASK_WRITES + 1 <= _TRANSACTION_ACTIONS  # the head is one action more
# The head is updated in place and we never read it while committing, so its full size is
# unknown here; keep room for a head of the largest possible size.
_ITEM_BYTES_BUDGET: Final = _TRANSACTION_LIMIT - ITEM_LIMIT
# DynamoDB's limit on a sort key value, in bytes of UTF-8: a document key may use all of it
# but its "D#".
_SORT_KEY_LIMIT: Final = 1024
# Our size estimate follows DynamoDB's published rules only roughly; stay clear of the edge.
_ITEM_MARGIN: Final = 2 * 1024

# --- conditions -----------------------------------------------------------------------------

# The first commit of a session creates its head. Two writers that both saw an empty session
# must not both succeed: the second one would silently overwrite the first one's head.
_HEAD_ABSENT: Final = "attribute_not_exists(#pk)"

# Every later commit is the optimistic-concurrency guard of the whole design: the head (and so
# every task write in the same transaction) is written only if nobody committed since the
# writer loaded. A missing head fails this too (a session never written has seq 0).
_HEAD_AT_EXPECTED_SEQ: Final = "#seq = :expected"

# Task Puts carry no condition of their own on purpose: the head's condition decides for the
# whole transaction, and a per-task condition would only add ways to fail that we would have
# to classify.

# Load reads the head and the live tasks of one session, all of them in the sparse index.
_SESSION_PARTITION: Final = "#pk = :pk"

# list_docs reads one key range of the table: the session's documents under a prefix. A key
# condition takes one range operator on the sort key, so "after start_after" cannot be a second
# one next to begins_with; it is the Query's ExclusiveStartKey instead (a key need not exist to
# start after it, and it lies inside the range whenever start_after starts with the prefix,
# the only case that needs it). The range's end stays the service's business: no reading past
# the prefix and stopping on the client.
_DOCS_UNDER_PREFIX: Final = "#pk = :pk AND begins_with(#sk, :prefix)"

# --- retry classification -------------------------------------------------------------------

# Errors after which the request certainly or possibly did not apply, and where sending it
# again is safe: reads are idempotent, and a commit is resent with the same ClientRequestToken
# and the same seq condition, so it can never apply twice.
_TRANSIENT_CODES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "TransactionConflictException",
        # The first attempt of this very commit is still running; wait and ask again.
        "TransactionInProgressException",
        # S3
        "SlowDown",
        "InternalError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# Per-action reasons in a TransactionCanceledException that say "try again", not "no".
_TRANSIENT_CANCELLATIONS: Final = frozenset(
    {"TransactionConflict", "ProvisionedThroughputExceeded", "ThrottlingError"}
)


@dataclass(frozen=True)
class _Prepared:
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
        return f"document {self.sort_key[len(_DOC_PREFIX) :]!r}"


class DynamoDBStore:
    """A :class:`~bide.engine.store.Store` on one DynamoDB table (see :func:`create_table`), with
    records and documents larger than ``offload_threshold`` bytes of JSON kept in the S3
    ``bucket``.

    Safe to share between threads. Throttling and transient failures are retried up to
    ``max_attempts`` times with capped, jittered exponential backoff (``sleep`` is injectable
    so tests do not wait), then :class:`~bide.engine.errors.StoreUnavailable` is raised. A
    :class:`~bide.engine.errors.ConflictError` is never retried here: the caller must reload.

    When ``client``/``s3_client`` are not given, clients are created with botocore's own
    retries turned off so that this class alone decides how often to try. Clients passed in
    keep their configuration; their retries multiply with ours.
    """

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        bucket: str | None = None,
        s3_client: S3Client | None = None,
        offload_threshold: int = DEFAULT_OFFLOAD_THRESHOLD,
        *,
        max_attempts: int = 8,
        base_delay: float = 0.05,
        max_delay: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if offload_threshold < 0:
            raise ValueError("offload_threshold must be >= 0")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.table_name = table_name
        self.bucket = bucket
        self.offload_threshold = offload_threshold
        self._owns_clients: list[Any] = []
        if client is None:
            client = _new_client("dynamodb")
            self._owns_clients.append(client)
        self._ddb: DynamoDBClient = client
        self._s3: S3Client | None = s3_client
        self._max_attempts = max_attempts
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._sleep = sleep
        self._rng = random.Random()
        self._closed = False

    # --- Store protocol ---------------------------------------------------------------------

    def load(self, session_id: str) -> SessionSnapshot:
        """The session's head and live tasks, as one consistent snapshot.

        A Query is only *read-committed* with respect to transactions: while a commit is being
        applied it may return some of that commit's items new and others old, and re-reading
        the head afterwards does not close the gap (two single-item reads may be serialized on
        different sides of one transaction). So the check is on the data itself: the head
        carries the manifest of its live set, ``{task id: seq of the commit that last wrote
        it}``. A task is written at most once per commit, so (id, wseq) names exactly one
        version of a record; when the Query returns exactly the manifest's ids at exactly the
        manifest's wseqs, the snapshot *is* the committed state at the head's seq, whatever
        interleaving happened. Anything else (a commit landed mid-read) is read again.
        """
        self._check_open()
        for attempt in range(1, self._max_attempts + 1):
            items = self._retrying("load", lambda: self._query_live(session_id))
            head: Item | None = None
            found: dict[str, int] = {}
            task_items: list[Item] = []
            for item in items:
                if item[SORT_KEY]["S"] == HEAD_SORT_KEY:
                    head = item
                else:
                    found[_task_id(item)] = int(item["wseq"]["N"])
                    task_items.append(item)
            seq = 0 if head is None else int(head["seq"]["N"])
            manifest = {} if head is None else _manifest(head)
            if found == manifest:
                tasks = {
                    _task_id(i): TaskRecord.from_json(self._read_body(i, "record"))
                    for i in task_items
                }
                return SessionSnapshot(session_id, seq, tasks)
            if attempt < self._max_attempts:
                self._sleep(self._backoff(attempt))
        raise StoreUnavailable(
            f"session {session_id!r} kept changing while it was loaded "
            f"({self._max_attempts} attempts); try again later"
        )

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """One task, live or ended (one strongly consistent GetItem), or None."""
        self._check_open()
        key: dict[str, AttributeValueTypeDef] = {
            PARTITION_KEY: {"S": session_id},
            SORT_KEY: {"S": _TASK_PREFIX + task_id},
        }
        out = self._retrying(
            "get_task",
            lambda: self._ddb.get_item(TableName=self.table_name, Key=key, ConsistentRead=True),
        )
        item = out.get("Item")
        return None if item is None else TaskRecord.from_json(self._read_body(item, "record"))

    def head(self, session_id: str) -> int:
        """The session's sequence number (0 when never written)."""
        self._check_open()
        out = self._retrying(
            "head",
            lambda: self._ddb.get_item(
                TableName=self.table_name,
                Key={PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
                ConsistentRead=True,
                ProjectionExpression="#seq",
                ExpressionAttributeNames={"#seq": "seq"},
            ),
        )
        item = out.get("Item")
        return 0 if item is None else int(item["seq"]["N"])

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
    ) -> int:
        """Write ``writes`` and ``docs`` and advance the seq to ``expected_seq + 1`` in one
        transaction.

        Raises :class:`~bide.engine.errors.ConflictError` (nothing written) when the stored
        seq is not ``expected_seq``; the error's ``actual_seq`` comes from the head the failed
        condition returned, not from a second read. Raises
        :class:`~bide.engine.errors.CommitTooLarge` (nothing written, S3 included) when
        ``writes`` and ``docs`` hold more than :data:`~bide.engine.store.base.MAX_COMMIT_ITEMS`
        (99) items together, or a record, a document or the whole transaction cannot fit
        DynamoDB even after offloading. When one record id
        or one document key appears several times, the last one wins. Raises ValueError for a
        record of another session, an empty task id or a document key longer than 1022 bytes
        of UTF-8 (a DynamoDB sort key holds 1024), and TypeError or ValueError for a document
        body that is not JSON; nothing is written then either.
        """
        self._check_open()
        if expected_seq < 0:
            raise ValueError("expected_seq must be >= 0")
        # Counted as given, before repeated ids and keys collapse, as every store counts.
        if len(writes) + len(docs) > MAX_COMMIT_ITEMS:
            raise CommitTooLarge(
                f"commit to session {session_id!r} writes {len(writes)} records and "
                f"{len(docs)} documents; a commit holds at most {MAX_COMMIT_ITEMS} together "
                f"(a DynamoDB transaction holds {_TRANSACTION_ACTIONS} actions and one is the "
                "head). Nothing was written: split the work into several commits."
            )
        records = _last_write_per_id(session_id, writes)
        documents = _last_write_per_key(docs)
        prepared = self._plan(session_id, records, documents)
        new_seq = expected_seq + 1
        # One token for every attempt of this commit: DynamoDB answers a resent, already
        # applied transaction with success instead of applying it again (10 minute window).
        token = secrets.token_hex(16)
        for p in prepared:
            if p.offload:
                self._put_object(p)
        actions = [self._head_action(session_id, expected_seq, token, records)]
        actions += [self._put_action(session_id, new_seq, p) for p in prepared]
        self._retrying("commit", lambda: self._transact(session_id, expected_seq, token, actions))
        return new_seq

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """One document (one strongly consistent GetItem), or None."""
        self._check_open()
        sort_key = _DOC_PREFIX + key
        if not _fits_sort_key(sort_key):
            return None  # no document can have this key
        item_key: dict[str, AttributeValueTypeDef] = {
            PARTITION_KEY: {"S": session_id},
            SORT_KEY: {"S": sort_key},
        }
        out = self._retrying(
            "get_doc",
            lambda: self._ddb.get_item(
                TableName=self.table_name, Key=item_key, ConsistentRead=True
            ),
        )
        item = out.get("Item")
        return None if item is None else self._doc_from_item(item)

    def list_docs(
        self,
        session_id: str,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> list[Doc]:
        """Documents whose key starts with ``prefix`` and sorts after ``start_after``, in key
        order (of the keys' UTF-8 bytes, which is Python's ``str`` order), at most ``limit``.

        One strongly consistent Query on the session's ``D#<prefix>`` range, paged as
        DynamoDB pages it (about 1 MB a page) and asking for no more items than ``limit``
        still needs. Each page is read-committed with respect to commits, but the pages of one
        call are not one snapshot: a commit landing between two pages shows in the later ones
        only.
        """
        self._check_open()
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        if limit == 0 or not _fits_sort_key(_DOC_PREFIX + prefix):
            return []  # nothing asked for, or no key can be that long
        after: str | None = None
        if start_after is not None and start_after >= prefix:
            if not start_after.startswith(prefix):
                return []  # start_after sorts after every key under the prefix
            after = start_after
        request: QueryInputTypeDef = {
            "TableName": self.table_name,
            "KeyConditionExpression": _DOCS_UNDER_PREFIX,
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#sk": SORT_KEY},
            "ExpressionAttributeValues": {
                ":pk": {"S": session_id},
                ":prefix": {"S": _DOC_PREFIX + prefix},
            },
            "ConsistentRead": True,
        }
        if after is not None and _fits_sort_key(_DOC_PREFIX + after):
            request["ExclusiveStartKey"] = {
                PARTITION_KEY: {"S": session_id},
                SORT_KEY: {"S": _DOC_PREFIX + after},
            }
        # A start_after too long to be a key is skipped to on the client instead (the check
        # is a no-op otherwise).
        docs: list[Doc] = []
        while True:
            if limit is not None:
                request["Limit"] = limit - len(docs)
            page = self._retrying("list_docs", lambda: self._ddb.query(**request))
            for item in page.get("Items", []):
                if after is not None and _doc_key(item) <= after:
                    continue
                docs.append(self._doc_from_item(item))
                if limit is not None and len(docs) >= limit:
                    return docs
            last = page.get("LastEvaluatedKey")
            if not last:
                return docs
            request["ExclusiveStartKey"] = last

    def close(self) -> None:
        """Close the clients this store created. The store may not be used afterwards."""
        self._closed = True
        for client in self._owns_clients:
            client.close()
        self._owns_clients.clear()

    # --- commit -----------------------------------------------------------------------------

    def _plan(self, session_id: str, records: list[TaskRecord], docs: list[Doc]) -> list[_Prepared]:
        """Serialize, decide what goes to S3 and check every size before anything is written."""
        prepared: list[_Prepared] = []
        for record in records:
            body = record.to_json().encode()
            sha = hashlib.sha256(body).hexdigest()
            key = f"{session_id}/{record.id}/{record.rev}-{sha}.json"
            prepared.append(_Prepared(_TASK_PREFIX + record.id, body, sha, key, record))
        for doc in docs:
            sort_key = _DOC_PREFIX + doc.key
            if not _fits_sort_key(sort_key):
                raise ValueError(
                    f"document key {doc.key[:60]!r}... of session {session_id!r} is "
                    f"{len(doc.key.encode())} bytes of UTF-8; at most "
                    f"{_SORT_KEY_LIMIT - len(_DOC_PREFIX)} fit a DynamoDB sort key"
                )
            body = _dumps(doc.body).encode()
            sha = hashlib.sha256(body).hexdigest()
            key_sha = hashlib.sha256(doc.key.encode()).hexdigest()
            object_key = f"{session_id}/docs/{key_sha}/{sha}.json"
            prepared.append(_Prepared(sort_key, body, sha, object_key))

        for n, p in enumerate(prepared):
            too_big_inline = _inline_item_size(session_id, p) > ITEM_LIMIT - _ITEM_MARGIN
            wants_s3 = len(p.body) > self.offload_threshold or too_big_inline
            # Without a bucket, a body over the threshold still goes inline if it fits.
            if too_big_inline and self.bucket is None:
                raise CommitTooLarge(
                    f"{p.what} of session {session_id!r} serializes to {len(p.body)} bytes, "
                    f"more than a DynamoDB item holds ({ITEM_LIMIT} bytes), and this store has "
                    "no S3 bucket to offload it to. Nothing was written: configure a bucket or "
                    "keep large values out of task records and documents."
                )
            if wants_s3 and self.bucket is not None:
                prepared[n] = dataclasses.replace(p, offload=True)

        def total() -> int:
            return sum(_item_size(session_id, p) for p in prepared)

        if total() > _ITEM_BYTES_BUDGET and self.bucket is not None:
            # Offload the largest inline items until the transaction fits.
            for i in sorted(range(len(prepared)), key=lambda i: -len(prepared[i].body)):
                if total() <= _ITEM_BYTES_BUDGET:
                    break
                if not prepared[i].offload:
                    prepared[i] = dataclasses.replace(prepared[i], offload=True)
        if total() > _ITEM_BYTES_BUDGET:
            raise CommitTooLarge(
                f"commit to session {session_id!r} needs about {total()} bytes of task and "
                f"document items; a DynamoDB transaction holds {_TRANSACTION_LIMIT} bytes "
                "including the head. Nothing was written: configure an S3 bucket or split the "
                "commit."
            )
        return prepared

    def _head_action(
        self, session_id: str, expected_seq: int, token: str, records: list[TaskRecord]
    ) -> TransactWriteItemTypeDef:
        """The head's write: the seq guard, the new seq and token, and the manifest updated for
        the task writes (documents are not in the manifest)."""
        new_seq = str(expected_seq + 1)
        if expected_seq == 0:
            live: dict[str, AttributeValueTypeDef] = {
                r.id: {"N": new_seq} for r in records if r.live
            }
            return {
                "Put": {
                    "TableName": self.table_name,
                    "Item": {
                        PARTITION_KEY: {"S": session_id},
                        SORT_KEY: {"S": HEAD_SORT_KEY},
                        LIVE_INDEX_KEY: {"S": HEAD_SORT_KEY},
                        "seq": {"N": new_seq},
                        "txn": {"S": token},
                        "live": {"M": live},
                    },
                    "ConditionExpression": _HEAD_ABSENT,
                    "ExpressionAttributeNames": {"#pk": PARTITION_KEY},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        names = {"#seq": "seq", "#txn": "txn"}
        sets = ["#seq = :next", "#txn = :txn"]
        removes: list[str] = []
        for n, r in enumerate(records):
            # DynamoDB rejects unused placeholders, so "#live" only comes with a task write.
            names["#live"] = "live"
            names[f"#t{n}"] = r.id
            if r.live:
                sets.append(f"#live.#t{n} = :next")
            else:
                removes.append(f"#live.#t{n}")
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
                "UpdateExpression": update,
                "ConditionExpression": _HEAD_AT_EXPECTED_SEQ,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {
                    ":expected": {"N": str(expected_seq)},
                    ":next": {"N": new_seq},
                    ":txn": {"S": token},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _put_action(self, session_id: str, new_seq: int, p: _Prepared) -> TransactWriteItemTypeDef:
        item = _item(session_id, p, new_seq, self.bucket)
        return {"Put": {"TableName": self.table_name, "Item": item}}

    def _transact(
        self,
        session_id: str,
        expected_seq: int,
        token: str,
        actions: list[TransactWriteItemTypeDef],
    ) -> None:
        """One attempt. Returns on success; raises the domain error for a definite "no";
        lets transient errors through for :meth:`_retrying`."""
        try:
            self._ddb.transact_write_items(TransactItems=actions, ClientRequestToken=token)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = exc.response.get("Error", {}).get("Message", "")
            if code == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons", [])
                if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                    # The head is action 0; ALL_OLD put the head as it stands into the reason.
                    old: dict[str, Any] = dict(reasons[0].get("Item", {}))
                    actual = 0 if not old else int(old["seq"]["N"])
                    if old and old.get("txn", {}).get("S") == token:
                        # An earlier attempt of this very commit was applied and its answer
                        # lost (DynamoDB normally answers the resent request with success
                        # itself; this covers the token window and emulators). Success.
                        return
                    raise ConflictError(session_id, expected_seq, actual) from None
                codes = {r.get("Code") for r in reasons}
                if "ItemCollectionSizeLimitExceeded" in codes:
                    raise CommitTooLarge(
                        f"session {session_id!r} has reached DynamoDB's 10 GB item collection "
                        "limit; nothing was written"
                    ) from exc
                if "ValidationError" in codes and "size" in message.lower():
                    raise CommitTooLarge(
                        f"DynamoDB refused the commit to session {session_id!r} as too large "
                        f"({message}); nothing was written"
                    ) from exc
            elif code == "ValidationException" and "size" in message.lower():
                raise CommitTooLarge(
                    f"DynamoDB refused the commit to session {session_id!r} as too large "
                    f"({message}); nothing was written"
                ) from exc
            raise

    # --- reads ------------------------------------------------------------------------------

    def _query_live(self, session_id: str) -> list[Item]:
        request: QueryInputTypeDef = {
            "TableName": self.table_name,
            "IndexName": LIVE_INDEX,
            "KeyConditionExpression": _SESSION_PARTITION,
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY},
            "ExpressionAttributeValues": {":pk": {"S": session_id}},
            "ConsistentRead": True,
        }
        items: list[Item] = []
        while True:
            page = self._ddb.query(**request)
            items.extend(page.get("Items", []))
            last = page.get("LastEvaluatedKey")
            if not last:
                return items
            request["ExclusiveStartKey"] = last

    def _read_body(self, item: Item, what: str) -> str | bytes:
        """The JSON of a task or document item: inline, or from S3 with its digest checked."""
        if "body" in item:
            return item["body"]["S"]
        bucket, key, sha = item["s3_bucket"]["S"], item["s3_key"]["S"], item["sha256"]["S"]
        body = self._retrying(f"read offloaded {what}", lambda: self._get_object(bucket, key))
        if hashlib.sha256(body).hexdigest() != sha:
            raise StoreUnavailable(
                f"offloaded {what} s3://{bucket}/{key} does not match its digest; it was "
                "changed outside bide"
            )
        return body

    def _doc_from_item(self, item: Item) -> Doc:
        return Doc(_doc_key(item), json.loads(self._read_body(item, "document")))

    # --- S3 ---------------------------------------------------------------------------------

    def _s3_client(self) -> S3Client:
        if self._s3 is None:
            self._s3 = _new_client("s3")
            self._owns_clients.append(self._s3)
        return self._s3

    def _put_object(self, p: _Prepared) -> None:
        # Written before the transaction, so a committed reference never points at nothing.
        # The key is content-addressed: a commit that then fails leaves an unreferenced object
        # behind but never changes an object another commit references, so it is never
        # deleted here (a concurrent winner may have written the very same key).
        assert self.bucket is not None
        bucket, key = self.bucket, p.object_key
        self._retrying(
            f"offload {p.what}",
            lambda: self._s3_client().put_object(
                Bucket=bucket, Key=key, Body=p.body, ContentType="application/json"
            ),
        )

    def _get_object(self, bucket: str, key: str) -> bytes:
        return self._s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()

    # --- retries ----------------------------------------------------------------------------

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """Run ``call``, retrying transient failures with backoff; then StoreUnavailable."""
        for attempt in range(1, self._max_attempts + 1):
            try:
                return call()
            except (ClientError, BotoCoreError) as exc:
                if not _is_transient(exc):
                    raise
                if attempt == self._max_attempts:
                    raise StoreUnavailable(
                        f"DynamoDB store {self.table_name!r}: {what} failed {attempt} times "
                        f"({_describe(exc)}); try again later"
                    ) from exc
            self._sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        # "Full jitter": racing retriers spread out instead of colliding again in lockstep.
        return self._rng.uniform(0, min(self._max_delay, self._base_delay * 2 ** (attempt - 1)))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this DynamoDBStore was closed")


# --- table ----------------------------------------------------------------------------------


def table_definition(table_name: str) -> CreateTableInputTypeDef:
    """The ``CreateTable`` request for a bide table: on-demand, string ``pk``/``sk`` keys and
    the sparse local index ``live`` on (``pk``, ``lsk``) projecting every attribute. Local
    indexes can only be created with the table, so infrastructure code must declare the
    same index."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": SORT_KEY, "AttributeType": "S"},
            {"AttributeName": LIVE_INDEX_KEY, "AttributeType": "S"},
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "LocalSecondaryIndexes": [
            {
                "IndexName": LIVE_INDEX,
                "KeySchema": [
                    {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
                    {"AttributeName": LIVE_INDEX_KEY, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    }


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table described by :func:`table_definition` and wait until it is active.
    For tests and the local stack; deployed stacks create it with infrastructure code."""
    client.create_table(**table_definition(table_name))
    client.get_waiter("table_exists").wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )


# --- helpers --------------------------------------------------------------------------------


def _new_client(service: str) -> Any:
    import boto3
    from botocore.config import Config

    # Our own retry loop is the only one, so attempts, backoff and sleeps are ours to control.
    config = Config(retries={"mode": "standard", "total_max_attempts": 1})
    return boto3.client(service, config=config)  # type: ignore[call-overload]


def _last_write_per_id(session_id: str, writes: Sequence[TaskRecord]) -> list[TaskRecord]:
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


def _last_write_per_key(docs: Sequence[Doc]) -> list[Doc]:
    # As for records: one action per item, and the last write of a key is the one that stays.
    by_key: dict[str, Doc] = {}
    for doc in docs:
        by_key.pop(doc.key, None)
        by_key[doc.key] = doc
    return list(by_key.values())


def _dumps(body: Any) -> str:
    # The same JSON as the SQLite store writes; NaN and infinities are not JSON.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _fits_sort_key(sort_key: str) -> bool:
    return len(sort_key.encode()) <= _SORT_KEY_LIMIT


def _item(
    session_id: str, p: _Prepared, wseq: int, bucket: str | None
) -> dict[str, AttributeValueTypeDef]:
    item: dict[str, AttributeValueTypeDef] = {
        PARTITION_KEY: {"S": session_id},
        SORT_KEY: {"S": p.sort_key},
        "wseq": {"N": str(wseq)},
    }
    if p.record is not None:
        item["rev"] = {"N": str(p.record.rev)}
        if p.record.live:
            item[LIVE_INDEX_KEY] = {"S": _LIVE_PREFIX + p.record.id}
    if p.offload:
        assert bucket is not None
        item["s3_bucket"] = {"S": bucket}
        item["s3_key"] = {"S": p.object_key}
        item["sha256"] = {"S": p.sha256}
    else:
        item["body"] = {"S": p.body.decode()}
    return item


def _item_size(session_id: str, p: _Prepared) -> int:
    if p.offload:
        return 512 + 2 * len(session_id.encode()) + 2 * len(p.sort_key.encode()) + len(p.object_key)
    return _inline_item_size(session_id, p)


def _inline_item_size(session_id: str, p: _Prepared) -> int:
    # Attribute names plus values, as DynamoDB counts them, with the small attributes rounded
    # up generously (the sort key counted twice: a live task's index key repeats its id).
    return len(p.body) + len(session_id.encode()) + 2 * len(p.sort_key.encode()) + 64


def _task_id(item: Item) -> str:
    return item[SORT_KEY]["S"][len(_TASK_PREFIX) :]


def _doc_key(item: Item) -> str:
    return item[SORT_KEY]["S"][len(_DOC_PREFIX) :]


def _manifest(head: Item) -> dict[str, int]:
    live = head.get("live", {}).get("M", {})
    return {task_id: int(value["N"]) for task_id, value in live.items()}


def _is_transient(exc: Exception) -> bool:
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True  # connection refused/reset, timeouts: the request may or may not have run
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code", "")
    if code in _TRANSIENT_CODES:
        return True
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons", [])
        codes = {r.get("Code") for r in reasons} - {"None", None}
        return bool(codes) and codes <= _TRANSIENT_CANCELLATIONS
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status >= 500


def _describe(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', '?')}: {error.get('Message', '')}"
    return f"{type(exc).__name__}: {exc}"
