"""The session head's write in a commit: the seq guard of the whole design and the digest of
the live tasks.

Every commit of the DynamoDB store (:mod:`bide.aws.dynamodb`) carries exactly one of these
actions: a Put for a session's first commit, an Update for every later one, both conditioned
(the conditions are named here) and both keeping the head's digest of its live tasks, ``n``
and ``dsum`` (:mod:`bide.aws.digest`), which is what lets a load tell a consistent snapshot
from a torn one. Heads written before the digest list their live tasks instead (``live =
{task id: wseq}``); the first commit that knows that list converts such a head, in the same
conditioned write. A record pending on the head (:mod:`bide.aws.pending`) is kept exact by a
guard on the Update: folded when the commit writes its task, otherwise required to be none of
the commit's tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .digest import COUNT, DIGEST, HeadChange
from .retention import ENDED_AT, EXPIRES_AT, End
from .table import HEAD_SORT_KEY, LIVE_INDEX_KEY, PARTITION_KEY, SORT_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

    from .pending import Guard

# The first commit of a session creates its head. Two writers that both saw an empty session
# must not both succeed: the second one would silently overwrite the first one's head. A head
# past its expiry counts as absent (readers see a session never written: bide.aws.retention),
# so its id can start afresh before TTL gets round to deleting it.
_HEAD_ABSENT: Final = "attribute_not_exists(#pk) OR #exp <= :now"

# Every later commit is the optimistic-concurrency guard of the whole design: the head (and so
# every task write in the same transaction) is written only if nobody committed since the
# writer loaded. A missing head fails this too (a session never written has seq 0). The
# digest's ADD also needs a head that keeps a digest: on a head that still lists "live" it
# would start the sum from nothing and leave the list stale, so such a head refuses it and
# the writer, having read the list, converts it (the head's seq pins the list's content).
_HEAD_AT_EXPECTED_SEQ: Final = "#seq = :expected AND attribute_not_exists(#live)"
_LEGACY_HEAD_AT_EXPECTED_SEQ: Final = "#seq = :expected AND attribute_exists(#live)"

# A commit that believes the session has not ended (it has no fresher knowledge) must not
# write unstamped items into an ended one: the head's condition checks the belief too, and a
# failure at the expected seq sends the commit again knowing the end.
_HEAD_AT_EXPECTED_SEQ_NOT_ENDED: Final = (
    "#seq = :expected AND attribute_not_exists(#live) AND attribute_not_exists(#ended)"
)
_LEGACY_HEAD_AT_EXPECTED_SEQ_NOT_ENDED: Final = (
    "#seq = :expected AND attribute_exists(#live) AND attribute_not_exists(#ended)"
)


def head_action(
    table_name: str,
    session_id: str,
    expected_seq: int,
    token: str,
    change: HeadChange,
    ending: End,
    now: int,
    pending: Guard | None = None,
) -> TransactWriteItemTypeDef:
    """The head's write: the seq guard, the new seq and token, and the digest's ``change``
    (:func:`bide.aws.digest.plan`); for the commit that ends the session, its end and expiry.
    ``now`` (whole epoch seconds) decides whether an expired head counts as absent for a
    first commit. ``pending``: what a later commit requires of a record pending on the head
    (:class:`bide.aws.pending.Guard`), folding it when the commit writes its task."""
    new_seq = str(expected_seq + 1)
    end: dict[str, AttributeValueTypeDef] = {}
    if ending.ends and ending.ended_at is not None:
        end[ENDED_AT] = {"N": repr(ending.ended_at)}
        if ending.expires_at is not None:
            end[EXPIRES_AT] = {"N": str(ending.expires_at)}
    if expected_seq == 0:
        return {
            "Put": {
                "TableName": table_name,
                "Item": {
                    PARTITION_KEY: {"S": session_id},
                    SORT_KEY: {"S": HEAD_SORT_KEY},
                    LIVE_INDEX_KEY: {"S": HEAD_SORT_KEY},
                    "seq": {"N": new_seq},
                    "txn": {"S": token},
                    COUNT: {"N": str(change.n)},
                    DIGEST: {"N": str(change.dsum)},
                    **end,
                },
                "ConditionExpression": _HEAD_ABSENT,
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#exp": EXPIRES_AT},
                "ExpressionAttributeValues": {":now": {"N": str(now)}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
    names = {"#seq": "seq", "#txn": "txn", "#live": "live"}
    if ending.guessed:
        names["#ended"] = ENDED_AT
    sets = ["#seq = :next", "#txn = :txn"]
    values: dict[str, AttributeValueTypeDef] = {}
    for n, (name, value) in enumerate(end.items()):
        names[f"#e{n}"] = name
        values[f":e{n}"] = value
        sets.append(f"#e{n} = :e{n}")
    update = ""
    if change.n or change.dsum or change.absolute:
        names["#n"], names["#dsum"] = COUNT, DIGEST
        values[":n"], values[":dsum"] = {"N": str(change.n)}, {"N": str(change.dsum)}
        if change.absolute:
            sets += ["#n = :n", "#dsum = :dsum"]
        else:
            # ADD is atomic and adds a negative number as a subtraction: the delta of this
            # commit whatever the stored sum (checked exact by the task Puts' conditions).
            update = " ADD #n :n, #dsum :dsum"
    removes = (["#live"] if change.legacy else []) + ([] if pending is None else pending.removes())
    update = "SET " + ", ".join(sets) + update
    update += (" REMOVE " + ", ".join(removes)) if removes else ""
    if change.legacy:
        condition = (
            _LEGACY_HEAD_AT_EXPECTED_SEQ_NOT_ENDED
            if ending.guessed
            else _LEGACY_HEAD_AT_EXPECTED_SEQ
        )
    else:
        condition = _HEAD_AT_EXPECTED_SEQ_NOT_ENDED if ending.guessed else _HEAD_AT_EXPECTED_SEQ
    if pending is not None:
        condition = f"{condition} AND {pending.condition()}"
        names |= pending.names()
        values |= pending.values()
    return {
        "Update": {
            "TableName": table_name,
            "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
            "UpdateExpression": update,
            "ConditionExpression": condition,
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
