"""A commit of one small task record as ONE conditional ``UpdateItem`` of the session head: the
record waits on the head ("pending") until the next commit that writes its task folds it into
the task item.

**Why.** A signal's delivery commits one task record and nothing else. As a transaction of the
head and the task item it costs 2 items x 2 write units (transactional writes cost twice) plus
each item's copy in the local index ``live``. A plain ``UpdateItem`` costs one write unit per
KB of "the larger of the item's size before and after the update", its index copy one more
(an LSI write is billed on the projected item, and ``live`` projects all)
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/LSI.html#LSI.ThroughputConsiderations).
So a head that stays under 1 KB with the record on it costs 1 + 1 instead of 4 + 2.

**Layout.** The head carries :data:`PENDING_TASK` (``pt``, the task id) and
:data:`PENDING_RECORD` (``pr``, the record's JSON); at most one task's record at a time, so
the head stays small (every head write is billed on its size). The task item is not written:
its ``wseq`` is unchanged, so the head's digest of live (task id, wseq) pairs
(:mod:`bide.aws.digest`) is unchanged too and a load's torn-read check stays on the task items.
Every read overlays the pending record on its task (:func:`overlay`).

**Which commits.** :meth:`PendingHead.qualifies`: exactly one record, live, of a task the
store's view knows live; no documents, no absent keys; not the session's first commit, not one
that ends it nor one into a session known ended; not on a head that still lists ``live``; the
record's JSON within :data:`PENDING_RECORD_LIMIT`; and no other task's record believed pending.
Everything else is the transaction (:mod:`bide.aws.dynamodb`), which keeps the pending record
exact with a :class:`Guard` on its head write: it folds the pending record when it writes that
task (``REMOVE pt, pr``, conditioned on ``pt`` being that task) and otherwise requires that
``pt`` is none of its tasks. Beliefs are guesses (:class:`Beliefs`), each checked by the
condition it shaped; a wrong one fails at the expected seq, is learned from the head as it
stands, and the commit is sent again, so a pending record (a delivered signal) is never lost.

**A lost answer.** A plain ``UpdateItem`` has no ``ClientRequestToken``, so a resend after a
lost response fails its seq condition. ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` returns
the head as it stands (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html).
The pending record carries the token of the commit that wrote it (:data:`PENDING_TOKEN`), so
the first attempt is known to have applied when the head is at the new seq with this commit's
token, or still holds this task's record with this commit's token however many commits of
other tasks landed since: success, once. Only a commit that folded the record between the lost
answer and the resend (it wrote the task, having read the record) hides it: then the commit
reports a :class:`~bide.engine.errors.ConflictError` although it applied, and the caller
reloads and finds its own write (a transaction's ``ClientRequestToken`` answers that case for
10 minutes; a plain write has none). A signal's worker is woken only after its delivery
returns, so that fold needs a wake already on its way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from ..engine.errors import ConflictError
from ..engine.records import TaskRecord
from . import digest, refusals
from .retention import ENDED_AT, End, Ends
from .table import HEAD_SORT_KEY, PARTITION_KEY, SORT_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, UpdateItemInputTypeDef

    from .offload import Prepared
    from .retry import Retrier
    from .table import Item

#: On the head: the id of the task whose record is pending there, and that record's JSON.
PENDING_TASK: Final = "pt"
PENDING_RECORD: Final = "pr"
#: On the head with them: the request token of the commit that made the record pending.
PENDING_TOKEN: Final = "ptk"

#: The largest record JSON (bytes of UTF-8) a head may hold. A write unit is 1 KB of the larger
#: of the item's sizes before and after (see the module); a head without a pending record is
#: about 150 bytes plus its session id, so 640 bytes of record leave room for a long session
#: id and task id. :func:`fits` checks the whole head against the write unit too.
PENDING_RECORD_LIMIT: Final = 640
# One write unit, the head's size it must stay within.
_WRITE_UNIT: Final = 1024
# A head's bytes besides its session id and the pending attributes: the names and values of
# sk, lsk, seq, txn (32 hex), n and dsum (numbers of up to 38 digits take up to 21 bytes),
# rounded up; and the pending token's name and value (32 hex).
_HEAD_OVERHEAD: Final = 192 + len(PENDING_TOKEN) + 32

# --- conditions -----------------------------------------------------------------------------

# The pending commit: the head's seq guard (bide.aws.head) on a head that keeps a digest (a
# legacy head is converted by a transaction first), holding no other task's pending record.
_HEAD_FREE_FOR_TASK: Final = (
    "#seq = :expected AND attribute_not_exists(#live)"
    " AND (attribute_not_exists(#pt) OR #pt = :task)"
)
# The same for a commit that guesses the session not ended (bide.aws.retention): the head
# checks the guess, and a refusal at the expected seq teaches the end.
_HEAD_FREE_FOR_TASK_NOT_ENDED: Final = _HEAD_FREE_FOR_TASK + " AND attribute_not_exists(#ended)"

# A transaction that writes the pending task folds its record: it must be that task's.
_PENDING_IS: Final = "#pt = :pt"
# A transaction writing tasks believed not pending: none of them is. IN takes up to 100
# operands and a commit holds at most 99 records
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html#Expressions.OperatorsAndFunctions.Comparators).
_PENDING_NONE_OF: Final = "(attribute_not_exists(#pt) OR NOT (#pt IN ({operands})))"


def pending_of(head: Item | None) -> str | None:
    """The task id whose record is pending on ``head``, if any."""
    found = None if head is None else head.get(PENDING_TASK)
    return None if found is None else found["S"]


def overlay(
    head: Item | None, records: dict[str, TaskRecord], wanted: Sequence[str] | None
) -> None:
    """Put the record pending on ``head`` in place of its task's in ``records``, if its task is
    ``wanted`` (the ids read; None: every id, a load). The pending record is always live and
    newer than its task's item."""
    task_id = pending_of(head)
    if head is not None and task_id is not None and (wanted is None or task_id in wanted):
        records[task_id] = TaskRecord.from_json(head[PENDING_RECORD]["S"])


