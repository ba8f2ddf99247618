"""The AWS store: one DynamoDB table, one partition per session, large records in S3.

:class:`DynamoDBStore` holds the reads and the commit: what each Store operation asks of
DynamoDB, and the condition expressions that make a commit safe. A commit of one small live
record is one ``UpdateItem`` of the head (:mod:`bide.aws.pending`); every other commit is one
``TransactWriteItems``: the head, conditioned on the expected seq, plus one unconditional Put
per document, one Put per task conditioned on the task's old state as the head's digest
assumes it, and one ``ConditionCheck`` per key the commit requires absent, so a
commit holds at most :data:`~bide.engine.store.base.MAX_COMMIT_ITEMS` (99) of them together.

Each of the other parts is its own argument, in its own module: :mod:`bide.aws.table` (the
table, its item layout and DynamoDB's limits, :func:`table_definition`, :func:`create_table`),
:mod:`bide.aws.head` (the head's conditioned write), :mod:`bide.aws.digest` (the head's
constant-size digest of its live tasks, and the guesses a commit needs to move it),
:mod:`bide.aws.offload` (items from records and documents, and the S3 offload of large ones)
and :mod:`bide.aws.retry` (retries with backoff, which errors are transient, conflicts and the
``ClientRequestToken`` that makes a resent commit apply at most once). The names other code
imports from here are re-exported from the modules that define them; :mod:`bide.aws.retention`
holds what ending a session adds (the expiry, stamping, the read filter's rule).

Long because: every read filters expired items and every commit carries the session's end,
both against the head this module lays out; split, the two halves of each operation would
drift.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..engine.errors import CommitTooLarge, ConflictError, DocumentExists, StoreUnavailable
from ..engine.records import TaskRecord
from ..engine.store.base import (
    MAX_COMMIT_ITEMS,
    Doc,
    SessionSnapshot,
    check_absent,
    check_at_head,
)
from . import at_head, digest, offload, pending, refusals, table
from .absent import absent_check, present
from .head import head_action
from .offload import DEFAULT_OFFLOAD_THRESHOLD, S3Offload
from .retention import ENDED_AT, EXPIRES_AT, Retaining, expired
from .retry import ChecksFailed, Retrier, new_client, request_token, transact
from .table import (
    DOC_PREFIX,
    HEAD_SORT_KEY,
    ITEM_LIMIT,
    LIVE_INDEX,
    LIVE_INDEX_KEY,
    MAX_TASK_WRITES,
    PARTITION_KEY,
    SORT_KEY,
    TRANSACTION_ACTIONS,
    create_table,
    fits_sort_key,
    table_definition,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        QueryInputTypeDef,
        TransactGetItemTypeDef,
        TransactWriteItemTypeDef,
    )
    from mypy_boto3_s3.client import S3Client

    from .table import Item

__all__ = [
    "DEFAULT_OFFLOAD_THRESHOLD",
    "HEAD_SORT_KEY",
    "ITEM_LIMIT",
    "LIVE_INDEX",
    "LIVE_INDEX_KEY",
    "MAX_TASK_WRITES",
    "PARTITION_KEY",
    "SORT_KEY",
    "DynamoDBStore",
    "create_table",
    "table_definition",
]

# A commit is sent at most this many times: learning the session's end or the head's format
# takes one more send, learning wrong guesses of its tasks' old states another; after that
# the caller must reload (a ConflictError), which refreshes every guess.
_COMMIT_SENDS: Final = 4

# --- conditions -----------------------------------------------------------------------------

# A key the commit requires absent is one ConditionCheck, named in bide.aws.absent.

# Task Puts carry the old state the digest's delta assumes (bide.aws.digest.task_guard). The
# head's seq guard alone would make the delta exact only if the guesses were known to be of
# that very seq; they are guesses from earlier reads (or none, for an id never read), so each
# is checked where it is used. A failed one is not a conflict: the head held, the item comes
# back in the cancellation, and the commit is sent again knowing it (bide.aws.refusals).

# Load reads the head and the live tasks of one session, all of them in the sparse index.
_SESSION_PARTITION: Final = "#pk = :pk"

# list_docs reads one key range of the table: the session's documents under a prefix. A key
# condition takes one range operator on the sort key, so "after start_after" cannot be a second
# one next to begins_with; it is the Query's ExclusiveStartKey instead (a key need not exist to
# start after it, and it lies inside the range whenever start_after starts with the prefix,
# the only case that needs it). The range's end stays the service's business: no reading past
# the prefix and stopping on the client.
_DOCS_UNDER_PREFIX: Final = "#pk = :pk AND begins_with(#sk, :prefix)"


class DynamoDBStore(Retaining):
    """A :class:`~bide.engine.store.Store` on one DynamoDB table (see :func:`create_table`), with
    records and documents larger than ``offload_threshold`` bytes of JSON kept in the S3
    ``bucket``.

    Safe to share between threads. Throttling and transient failures are retried up to
    ``max_attempts`` times with capped, jittered exponential backoff (``sleep`` is injectable
    so tests do not wait; ``retry_rng``, the jitter's :class:`random.Random`, so a test can
    seed the delays), then :class:`~bide.engine.errors.StoreUnavailable` is raised. A
    :class:`~bide.engine.errors.ConflictError` is never retried here: the caller must reload.

    When ``client``/``s3_client`` are not given, clients are created with botocore's own
    retries turned off so that this class alone decides how often to try. Clients passed in
    keep their configuration; their retries multiply with ours.

    Ended sessions are kept forever unless :meth:`set_retention` says otherwise; an item past
    its ``expires_at`` reads as gone either way (:mod:`bide.aws.retention`).
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
        retry_rng: random.Random | None = None,
    ) -> None:
        if offload_threshold < 0:
            raise ValueError("offload_threshold must be >= 0")
        self._retry = Retrier(
            f"DynamoDB store {table_name!r}",
            max_attempts=max_attempts,
            base_delay=base_delay,
            max_delay=max_delay,
            sleep=sleep,
            rng=retry_rng,
        )
        self.table_name = table_name
        self.bucket = bucket
        self.offload_threshold = offload_threshold
        self._owns_ddb = client is None
        if client is None:
            client = new_client("dynamodb")
        self._ddb: DynamoDBClient = client
        self._offload = S3Offload(bucket, s3_client, self._retry)
        self._views = digest.LiveViews()
        self._pending = pending.PendingHead(
            table_name,
            client,
            self._retry,
            self._ends,
            self._views,
            lambda session_id: self._raw_item(session_id, HEAD_SORT_KEY),
        )
        self._at_head = at_head.AtHeadReads(
            table_name,
            self._transact_get,
            self._ends,
            self._views,
            self._read_record,
            self._doc_from_item,
            self._pending.beliefs,
        )
        self._closed = False

    # --- Store protocol ---------------------------------------------------------------------

    def load(self, session_id: str) -> SessionSnapshot:
        """The session's head and live tasks, as one consistent snapshot.

        A Query is only *read-committed* with respect to transactions: while a commit is being
        applied it may return some of that commit's items new and others old, and re-reading
        the head afterwards does not close the gap (two single-item reads may be serialized on
        different sides of one transaction). So the check is on the data itself. A task is
        written at most once per commit, so (id, wseq) names exactly one version of a record,
        and the head carries what its live set of such pairs is: their count and a sum of
        80-bit hashes of them (:mod:`bide.aws.digest`), a few numbers whatever the set's size.
        When the Query's live items match both, the snapshot *is* the committed state at the
        head's seq, whatever interleaving happened (a torn Query matches by chance with a
        probability of about 2**-80). Anything else (a commit landed mid-read) is read again.
        A head written before the digest lists the pairs themselves (``live = {task id:
        wseq}``) and is checked against that list. A record pending on the head
        (:mod:`bide.aws.pending`) replaces its task's item; the digest stays the items'.
        """
        self._check_open()
        for attempt in range(1, self._retry.max_attempts + 1):
            items = self._retry.run("load", lambda: self._query_live(session_id))
            now = self._ends.now()
            head: Item | None = None
            found: dict[str, int] = {}
            task_items: list[Item] = []
            for item in items:
                if item[SORT_KEY]["S"] == HEAD_SORT_KEY:
                    head = item
                elif expired(item, now):
                    continue  # left by an expired generation of this id: gone
                else:
                    found[table.task_id(item)] = int(item["wseq"]["N"])
                    task_items.append(item)
            if head is not None and expired(head, now):
                self._ends.read(session_id, 0, None)
                return SessionSnapshot(session_id, 0, {})  # expired: as never written
            seq = 0 if head is None else int(head["seq"]["N"])
            summary = None if head is None else digest.head_digest(head)
            legacy = head is not None and summary is None
            if head is None:
                consistent = not found
            elif summary is None:  # a head from before the digest: its list of live tasks
                consistent = found == table.manifest(head)
            else:
                consistent = digest.digest_of(found) == summary
            if consistent:
                self._ends.read(session_id, seq, head)
                self._views.loaded(session_id, seq, found, legacy)
                self._pending.beliefs.saw(session_id, head)
                tasks = {
                    table.task_id(i): TaskRecord.from_json(self._read_record(i)) for i in task_items
                }
                pending.overlay(head, tasks, None)
                return SessionSnapshot(session_id, seq, tasks)
            if attempt < self._retry.max_attempts:
                self._retry.pause(attempt)
        raise StoreUnavailable(
            f"session {session_id!r} kept changing while it was loaded "
            f"({self._retry.max_attempts} attempts); try again later"
        )

    def get_task(self, session_id: str, task_id: str) -> TaskRecord | None:
        """One task, live or ended, or None: one ``TransactGetItems`` of the head and the task
        item (:meth:`task_at_head`), since its newest record may be pending on the head
        (:mod:`bide.aws.pending`)."""
        self._check_open()
        return self._at_head.read(session_id, [task_id], (), ends=False)[1].get(task_id)

    def head(self, session_id: str) -> int:
        """The session's sequence number (0 when never written)."""
        self._check_open()
        out = self._retry.run(
            "head",
            lambda: self._ddb.get_item(
                TableName=self.table_name,
                Key={PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
                ConsistentRead=True,
                ProjectionExpression="#seq, #ended, #exp",
                ExpressionAttributeNames={"#seq": "seq", "#ended": ENDED_AT, "#exp": EXPIRES_AT},
            ),
        )
        item = out.get("Item")
        if item is None or expired(item, self._ends.now()):
            return 0
        self._ends.read(session_id, int(item["seq"]["N"]), item)
        return int(item["seq"]["N"])

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """Write ``writes`` and ``docs`` and advance the seq to ``expected_seq + 1`` in one
        transaction, which also checks that no document exists under a key of ``absent`` (or,
        for one small record, one ``UpdateItem`` of the head: :mod:`bide.aws.pending`).

        Raises :class:`~bide.engine.errors.ConflictError` (nothing written) when the stored
        seq is not ``expected_seq``; the error's ``actual_seq`` comes from the head the failed
        condition returned, not from a second read. Raises
        :class:`~bide.engine.errors.DocumentExists` when a key of ``absent`` has a document;
        its body comes from the failed check (``ALL_OLD``), not from a second read. Raises
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
        if len(writes) + len(docs) + len(absent) > MAX_COMMIT_ITEMS:
            raise CommitTooLarge(
                f"commit to session {session_id!r} writes {len(writes)} records and "
                f"{len(docs)} documents and checks {len(absent)} absent; a commit holds at "
                f"most {MAX_COMMIT_ITEMS} together "
                f"(a DynamoDB transaction holds {TRANSACTION_ACTIONS} actions and one is the "
                "head). Nothing was written: split the work into several commits."
            )
        check_absent(docs, absent)
        # A key too long to be a sort key can have no document: nothing to check.
        checked = [k for k in dict.fromkeys(absent) if fits_sort_key(DOC_PREFIX + k)]
        records = offload.last_write_per_id(session_id, writes)
        documents = offload.last_write_per_key(docs)
        prepared = offload.prepare(
            session_id,
            records,
            documents,
            offload_threshold=self.offload_threshold,
            bucket=self.bucket,
        )
        new_seq = expected_seq + 1
        view = self._views.get(session_id)
        for send in range(1, _COMMIT_SENDS + 1):
            end = self._ends.end_of(session_id, expected_seq, documents)
            # One token for every attempt of this commit, so a resent commit never applies
            # twice (a resend below is another commit: the first was not applied).
            token = request_token()
            if self._pending.qualifies(
                session_id, expected_seq, prepared, view, end, len(documents), len(checked)
            ):
                # One record onto the head: one UpdateItem (bide.aws.pending).
                learned = self._pending.commit(session_id, expected_seq, token, prepared[0], end)
                if learned is None:
                    self._ends.committed(session_id, new_seq, end)
                    return new_seq  # the task item and so the views' wseq are unchanged
                if send == _COMMIT_SENDS:
                    raise ConflictError(session_id, expected_seq, None)
                view = learned
                continue
            for p in prepared:
                if p.offload:
                    self._offload.put(p, ended=end.expires_at is not None)
            now = math.floor(self._ends.now())
            olds, change = digest.plan(view, expected_seq, records)
            guards = {
                r.id: digest.task_guard(old, now) for r, old in zip(records, olds, strict=True)
            }
            guard = self._pending.guard(session_id, expected_seq, [r.id for r in records])
            head = head_action(
                self.table_name, session_id, expected_seq, token, change, end, now, guard
            )
            actions = [head]
            actions += [
                self._put_action(session_id, new_seq, p, end.expires_at, guards) for p in prepared
            ]
            actions += [absent_check(self.table_name, session_id, k, now) for k in checked]
            try:
                self._retry.run(
                    "commit",
                    lambda t=token, a=actions: transact(  # type: ignore[misc]
                        self._ddb, session_id, expected_seq, t, a
                    ),
                )
            except ChecksFailed as exc:
                first = len(actions) - len(checked)  # the checks come last
                failed_checks = [(i, item) for i, item in exc.failed if i >= first]
                if not failed_checks:
                    if send == _COMMIT_SENDS:
                        raise ConflictError(session_id, expected_seq, None) from None
                    # Only task guesses were wrong (the tasks come right after the head).
                    view = refusals.learn_tasks(
                        self._views, session_id, view, records, exc.failed, now, self._raw_item
                    )
                    continue
                found = present(
                    ChecksFailed(failed_checks),
                    checked,
                    first,
                    lambda k: self.get_doc(session_id, k),
                    self._doc_from_item,
                )
                if found is None:  # gone since (expired): decide again after a reload
                    raise ConflictError(session_id, expected_seq, None) from None
                raise DocumentExists(session_id, found) from None
            except ConflictError as exc:
                if send == _COMMIT_SENDS or exc.actual_seq != expected_seq:
                    raise
                # Not a newer commit: the session is ended and this store had not seen it
                # (the guard refused to write unstamped items), or the head is of another
                # format than guessed. Learn both from the head, then resend.
                head_item = self._raw_item(session_id, HEAD_SORT_KEY)
                learned = refusals.learn_head(
                    self._views, self._ends, session_id, expected_seq, end, change, head_item
                )
                # Or the belief of what is pending on the head was wrong (bide.aws.pending).
                if not self._pending.learned(session_id, head_item, guard) and learned is None:
                    raise
                view = learned or self._views.get(session_id) or digest.View()
                continue
            self._ends.committed(session_id, new_seq, end)
            self._views.committed(session_id, records, new_seq)
            self._pending.committed(session_id, expected_seq, guard)
            return new_seq
        raise AssertionError("unreachable")  # pragma: no cover

    def get_doc(self, session_id: str, key: str) -> Doc | None:
        """One document (one strongly consistent GetItem), or None."""
        self._check_open()
        sort_key = DOC_PREFIX + key
        if not fits_sort_key(sort_key):
            return None  # no document can have this key
        item_key: dict[str, AttributeValueTypeDef] = {
            PARTITION_KEY: {"S": session_id},
            SORT_KEY: {"S": sort_key},
        }
        out = self._retry.run(
            "get_doc",
            lambda: self._ddb.get_item(
                TableName=self.table_name, Key=item_key, ConsistentRead=True
            ),
        )
        item = out.get("Item")
        if item is None or expired(item, self._ends.now()):
            return None
        return self._doc_from_item(item)

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
        if limit == 0 or not fits_sort_key(DOC_PREFIX + prefix):
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
                ":prefix": {"S": DOC_PREFIX + prefix},
            },
            "ConsistentRead": True,
        }
        if after is not None and fits_sort_key(DOC_PREFIX + after):
            request["ExclusiveStartKey"] = {
                PARTITION_KEY: {"S": session_id},
                SORT_KEY: {"S": DOC_PREFIX + after},
            }
        # A start_after too long to be a key is skipped to on the client instead (the check
        # is a no-op otherwise).
        docs: list[Doc] = []
        now = self._ends.now()
        while True:
            if limit is not None:
                request["Limit"] = limit - len(docs)
            page = self._retry.run("list_docs", lambda: self._ddb.query(**request))
            for item in page.get("Items", []):
                if after is not None and table.doc_key(item) <= after:
                    continue
                if expired(item, now):
                    continue  # gone for readers; TTL deletes it later
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
        if self._owns_ddb:
            self._ddb.close()
            self._owns_ddb = False
        self._offload.close()

    # --- commit -----------------------------------------------------------------------------

    def _put_action(
        self,
        session_id: str,
        new_seq: int,
        p: offload.Prepared,
        expires_at: int | None,
        guards: dict[str, dict[str, object]],
    ) -> TransactWriteItemTypeDef:
        item = offload.to_item(session_id, p, new_seq, self.bucket)
        if expires_at is not None:
            item[EXPIRES_AT] = {"N": str(expires_at)}
        guard = {} if p.record is None else guards[p.record.id]
        return {"Put": {"TableName": self.table_name, "Item": item, **guard}}  # type: ignore[typeddict-item]

    def _raw_item(self, session_id: str, sort_key: str) -> Item | None:
        """One item as stored (strongly consistent), for a commit learning why it was refused."""
        key: dict[str, AttributeValueTypeDef] = {
            PARTITION_KEY: {"S": session_id},
            SORT_KEY: {"S": sort_key},
        }
        out = self._retry.run(
            "commit",
            lambda: self._ddb.get_item(TableName=self.table_name, Key=key, ConsistentRead=True),
        )
        return out.get("Item")

    def task_at_head(self, session_id: str, task_id: str) -> tuple[int, TaskRecord | None]:
        """The sequence number and one task in one ``TransactGetItems``: "a serializable
        read" of both items, so the task is exactly as it stood at that sequence number
        (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html).
        One request where :meth:`head` then :meth:`get_task` take two; a transactional read
        costs twice the read units of a plain one, which for the small head item is 2 RRU."""
        self._check_open()
        seq, records, _ = self._at_head.read(session_id, [task_id], (), ends=False)
        return seq, records.get(task_id)

    def task_and_doc_at_head(
        self, session_id: str, task_id: str, key: str
    ) -> tuple[int, TaskRecord | None, Doc | None]:
        """:meth:`task_at_head` with a third item in the same ``TransactGetItems`` (up to 100
        are allowed), the document: one request where a :meth:`get_doc` first takes two."""
        self._check_open()
        seq, records, docs = self._at_head.read(session_id, [task_id], [key], ends=False)
        return seq, records.get(task_id), docs.get(key)

    def tasks_at_head(
        self, session_id: str, task_ids: Sequence[str], keys: Sequence[str] = ()
    ) -> tuple[int, dict[str, TaskRecord], dict[str, Doc]]:
        """:meth:`task_at_head` for up to 99 tasks and documents (one ``TransactGetItems``),
        the head read with its end as :meth:`load` reads it (:mod:`bide.aws.retention`); the
        documents absent when DynamoDB refuses the read for its size (:mod:`bide.aws.at_head`)."""
        self._check_open()
        check_at_head(task_ids, keys)
        return self._at_head.read(session_id, task_ids, keys, ends=True, shed_docs=True)

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

    def _transact_get(self, gets: list[TransactGetItemTypeDef]) -> Mapping[str, Any]:
        return self._retry.run(
            "task_at_head", lambda: self._ddb.transact_get_items(TransactItems=gets)
        )

    def _read_record(self, item: Item) -> str | bytes:
        return self._offload.read_body(item, "record")

    def _doc_from_item(self, item: Item) -> Doc:
        return Doc(table.doc_key(item), json.loads(self._offload.read_body(item, "document")))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this DynamoDBStore was closed")
