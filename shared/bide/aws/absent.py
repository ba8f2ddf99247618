"""Commits that require documents to be absent (``absent`` of
:meth:`~bide.engine.store.Store.commit`), on DynamoDB: one ``ConditionCheck`` per key in the
commit's ``TransactWriteItems``, and what a failed check says.

The engine uses it for a sleep on a key that is not on its task's record: the key's slot
would be a document if a wake had consumed it or a deadline had expired it
(:mod:`bide.engine.slots`). For a fresh key a GetItem before the commit would only prove that
nothing is there; the check proves the same inside the commit, one request fewer.

https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html :
a ``ConditionCheck`` "applies a condition to an item that is not being modified by the
transaction"; "no two actions can target the same item" (so a commit may not both write and
check one document: :func:`~bide.engine.store.base.check_absent`); a failed condition cancels
the whole transaction with ``TransactionCanceledException``, whose ``CancellationReasons``
hold one reason per action in order, and ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` puts
the item as it stands into its reason
(https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..engine.store.base import Doc
from .retention import EXPIRES_AT
from .table import DOC_PREFIX, PARTITION_KEY, SORT_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from .retry import ChecksFailed

# The document must not exist. An item past its expiry reads as gone (get_doc filters it), so
# it counts as absent here too, as an expired head does for the first commit.
_DOC_ABSENT: Final = "attribute_not_exists(#pk) OR #exp <= :now"


def absent_check(table_name: str, session_id: str, key: str, now: int) -> TransactWriteItemTypeDef:
    """The ``ConditionCheck`` that document ``key`` of ``session_id`` is absent at ``now``
    (epoch seconds), returning the item when it is there."""
    return {
        "ConditionCheck": {
            "TableName": table_name,
            "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": DOC_PREFIX + key}},
            "ConditionExpression": _DOC_ABSENT,
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#exp": EXPIRES_AT},
            "ExpressionAttributeValues": {":now": {"N": str(now)}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def present(
    failed: ChecksFailed,
    keys: list[str],
    first: int,
    doc_of: Callable[[str], Doc | None],
    from_item: Callable[[Any], Doc],
) -> dict[str, Any] | None:
    """The documents the failed checks found, by key (``keys[i]`` was checked by action
    ``first + i``): from the items the checks returned, or read with ``doc_of`` when the
    service returned none (an emulator). None when such a read finds the document gone since
    (expired): then nothing can be said but "decide again"."""
    found: dict[str, Any] = {}
    for index, item in failed.failed:
        key = keys[index - first]
        doc = from_item(item) if item else doc_of(key)
        if doc is None:
            return None
        found[key] = doc.body
    return found
