"""The session head's digest of its live tasks: a constant-size stand-in for listing them.

A load of the DynamoDB store (:meth:`~bide.aws.dynamodb.DynamoDBStore.load`) is one Query, and
a Query is only read-committed with respect to transactions, so the load must tell a
consistent snapshot from a torn one by the data itself. The head carries ``n``, the count of
live tasks, and ``dsum``, the sum over them of :func:`term` ``(task id, wseq)``: a task is
written at most once per commit, so (id, wseq) names exactly one version of a record, and a
Query that returns another set of versions than the committed one sums to another value but
with a chance of about 2**-80 (:data:`DIGEST_BITS`). Unlike the list it replaces (``live =
{task id: wseq}``, 37 KB at 1,000 live tasks, rewritten by every commit and copied into the
live index), the digest is two numbers whatever the live set.

A commit moves the digest with DynamoDB's ``ADD`` by the change it makes: plus :func:`term`
of each record it writes live, minus the term of each record it rewrites that was live
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html#Expressions.UpdateExpressions.ADD).
So the writer must know each rewritten record's old state. It guesses it from what this store
last read or wrote (:class:`LiveViews`; an id it never saw is guessed not live) and every
task Put carries its guess as a condition (:func:`task_guard`), so the transaction applies
only when every term of the delta is right. A wrong guess cancels it, the item as it stands
comes back in the cancellation (``ALL_OLD``), and the commit is sent again knowing it.

**Bounds.** DynamoDB numbers keep 38 significant digits
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html).
A term is below 2**80; a session's item collection is capped at 10 GB and a live task item is
more than 16 bytes, so fewer than 2**30 tasks are live at once and ``dsum`` stays below
2**110 (about 1.3e33, 34 digits); a commit's delta is within 99 terms of either sign. All
exact integers, no rounding.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ..engine.records import TaskRecord
from .retention import EXPIRES_AT, expired
from .table import LIVE_INDEX_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from .table import Item

#: Bits of one term: the chance that a torn Query sums like the committed state is about 2**-80.
DIGEST_BITS: Final = 80
#: The head's count of live tasks and its sum of their terms.
COUNT: Final = "n"
DIGEST: Final = "dsum"

# --- conditions -----------------------------------------------------------------------------

# A task Put that believes the record live at wseq :old: the delta subtracts its term. "Live"
# is what a load counts: in the live index and not past its expiry (an item left by an
# expired generation of the session id is counted by no head).
_TASK_LIVE_AT: Final = (
    "#wseq = :old AND attribute_exists(#lsk) AND (attribute_not_exists(#exp) OR #exp > :now)"
)
# A task Put that believes the record not live (ended, never written, or expired): the delta
# subtracts nothing. An item TTL deletes meanwhile passes either way.
_TASK_NOT_LIVE: Final = "attribute_not_exists(#lsk) OR #exp <= :now"


def term(task_id: str, wseq: int) -> int:
    """The digest's term of the version of ``task_id`` written by the commit of seq ``wseq``:
    a stable hash (not Python's ``hash``, which differs between processes)."""
    h = hashlib.blake2b(f"{task_id}\x00{wseq}".encode(), digest_size=DIGEST_BITS // 8)
    return int.from_bytes(h.digest(), "big")


def digest_of(live: Mapping[str, int]) -> tuple[int, int]:
    """``(n, dsum)`` of the live set ``{task id: wseq}``."""
    return len(live), sum(term(task_id, wseq) for task_id, wseq in live.items())


def head_digest(head: Item) -> tuple[int, int] | None:
    """The head's ``(n, dsum)``; None for a head written before the digest (it lists its live
    tasks in ``live`` instead: :func:`bide.aws.table.manifest`)."""
    if COUNT not in head:
        return None
    return int(head[COUNT]["N"]), int(head[DIGEST]["N"]) if DIGEST in head else 0


def live_wseq(item: Item | None, now: float) -> int | None:
    """The wseq of a task item a load would count as live at ``now``; None if it would not."""
    if item is None or LIVE_INDEX_KEY not in item or expired(item, now):
        return None
    return int(item["wseq"]["N"])


def task_guard(old: int | None, now: int) -> dict[str, object]:
    """The condition a task Put carries: the record stands as guessed (live at wseq ``old``,
    or not live when None) at ``now`` (whole epoch seconds). The item comes back when not."""
    names = {"#lsk": LIVE_INDEX_KEY, "#exp": EXPIRES_AT}
    values: dict[str, AttributeValueTypeDef] = {":now": {"N": str(now)}}
    if old is not None:
        names["#wseq"] = "wseq"
        values[":old"] = {"N": str(old)}
    return {
        "ConditionExpression": _TASK_NOT_LIVE if old is None else _TASK_LIVE_AT,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


@dataclass(frozen=True)
class HeadChange:
    """What a commit does to the head's digest: ``ADD`` ``n`` and ``dsum`` (``absolute`` False),
    or ``SET`` them (the first commit, and the commit converting a ``legacy`` head, one that
    still lists ``live``, which it removes)."""

    n: int
    dsum: int
    absolute: bool
    legacy: bool = False


@dataclass
class View:
    """A store's guesses of one session's live tasks: ``{task id: wseq}``, None for one known
    not live. ``complete``: ids not listed are not live (a load saw them all). ``legacy_seq``:
    the seq at which a load found a head that lists ``live``, ``guesses`` being that list."""

    guesses: dict[str, int | None] = field(default_factory=dict)
    complete: bool = False
    legacy_seq: int | None = None

    def old(self, task_id: str) -> int | None:
        """The guessed wseq of ``task_id`` if live (not listed: not live)."""
        return self.guesses.get(task_id)


def plan(
    view: View | None, expected_seq: int, records: Sequence[TaskRecord]
) -> tuple[list[int | None], HeadChange]:
    """Each record's guessed old state and the head's change, for a commit at
    ``expected_seq`` (one record per id). A head guessed legacy at exactly ``expected_seq`` is
    converted: its list at that seq is known, so the new digest is computed whole."""
    view = View() if view is None else view
    new_seq = expected_seq + 1
    olds = [view.old(r.id) for r in records]
    if expected_seq == 0 or view.legacy_seq == expected_seq:
        live = {} if expected_seq == 0 else {i: w for i, w in view.guesses.items() if w is not None}
        for r in records:
            live.pop(r.id, None)
            if r.live:
                live[r.id] = new_seq
        n, dsum = digest_of(live)
        return olds, HeadChange(n, dsum, absolute=True, legacy=expected_seq > 0)
    n = dsum = 0
    for r, old in zip(records, olds, strict=True):
        if old is not None:
            n, dsum = n - 1, dsum - term(r.id, old)
        if r.live:
            n, dsum = n + 1, dsum + term(r.id, new_seq)
    return olds, HeadChange(n, dsum, absolute=False)


_MAX_IDS: Final = 200_000


class LiveViews:
    """One store's :class:`View` per session, the most recently used first to stay. Bounded
    (about :data:`_MAX_IDS` ids in all): forgetting a session only costs a wrong guess, one
    cancelled transaction. Safe to share between threads."""

    def __init__(self) -> None:
        self._views: OrderedDict[str, View] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, session_id: str) -> View | None:
        """A copy of the view of ``session_id``, if any."""
        with self._lock:
            view = self._views.get(session_id)
            if view is None:
                return None
            self._views.move_to_end(session_id)
            return View(dict(view.guesses), view.complete, view.legacy_seq)

    def loaded(self, session_id: str, seq: int, live: Mapping[str, int], legacy: bool) -> None:
        """A consistent load at ``seq`` found exactly ``live`` (a ``legacy`` head's list)."""
        self._put(session_id, View(dict(live), True, seq if legacy else None))

    def saw(self, session_id: str, found: Iterable[tuple[str, int | None]]) -> None:
        """Reads found these tasks live at a wseq (or not live, None). Ignored while the view
        holds a legacy head's list: that list is exact at its seq, and a read at a later seq
        mixed into it would make the conversion's digest wrong."""
        self._update(session_id, dict(found), keep_legacy=True)

    def committed(self, session_id: str, records: Sequence[TaskRecord], new_seq: int) -> None:
        """A commit to ``new_seq`` wrote ``records`` (any legacy list is gone with it)."""
        self._update(session_id, {r.id: new_seq if r.live else None for r in records})

    def _update(
        self, session_id: str, found: dict[str, int | None], keep_legacy: bool = False
    ) -> None:
        with self._lock:
            view = self._views.get(session_id)
            if view is None:
                view = View()
            elif view.legacy_seq is not None:
                if keep_legacy:
                    return
                view.legacy_seq = None
            self._size -= len(view.guesses)
            view.guesses.update(found)
            self._store(session_id, view)

    def _put(self, session_id: str, view: View) -> None:
        with self._lock:
            old = self._views.get(session_id)
            self._size -= 0 if old is None else len(old.guesses)
            self._store(session_id, view)

    def _store(self, session_id: str, view: View) -> None:
        self._views[session_id] = view
        self._views.move_to_end(session_id)
        self._size += len(view.guesses)
        while self._size > _MAX_IDS and len(self._views) > 1:
            _, dropped = self._views.popitem(last=False)
            self._size -= len(dropped.guesses)
