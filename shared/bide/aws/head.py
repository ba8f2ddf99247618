"""The session head's write in a commit: the seq guard of the whole design and the live manifest.

Every commit of the DynamoDB store (:mod:`bide.aws.dynamodb`) carries exactly one of these
actions: a Put for a session's first commit, an Update for every later one, both conditioned
(the conditions are named here) and both keeping the head's manifest of live tasks, ``{task
id: seq of the commit that last wrote it}``, which is what lets a load tell a consistent
snapshot from a torn one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ..engine.records import TaskRecord
from .retention import ENDED_AT, EXPIRES_AT, End
from .table import HEAD_SORT_KEY, LIVE_INDEX_KEY, PARTITION_KEY, SORT_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

# The first commit of a session creates its head. Two writers that both saw an empty session
# must not both succeed: the second one would silently overwrite the first one's head. A head
# past its expiry counts as absent (readers see a session never written: bide.aws.retention),
# so its id can start afresh before TTL gets round to deleting it.
_HEAD_ABSENT: Final = "attribute_not_exists(#pk) OR #exp <= :now"

# Every later commit is the optimistic-concurrency guard of the whole design: the head (and so
# every task write in the same transaction) is written only if nobody committed since the
# writer loaded. A missing head fails this too (a session never written has seq 0).
_HEAD_AT_EXPECTED_SEQ: Final = "#seq = :expected"


# A commit that believes the session has not ended (it has no fresher knowledge) must not
# write unstamped items into an ended one: the head's condition checks the belief too, and a
# failure at the expected seq sends the commit again knowing the end.
_HEAD_AT_EXPECTED_SEQ_NOT_ENDED: Final = "#seq = :expected AND attribute_not_exists(#ended)"


def head_action(
    table_name: str,
    session_id: str,
    expected_seq: int,
    token: str,
    records: Sequence[TaskRecord],
    ending: End,
    now: int,
) -> TransactWriteItemTypeDef:
    """The head's write: the seq guard, the new seq and token, and the manifest updated for
    the task writes (documents are not in the manifest); for the commit that ends the
    session, its end and expiry. ``now`` (whole epoch seconds) decides whether an expired head
    counts as absent for a first commit."""
    new_seq = str(expected_seq + 1)
    end: dict[str, AttributeValueTypeDef] = {}
    if ending.ends and ending.ended_at is not None:
        end[ENDED_AT] = {"N": repr(ending.ended_at)}
        if ending.expires_at is not None:
            end[EXPIRES_AT] = {"N": str(ending.expires_at)}
    if expected_seq == 0:
        live: dict[str, AttributeValueTypeDef] = {r.id: {"N": new_seq} for r in records if r.live}
        return {
            "Put": {
                "TableName": table_name,
                "Item": {
                    PARTITION_KEY: {"S": session_id},
                    SORT_KEY: {"S": HEAD_SORT_KEY},
                    LIVE_INDEX_KEY: {"S": HEAD_SORT_KEY},
                    "seq": {"N": new_seq},
                    "txn": {"S": token},
                    "live": {"M": live},
                    **end,
                },
                "ConditionExpression": _HEAD_ABSENT,
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#exp": EXPIRES_AT},
                "ExpressionAttributeValues": {":now": {"N": str(now)}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
    names = {"#seq": "seq", "#txn": "txn"}
    if ending.guessed:
        names["#ended"] = ENDED_AT
    sets = ["#seq = :next", "#txn = :txn"]
    values: dict[str, AttributeValueTypeDef] = {}
    for n, (name, value) in enumerate(end.items()):
        names[f"#e{n}"] = name
        values[f":e{n}"] = value
        sets.append(f"#e{n} = :e{n}")
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
            "TableName": table_name,
            "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
            "UpdateExpression": update,
            "ConditionExpression": (
                _HEAD_AT_EXPECTED_SEQ_NOT_ENDED if ending.guessed else _HEAD_AT_EXPECTED_SEQ
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                ":expected": {"N": str(expected_seq)},
                ":next": {"N": new_seq},
                ":txn": {"S": token},
                **values,
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
