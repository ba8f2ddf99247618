"""The DynamoDB table behind :class:`~bide.aws.dynamodb.DynamoDBStore`: its key schema, the
layout of its items, DynamoDB's limits the store is sized against, and the ``CreateTable``
request. Kept apart from the store because the CDK construct (:mod:`bide.cdk`) declares the
same table from :func:`table_definition`, so the deployed table and the store cannot disagree.

Item layout (``pk`` = session id):

``sk = "HEAD"``
    The session head: ``seq``, the digest of its live tasks (``n``, their count, and
    ``dsum``, a sum of hashes of their (task id, wseq) pairs: :mod:`bide.aws.digest`) and
    ``txn``, the request token of the commit that wrote it. Its index key ``lsk`` is
    ``"HEAD"``. Heads written before the digest list the live tasks instead, ``live = {task
    id: wseq}`` (:func:`manifest`), until their next commit converts them. At most one task's
    newest record may wait on the head, ``pt`` (its id) and ``pr`` (its JSON), until a commit
    writing that task folds it into the task item (:mod:`bide.aws.pending`).
``sk = "T#<task id>"``
    One item per task, live or ended: the record's JSON in ``body`` (or a reference to an S3
    object holding it) and ``wseq``, the seq of the commit that wrote it. Live tasks also carry
    the index key ``lsk = "L#<task id>"``; ended tasks do not.
``sk = "D#<document key>"``
    One item per document: its JSON in ``body`` (or a reference to an S3 object) and ``wseq``.
    Never an ``lsk``, so documents stay out of :meth:`~bide.aws.dynamodb.DynamoDBStore.load`;
    they are read with one GetItem (:meth:`~bide.aws.dynamodb.DynamoDBStore.get_doc`) or one
    Query on the ``D#<prefix>`` range of the session's partition
    (:meth:`~bide.aws.dynamodb.DynamoDBStore.list_docs`), in key order.

The local secondary index ``live`` on (``pk``, ``lsk``) is sparse: it holds the head and the
live tasks of each session and nothing else, so :meth:`~bide.aws.dynamodb.DynamoDBStore.load`
is one strongly consistent Query whose cost follows the live set, never the session's history.
A local (not global) index because only local indexes can be read with ``ConsistentRead``. One
item per task (rather than moving items between "live" and "ended" sort keys) keeps every task
write one transaction action, so a commit of 99 writes always fits DynamoDB's 100-action limit
whatever mix of live and ended records it holds, and
:meth:`~bide.aws.dynamodb.DynamoDBStore.get_task` reads one item besides the head. The
price: an item collection (one session, table plus index) is capped at 10 GB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..engine.store.base import MAX_COMMIT_ITEMS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, CreateTableInputTypeDef

    #: One item as DynamoDB returns it.
    Item = Mapping[str, AttributeValueTypeDef]

# --- table layout (create_table and infrastructure code must agree on these) ----------------

PARTITION_KEY: Final = "pk"
SORT_KEY: Final = "sk"
LIVE_INDEX: Final = "live"
LIVE_INDEX_KEY: Final = "lsk"
HEAD_SORT_KEY: Final = "HEAD"
TASK_PREFIX: Final = "T#"
LIVE_PREFIX: Final = "L#"
DOC_PREFIX: Final = "D#"

# --- DynamoDB limits ------------------------------------------------------------------------

#: Record and document writes per commit (the Store contract's limit): a transaction holds at
#: most 100 actions and one is the head.
MAX_TASK_WRITES: Final = MAX_COMMIT_ITEMS
#: DynamoDB's item size limit.
ITEM_LIMIT: Final = 400 * 1024
#: DynamoDB's limit on the total size of one transaction.
TRANSACTION_LIMIT: Final = 4 * 1024 * 1024
#: DynamoDB's limit on the actions of one transaction.
TRANSACTION_ACTIONS: Final = 100
assert MAX_TASK_WRITES + 1 <= TRANSACTION_ACTIONS  # the head is one action more
# DynamoDB's limit on a sort key value, in bytes of UTF-8: a document key may use all of it
# but its "D#".
SORT_KEY_LIMIT: Final = 1024


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


# --- reading keys back ----------------------------------------------------------------------


def fits_sort_key(sort_key: str) -> bool:
    """Whether ``sort_key`` is short enough to be a DynamoDB sort key."""
    return len(sort_key.encode()) <= SORT_KEY_LIMIT


def task_id(item: Item) -> str:
    """The task id of a task item."""
    return item[SORT_KEY]["S"][len(TASK_PREFIX) :]


def doc_key(item: Item) -> str:
    """The document key of a document item."""
    return item[SORT_KEY]["S"][len(DOC_PREFIX) :]


def manifest(head: Item) -> dict[str, int]:
    """The live list of a head written before the digest: ``{task id: seq of the commit that
    last wrote it}``."""
    live = head.get("live", {}).get("M", {})
    return {task_id: int(value["N"]) for task_id, value in live.items()}