def applied(head: Item | None, expected_seq: int, token: str, task_id: str) -> bool:
    """Whether ``head``, returned by a refused resend, shows that an earlier attempt of the
    commit with ``token`` applied: the head at its new seq with its token, or the task's
    record still pending with its token (see the module)."""
    if head is None:
        return False
    if int(head["seq"]["N"]) == expected_seq + 1 and head.get("txn", {}).get("S") == token:
        return True
    return pending_of(head) == task_id and head.get(PENDING_TOKEN, {}).get("S") == token


def fits(session_id: str, p: Prepared) -> bool:
    """Whether ``p`` may be pending on its session's head: inline, within
    :data:`PENDING_RECORD_LIMIT`, and the head with it within one write unit."""
    if p.offload or p.record is None or len(p.body) > PENDING_RECORD_LIMIT:
        return False
    pair = len(PENDING_TASK) + len(p.record.id.encode()) + len(PENDING_RECORD) + len(p.body)
    return _HEAD_OVERHEAD + 2 * len(session_id.encode()) + pair <= _WRITE_UNIT


@dataclass(frozen=True)
class Guard:
    """What a transaction's head write requires of the pending record: ``fold``, the task whose
    pending record it folds (it writes that task: REMOVE pt, pr); otherwise that ``pt`` is none
    of ``ids``, the tasks it writes."""

    fold: str | None
    ids: tuple[str, ...]

    def holds(self, pending: str | None) -> bool:
        """Whether the condition holds on a head with ``pending``."""
        if self.fold is not None:
            return pending == self.fold
        return pending is None or pending not in self.ids

    def condition(self) -> str:
        """The condition's fragment, ANDed to the head's seq guard."""
        if self.fold is not None:
            return _PENDING_IS
        return _PENDING_NONE_OF.format(operands=", ".join(f":pt{i}" for i in range(len(self.ids))))

    def names(self) -> dict[str, str]:
        """Its attribute names (the record's too when it folds: REMOVE)."""
        names = {"#pt": PENDING_TASK}
        folds = {"#pr": PENDING_RECORD, "#ptk": PENDING_TOKEN}
        return names | (folds if self.fold is not None else {})

    def values(self) -> dict[str, AttributeValueTypeDef]:
        """Its values."""
        if self.fold is not None:
            return {":pt": {"S": self.fold}}
        return {f":pt{i}": {"S": t} for i, t in enumerate(self.ids)}

    def removes(self) -> list[str]:
        """The attributes the head write REMOVEs
        (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html#Expressions.UpdateExpressions.REMOVE):
        only on a fold, whose condition (``pt`` is that task) means both are there, so nothing
        here relies on what REMOVE does to an absent attribute."""
        return ["#pt", "#pr", "#ptk"] if self.fold is not None else []


class Refused(Exception):
    """The pending commit's condition failed; ``head`` as it stood (None when the service
    returned no item: an emulator, or no head)."""

    def __init__(self, head: Item | None) -> None:
        self.head = head
        super().__init__("the head refused a pending commit")


_MAX_BELIEFS: Final = 10_000


class Beliefs:
    """What one store last saw pending on each session's head (a task id, or None). A missing
    entry is guessed none. Bounded: forgetting only costs a wrong guess, one refused write.
    Safe to share between threads."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def get(self, session_id: str) -> str | None:
        """The task believed pending on ``session_id``'s head."""
        with self._lock:
            return self._known.get(session_id)

    def set(self, session_id: str, task_id: str | None) -> None:
        """Believe ``task_id`` pending (None: none)."""
        with self._lock:
            if len(self._known) >= _MAX_BELIEFS:
                self._known.clear()
            self._known[session_id] = task_id

    def saw(self, session_id: str, head: Item | None) -> None:
        """A read of the session's head (None: no head)."""
        self.set(session_id, pending_of(head))


