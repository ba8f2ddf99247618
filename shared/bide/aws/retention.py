"""How long the DynamoDB store keeps an ended session, and stamping its items to expire.

A session ends in one commit (the one writing
:data:`~bide.engine.store.base.SESSION_ENDED_KEY`). With a retention configured
(:meth:`~bide.aws.dynamodb.DynamoDBStore.set_retention`), that commit writes the session's
expiry, ``expires_at = ceil(ended_at + retention)`` in epoch seconds, on the head, and every
item written by it or any later commit carries the same ``expires_at``: the table's TTL
attribute. DynamoDB's TTL then deletes the items some time after that moment, typically
within a few days, and until then they still appear in reads
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html and
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html). So
the store treats an item past its ``expires_at`` as gone on every read (:func:`expired`), and
a session whose head expired as never written: all the session's items carry one expiry, so
they vanish for readers at one moment, whatever order DynamoDB deletes them in.

Items written before the end are stamped afterwards by :func:`stamp_session` (a long session
has far more items than one commit holds, so not in the end's commit): one conditional
``UpdateItem`` per unstamped item, found by a ``Query`` of the session's partition. An item
whose value is offloaded to S3 has its object re-written in place first, tagged
:data:`ENDED_TAG` (see :func:`tag_ended`). The head is marked ``stamped`` last; until then
every attempt reads what is still unstamped and carries on, so a crash between any two
steps is finished by the next attempt, and nothing is ever stamped twice with different
expiries.

**Offloaded values.** An S3 lifecycle rule deletes objects tagged :data:`ENDED_TAG` a fixed
number of days after they were *created* (lifecycle ages count from creation:
https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-expire-general-considerations.html).
Tagging alone would leave an old object's age running from its first write, so it could
expire before its session; re-writing it (a CopyObject onto itself, which sets a new
creation date) starts its age at the end or later. Objects written after the end are created
tagged. With the rule's days at least the retention, no object expires before the session
that references it (``docs/deploy.md``, "Retention"). Objects of live sessions carry no tag
and never expire.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from ..engine.clock import SystemClock
from ..engine.store.base import SESSION_ENDED_KEY, Doc, ended_at
from .table import DOC_PREFIX, HEAD_SORT_KEY, PARTITION_KEY, SORT_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef
    from mypy_boto3_s3.client import S3Client

    from .offload import S3Offload
    from .retry import Retrier
    from .table import Item

#: The table's TTL attribute (epoch seconds, a Number, as TTL requires).
EXPIRES_AT: Final = "expires_at"
#: On the head: when the session ended (epoch seconds).
ENDED_AT: Final = "ended_at"
#: On the head: the expiry every item of the session carries once stamping finished.
STAMPED: Final = "stamped"
#: The S3 object tag of values of ended sessions (the lifecycle rule's filter).
ENDED_TAG_KEY: Final = "bide-retention"
ENDED_TAG_VALUE: Final = "ended"
ENDED_TAG: Final = f"{ENDED_TAG_KEY}={ENDED_TAG_VALUE}"

# --- conditions -----------------------------------------------------------------------------

# Stamping never creates an item: one deleted meanwhile (by TTL, after the expiry) stays gone.
_ITEM_EXISTS: Final = "attribute_exists(#pk)"
# The head's "stamped" mark names the expiry it finished: only ever the head's own.
_HEAD_EXPIRES_AT: Final = "#exp = :exp"
# What is left to stamp: the session's items without an expiry.
_UNSTAMPED: Final = "attribute_not_exists(#exp)"


def expiry_of(ended_at: float, retention: float | None) -> int | None:
    """The expiry (epoch seconds) of a session ended at ``ended_at``; None: kept forever."""
    return None if not retention else math.ceil(ended_at + retention)


@dataclass(frozen=True)
class End:
    """A commit's view of its session's end: ``ended_at``, ``expires_at`` (the expiry the
    commit's items carry; None: kept forever), whether this commit is the one that ends the
    session, and whether "not ended" is a guess the head's condition must check."""

    ended_at: float | None
    expires_at: int | None
    ends: bool
    guessed: bool


NOT_ENDED: Final = End(None, None, ends=False, guessed=False)


#: A store's last view of a session: ``(seq, ended_at, expires_at, stamping may be left)``.
Known = tuple[int, float | None, int | None, bool]
_MAX_KNOWN: Final = 10_000
_SYSTEM_CLOCK: Final = SystemClock()


class Ends:
    """One store's retention and what it last saw of each session's end: the expiry a commit
    at that seq must write (only a commit changes it, and a commit moves the seq). Bounded:
    forgetting a session only costs a read. Safe to share between threads."""

    def __init__(self) -> None:
        self.retention: float | None = None
        self.clock: Callable[[], float] | None = None
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        """The time expiries are compared against (epoch seconds)."""
        return self.clock() if self.clock is not None else _SYSTEM_CLOCK.now()

    def get(self, session_id: str) -> Known | None:
        """The last view of ``session_id``, if any."""
        with self._lock:
            return self._known.get(session_id)

    def put(self, session_id: str, known: Known) -> None:
        """Remember ``known`` of ``session_id``."""
        with self._lock:
            if len(self._known) >= _MAX_KNOWN:
                self._known.clear()
            self._known[session_id] = known

    def read(self, session_id: str, seq: int, head: Item | None) -> None:
        """Remember the session as a read of its ``head`` (at ``seq``) shows it."""
        found = None if head is None else head.get(ENDED_AT)
        expires_at = number(head, EXPIRES_AT)
        left = expires_at is not None and number(head, STAMPED) != expires_at
        self.put(session_id, (seq, None if found is None else float(found["N"]), expires_at, left))

    def committed(self, session_id: str, seq: int, end: End) -> None:
        """Remember the session after a commit (to ``seq``) with view ``end``."""
        before = self.get(session_id)
        left = end.expires_at is not None and (end.ends or before is None or before[3])
        self.put(session_id, (seq, end.ended_at, end.expires_at, left))

    def stamped(self, session_id: str) -> None:
        """Remember that stamping the session finished."""
        known = self.get(session_id)
        if known is not None:
            self.put(session_id, (*known[:3], False))

    def needs_stamping(self, session_id: str) -> bool:
        """False only when the last view shows the session not ended, kept or stamped."""
        known = self.get(session_id)
        return known is None or known[3]

    def end_of(self, session_id: str, expected_seq: int, docs: Sequence[Doc]) -> End:
        """:func:`end_of` with this store's view and retention."""
        return end_of(self.get(session_id), expected_seq, docs, self.retention, self.now)


def end_of(
    known: Known | None,
    expected_seq: int,
    docs: Sequence[Doc],
    retention: float | None,
    now: Callable[[], float],
) -> End:
    """What a commit at ``expected_seq`` records of the session's end, given ``known``, the
    store's last view of the session ``(seq, ended_at, expires_at, ...)``. Without a view at that
    very seq the session is guessed not ended, and the head's condition checks the guess (one
    seq has one end state: only a commit changes it, and a commit moves the seq)."""
    guessed = expected_seq > 0 and (known is None or known[0] != expected_seq)
    if known is not None and not guessed and known[1] is not None:
        return End(known[1], known[2], ends=False, guessed=False)  # ended before: unchanged
    end_doc = next((d for d in docs if d.key == SESSION_ENDED_KEY), None)
    if end_doc is None:
        return End(None, None, ends=False, guessed=guessed)
    at = ended_at(end_doc.body)
    at = now() if at is None else at
    return End(at, expiry_of(at, retention), ends=True, guessed=guessed)


def expired(item: Item, now: float) -> bool:
    """Whether ``item`` is past its expiry: gone for readers, whether or not TTL deleted it."""
    found = item.get(EXPIRES_AT)
    return found is not None and int(found["N"]) <= now


def number(item: Item | None, name: str) -> int | None:
    """A Number attribute of ``item`` as an int, or None."""
    found = None if item is None else item.get(name)
    return None if found is None else int(found["N"])


def tag_ended(s3: S3Client, retry: Retrier, bucket: str, key: str, expires_at: int) -> None:
    """Re-write an offloaded object in place tagged :data:`ENDED_TAG`, so its lifecycle age
    starts now (S3 refuses a copy onto itself that changes nothing, hence the metadata)."""
    try:
        retry.run(
            f"tag s3://{bucket}/{key}",
            lambda: s3.copy_object(
                Bucket=bucket,
                Key=key,
                CopySource={"Bucket": bucket, "Key": key},
                MetadataDirective="REPLACE",
                ContentType="application/json",
                Metadata={"bide-expires-at": str(expires_at)},
                TaggingDirective="REPLACE",
                Tagging=ENDED_TAG,
            ),
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
        # Already gone: nothing left to expire.


def stamp_session(
    ddb: DynamoDBClient,
    s3: Callable[[], S3Client],
    retry: Retrier,
    table_name: str,
    session_id: str,
    linked: Iterable[tuple[str, str]] = (),
) -> int:
    """Give every item of an ended ``session_id`` (and each ``(partition, document key)`` in
    ``linked``: documents of other partitions that belong to it, such as its owner's index
    entry) the head's ``expires_at``. Items are stamped one ``UpdateItem`` each (never more
    than one commit's worth of anything at once), offloaded objects are tagged first, and the
    head is marked last, so a repeat after a crash finishes the rest. Returns how many items
    this call stamped; 0 for a session not ended, kept forever or already stamped."""
    head_key = {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}}
    head = retry.run(
        "read head",
        lambda: ddb.get_item(TableName=table_name, Key=head_key, ConsistentRead=True),
    ).get("Item")
    expires_at = number(head, EXPIRES_AT)
    if head is None or expires_at is None or number(head, STAMPED) == expires_at:
        return 0
    names = {"#pk": PARTITION_KEY, "#exp": EXPIRES_AT}

    def stamp(item: Item) -> int:
        if "s3_key" in item:
            tag_ended(s3(), retry, item["s3_bucket"]["S"], item["s3_key"]["S"], expires_at)
        try:
            retry.run(
                "stamp expiry",
                lambda: ddb.update_item(
                    TableName=table_name,
                    Key={PARTITION_KEY: item[PARTITION_KEY], SORT_KEY: item[SORT_KEY]},
                    UpdateExpression="SET #exp = :exp",
                    ConditionExpression=_ITEM_EXISTS,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={":exp": {"N": str(expires_at)}},
                ),
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return 0  # gone already
        return 1

    count = 0
    request: QueryInputTypeDef = {
        "TableName": table_name,
        "KeyConditionExpression": "#pk = :pk",
        "FilterExpression": _UNSTAMPED,
        "ProjectionExpression": "#pk, #sk, s3_bucket, s3_key",
        "ExpressionAttributeNames": {**names, "#sk": SORT_KEY},
        "ExpressionAttributeValues": {":pk": {"S": session_id}},
        "ConsistentRead": True,
    }
    while True:
        page = retry.run("find unstamped items", lambda: ddb.query(**request))
        for item in page.get("Items", []):
            count += stamp(item)
        last = page.get("LastEvaluatedKey")
        if not last:
            break
        request["ExclusiveStartKey"] = last
    for partition, key in linked:
        found = retry.run(
            "read linked document",
            lambda p=partition, k=key: ddb.get_item(  # type: ignore[misc]
                TableName=table_name,
                Key={PARTITION_KEY: {"S": p}, SORT_KEY: {"S": DOC_PREFIX + k}},
                ConsistentRead=True,
            ),
        ).get("Item")
        if found is not None and number(found, EXPIRES_AT) != expires_at:
            count += stamp(found)
    try:
        retry.run(
            "mark stamped",
            lambda: ddb.update_item(
                TableName=table_name,
                Key=head_key,
                UpdateExpression="SET #st = :exp",
                ConditionExpression=_HEAD_EXPIRES_AT,
                ExpressionAttributeNames={"#st": STAMPED, "#exp": EXPIRES_AT},
                ExpressionAttributeValues={":exp": {"N": str(expires_at)}},
            ),
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        # The head is gone (expired and deleted): nothing left to mark.
    return count


class Retaining:
    """What :class:`~bide.aws.dynamodb.DynamoDBStore` offers of retention: its setting, and
    finishing the end of a session (:class:`~bide.aws.ports.EndedSessions`)."""

    # Created on first use, so the store's constructor stays as it is.
    _ends_state: Ends | None = None
    # The store's own: its table, clients and retries.
    table_name: str
    _ddb: DynamoDBClient
    _offload: S3Offload
    _retry: Retrier

    @property
    def _ends(self) -> Ends:
        if self._ends_state is None:
            self._ends_state = Ends()
        return self._ends_state

    def _check_open(self) -> None:
        raise NotImplementedError  # the store's

    def set_retention(
        self, seconds: float | None, *, clock: Callable[[], float] | None = None
    ) -> None:
        """Keep an ended session ``seconds`` after its end, then let DynamoDB's TTL delete it
        (None or 0: kept forever). ``clock`` (epoch seconds; default the system clock) is
        what reads compare expiries against. Applies to sessions ended from now on: an
        ended session keeps the expiry it got."""
        if seconds is not None and seconds < 0:
            raise ValueError("retention seconds must be >= 0 (0 or None: keep forever)")
        self._ends.retention = seconds or None
        self._ends.clock = clock

    def stamp_ended(self, session_id: str, linked: Sequence[tuple[str, str]] = ()) -> int:
        """Finish ending ``session_id``: give every item written before its end (and each
        ``(partition, document key)`` of ``linked``) the session's expiry, tagging offloaded
        values for the bucket's lifecycle rule. Idempotent and safe to repeat after a crash
        (:func:`bide.aws.retention.stamp_session`); how many items it stamped."""
        self._check_open()
        count = stamp_session(
            self._ddb, self._offload.client, self._retry, self.table_name, session_id, linked
        )
        self._ends.stamped(session_id)
        return count

    def needs_stamping(self, session_id: str) -> bool:
        """Whether :meth:`stamp_ended` may have work left, from this store's last view of the
        session (no I/O): False when that view shows it not ended, kept forever, or stamped."""
        return self._ends.needs_stamping(session_id)
