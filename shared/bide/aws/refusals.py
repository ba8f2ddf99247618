"""What a commit of the DynamoDB store learns when a condition refused it though the head was at
the expected seq: nothing was written, and the commit is sent again knowing better.

Two guesses of a commit are checked by the transaction instead of read beforehand
(:mod:`bide.aws.digest`): each task's old state, which the head's digest change assumes, and
the head's format (a head written before the digest lists its live tasks and must be
converted, not added to). A third, that the session has not ended, is
:mod:`bide.aws.retention`'s. A refused task comes back whole in the cancellation
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``,
https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html);
a refused head is read once, since :func:`bide.aws.retry.transact` turns its refusal into a
:class:`~bide.engine.errors.ConflictError`.

The price of the rare path: one more ``TransactWriteItems`` (the cancelled one) for a writer
that guessed wrong, which a writer that read the tasks it rewrites (a load, ``task_at_head``,
``get_task``) or wrote them last does not; plus one ``GetItem`` of the head for the first commit
on a legacy head by a writer that did not load it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..engine.errors import ConflictError
from ..engine.records import TaskRecord
from . import digest, table
from .retention import ENDED_AT, End, Ends, expired
from .table import TASK_PREFIX

if TYPE_CHECKING:
    from .table import Item


def learn_tasks(
    views: digest.LiveViews,
    session_id: str,
    view: digest.View | None,
    records: Sequence[TaskRecord],
    failed: Sequence[tuple[int, dict[str, Any] | None]],
    now: float,
    read: Callable[[str, str], Item | None],
) -> digest.View:
    """``view`` with the old state of each task whose guess was wrong (action ``i`` of the
    transaction wrote ``records[i - 1]``): from the item the cancellation returned, or, from
    an emulator that returns none, one ``read`` (session id, sort key) each."""
    view = digest.View() if view is None else view
    found: list[tuple[str, int | None]] = []
    for i, item in failed:
        task_id = records[i - 1].id
        stored = item if item is not None else read(session_id, TASK_PREFIX + task_id)
        found.append((task_id, digest.live_wseq(stored, now)))
    view.guesses.update(found)
    views.saw(session_id, found)
    return view


def learn_head(
    views: digest.LiveViews,
    ends: Ends,
    session_id: str,
    expected_seq: int,
    end: End,
    change: digest.HeadChange,
    head: Item | None,
) -> digest.View | None:
    """After the head refused a commit at ``expected_seq`` and was read again (``head``): the
    view to send the commit again with, once the head showed that the session ended unseen
    (``end`` guessed it had not) or that its format is not the one ``change`` assumed (a head
    listing its live tasks gives all of them). None when neither explains the refusal; a
    :class:`~bide.engine.errors.ConflictError` when the head has moved on meanwhile."""
    seq = 0 if head is None or expired(head, ends.now()) else int(head["seq"]["N"])
    if head is None or seq != expected_seq:
        raise ConflictError(session_id, expected_seq, seq)
    ends.read(session_id, seq, head)
    legacy = digest.head_digest(head) is None
    if legacy:
        views.loaded(session_id, seq, table.manifest(head), legacy=True)
    ended_unseen = end.guessed and ENDED_AT in head
    if not ended_unseen and legacy == change.legacy:
        return None
    return views.get(session_id) or digest.View()