class PendingHead:
    """The pending path of :class:`~bide.aws.dynamodb.DynamoDBStore`'s commit, given the
    store's table, client, retries, session ends and live views, and a ``read_head`` for an
    emulator that returns no item with a failed condition."""

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient,
        retry: Retrier,
        ends: Ends,
        views: digest.LiveViews,
        read_head: Callable[[str], Item | None],
    ) -> None:
        self.table_name = table_name
        self.beliefs = Beliefs()
        self._ddb = client
        self._retry = retry
        self._ends = ends
        self._views = views
        self._read_head = read_head

    def qualifies(
        self,
        session_id: str,
        expected_seq: int,
        prepared: Sequence[Prepared],
        view: digest.View | None,
        end: End,
        docs: int,
        absent: int,
    ) -> bool:
        """Whether this commit goes onto the head (see the module)."""
        if docs or absent or expected_seq == 0 or len(prepared) != 1:
            return False
        record = prepared[0].record
        if record is None or not record.live or end.ends or end.ended_at is not None:
            return False
        if view is None or view.legacy_seq is not None or view.old(record.id) is None:
            return False
        believed = self.beliefs.get(session_id)
        return believed in (None, record.id) and fits(session_id, prepared[0])

    def commit(
        self, session_id: str, expected_seq: int, token: str, p: Prepared, end: End
    ) -> digest.View | None:
        """Send the pending commit. None: it applied (now or in an attempt whose answer was
        lost). A view to send the commit again with when the head refused it at the expected
        seq for a reason now learned (the session ended unseen, the head is legacy, another
        task's record is pending); :class:`~bide.engine.errors.ConflictError` when the head
        moved on."""
        assert p.record is not None
        task_id = p.record.id
        request = self._request(session_id, expected_seq, token, task_id, p.body.decode(), end)
        try:
            self._retry.run("commit", lambda: self._send(request))
        except Refused as exc:
            head = exc.head if exc.head is not None else self._read_head(session_id)
            if applied(head, expected_seq, token, task_id):
                # An earlier attempt applied and its answer was lost; the resend found its own
                # write. Success, once.
                self.beliefs.set(session_id, task_id)
                return None
            return self._learn(session_id, expected_seq, end, task_id, head)
        self.beliefs.set(session_id, task_id)
        return None

    def guard(self, session_id: str, expected_seq: int, ids: Sequence[str]) -> Guard | None:
        """The :class:`Guard` of a transaction at ``expected_seq`` writing tasks ``ids``; None
        for the first commit (a Put of a new head: nothing can be pending) or no tasks."""
        if expected_seq == 0 or not ids:
            return None
        believed = self.beliefs.get(session_id)
        return Guard(believed if believed in ids else None, tuple(ids))

    def committed(self, session_id: str, expected_seq: int, guard: Guard | None) -> None:
        """A transaction applied with ``guard``: a new head or a fold leaves nothing pending."""
        if expected_seq == 0 or (guard is not None and guard.fold is not None):
            self.beliefs.set(session_id, None)

    def learned(self, session_id: str, head: Item | None, guard: Guard | None) -> bool:
        """A transaction's head refused it at the expected seq and was read again (``head``):
        learn what is pending; True when the guard's belief was what failed."""
        pending = pending_of(head)
        self.beliefs.set(session_id, pending)
        return guard is not None and not guard.holds(pending)

    # --- the UpdateItem ---------------------------------------------------------------------

    def _request(
        self, session_id: str, expected_seq: int, token: str, task_id: str, body: str, end: End
    ) -> UpdateItemInputTypeDef:
        names = {"#seq": "seq", "#txn": "txn", "#live": "live"}
        names |= {"#pt": PENDING_TASK, "#pr": PENDING_RECORD, "#ptk": PENDING_TOKEN}
        if end.guessed:
            names["#ended"] = ENDED_AT
        return {
            "TableName": self.table_name,
            "Key": {PARTITION_KEY: {"S": session_id}, SORT_KEY: {"S": HEAD_SORT_KEY}},
            "UpdateExpression": (
                "SET #seq = :next, #txn = :txn, #pt = :task, #pr = :record, #ptk = :txn"
            ),
            "ConditionExpression": (
                _HEAD_FREE_FOR_TASK_NOT_ENDED if end.guessed else _HEAD_FREE_FOR_TASK
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                ":expected": {"N": str(expected_seq)},
                ":next": {"N": str(expected_seq + 1)},
                ":txn": {"S": token},
                ":task": {"S": task_id},
                ":record": {"S": body},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _send(self, request: UpdateItemInputTypeDef) -> None:
        try:
            self._ddb.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise  # transient ones are retried by the caller's Retrier
            item: Mapping[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
            raise Refused(dict(item) if item else None) from None

    def _learn(
        self, session_id: str, expected_seq: int, end: End, task_id: str, head: Item | None
    ) -> digest.View:
        # Raises ConflictError when the head moved on (or is gone); learns an unseen end and
        # a legacy head (which makes the resend a transaction).
        none = digest.HeadChange(0, 0, absolute=False)
        view = refusals.learn_head(
            self._views, self._ends, session_id, expected_seq, end, none, head
        )
        pending = pending_of(head)
        self.beliefs.set(session_id, pending)
        if view is None and pending in (None, task_id):
            raise ConflictError(session_id, expected_seq, None)  # nothing explains it
        return view or self._views.get(session_id) or digest.View()
