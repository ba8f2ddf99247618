"""The DynamoDB store's consistent reads at the head: the head, some tasks and some documents
of one session in one ``TransactGetItems``.

"A serializable read" of every item it names
(https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html):
each task and document is exactly as it stood at the head's sequence number. One call reads
at most 100 items (the head and up to 99 tasks and documents: the Store protocol's
``MAX_AT_HEAD_TASKS``) and "DynamoDB rejects the entire TransactGetItems request if ... the
aggregate size of the items in the transaction exceeded 4 MB" (same page). A caller cannot
know a document's size before it reads it, so a read that also asks for documents and is
refused is read again without them: the documents come back absent and the caller reads them
otherwise (``Store.tasks_at_head``); the head and tasks alone fit (a task record is
at most one 400 KB item).

The head is read with the record pending on it, if any (:mod:`bide.aws.pending`), which
replaces its task's item when that task is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ..engine.records import TaskRecord
from ..engine.store.base import Doc
from . import digest, pending
from .retention import ENDED_AT, EXPIRES_AT, STAMPED, expired
from .table import DOC_PREFIX, HEAD_SORT_KEY, PARTITION_KEY, SORT_KEY, TASK_PREFIX, fits_sort_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactGetItemTypeDef

    from .retention import Ends
    from .table import Item

AtHead = tuple[int, dict[str, TaskRecord], dict[str, Doc]]
"""The head's seq, the tasks found by id and the documents found by key."""


class AtHeadReads:
    """The reads of :class:`~bide.aws.dynamodb.DynamoDBStore` at the head, given what they
    need of the store: its table, a ``transact_get`` that sends one ``TransactGetItems``
    (``TransactItems`` -> the response, retried as the store retries), its session ends
    (:class:`~bide.aws.retention.Ends`), its live views (:class:`~bide.aws.digest.LiveViews`,
    told what each read saw) and how it turns items into records and documents; and the
    store's :class:`~bide.aws.pending.Beliefs`, told what is pending on each head read."""

    def __init__(
        self,
        table_name: str,
        transact_get: Callable[[list[TransactGetItemTypeDef]], Mapping[str, Any]],
        ends: Ends,
        views: digest.LiveViews,
        read_record: Callable[[Item], str | bytes],
        doc_from_item: Callable[[Item], Doc],
        beliefs: pending.Beliefs,
    ) -> None:
        self.table_name = table_name
        self._transact_get = transact_get
        self._ends = ends
        self._views = views
        self._read_record = read_record
        self._doc_from_item = doc_from_item
        self._beliefs = beliefs

    def read(
        self,
        session_id: str,
        task_ids: Sequence[str],
        keys: Sequence[str],
        *,
        ends: bool,
        shed_docs: bool = False,
    ) -> AtHead:
        """The head, tasks and documents in one ``TransactGetItems``. ``ends``: read the
        head's end too, as ``load`` does (:mod:`bide.aws.retention`), for a run.
        ``shed_docs``: a read with documents that DynamoDB refuses (not a transient failure:
        those are retried) is made again without them (see the module); only for a caller
        that reads an absent document otherwise, never for one that decides on a document's
        absence (an owner's)."""
        ids = list(dict.fromkeys(task_ids))
        # A key too long for a sort key names no document that can exist: absent, not asked.
        wanted = [key for key in dict.fromkeys(keys) if fits_sort_key(DOC_PREFIX + key)]
        try:
            return self._read(session_id, ids, wanted, ends=ends)
        except ClientError:
            if not (shed_docs and wanted):
                raise
        return self._read(session_id, ids, [], ends=ends)

    def _read(self, session_id: str, ids: list[str], keys: list[str], *, ends: bool) -> AtHead:
        names = {"#seq": "seq", "#exp": EXPIRES_AT}  # and the end's, for a run (tasks_at_head)
        names |= {"#ended": ENDED_AT, "#stamped": STAMPED} if ends else {}
        names |= {"#pt": pending.PENDING_TASK, "#pr": pending.PENDING_RECORD}
        head: TransactGetItemTypeDef = {
            "Get": {
                "TableName": self.table_name,
                "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
                "ProjectionExpression": ", ".join(names),
                "ExpressionAttributeNames": names,
            }
        }
        sort_keys = [TASK_PREFIX + t for t in ids] + [DOC_PREFIX + key for key in keys]
        gets: list[TransactGetItemTypeDef] = [head]
        for sort_key in sort_keys:
            item = {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": sort_key}}
            gets.append({"Get": {"TableName": self.table_name, "Key": item}})
        out = self._transact_get(gets)
        now = self._ends.now()
        head_item, *items = [r.get("Item") for r in out["Responses"]]
        if not head_item or expired(head_item, now):
            if ends:
                self._ends.read(session_id, 0, None)
            return 0, {}, {}  # never written, or expired: gone (bide.aws.retention)
        seq = int(head_item["seq"]["N"])
        if ends:
            self._ends.read(session_id, seq, head_item)
        found: list[Item | None] = [None if not i or expired(i, now) else i for i in items]
        tasks = dict(zip(ids, found[: len(ids)], strict=True))
        self._views.saw(session_id, [(t, digest.live_wseq(i, now)) for t, i in tasks.items()])
        records = {t: TaskRecord.from_json(self._read_record(i)) for t, i in tasks.items() if i}
        pending.overlay(head_item, records, ids)
        self._beliefs.saw(session_id, head_item)
        docs = {
            k: self._doc_from_item(i) for k, i in zip(keys, found[len(ids) :], strict=True) if i
        }
        return seq, records, docs
