"""Mailboxes: an ordered inbox of envelopes for a long-lived task, kept as documents.

A receiver of workflow-tool invocations or a lifecycle controller serves many callers, so it
cannot know in advance which key to sleep on. A mailbox gives it one: envelope ``n`` is the
document ``mailbox/<name>/m/<n>``, posted in the same commit as a :data:`MAILBOX` signal on key
``<name>#<n>`` to the owning task. The task handles every envelope from ``processed`` on, then
sleeps on ``<name>#<processed>`` (see :func:`next_envelope`): the key of the first envelope it
has not seen. An envelope posted while it runs stores its signal early and the sleep wakes at
once; the pass that reads an envelope without having slept on its key consumes that key
(``tx.consume``), so its value leaves the task's record like a woken key's does (see
:mod:`bide.engine.slots`). Each key serves one wait, because ``processed`` only grows.

A pull reader (no owning task) reads the same documents with :func:`read_mailbox`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .host import WriteTx, read_docs
from .signals import SignalKey, SignalResult, SignalToken, define_signal
from .state import Checkpoint, Sleeping
from .tasks import TaskDefinition, TaskView, define_task


class MailboxPing(BaseModel):
    """The value of :data:`MAILBOX`: which mailbox and envelope arrived."""

    mailbox: str
    seq: int


MAILBOX: SignalToken[MailboxPing] = define_signal("bide.mailbox", 1, MailboxPing)


def mailbox_head_key(name: str) -> str:
    """The document counting a mailbox's envelopes."""
    return f"mailbox/{name}"


def envelope_key(name: str, seq: int) -> str:
    """The document of envelope ``seq`` (zero-padded, so keys sort in posting order)."""
    return f"mailbox/{name}/m/{seq:08d}"


def next_envelope(name: str, processed: int) -> SignalKey[MailboxPing]:
    """The key to sleep on after handling envelopes ``0 .. processed-1``."""
    return MAILBOX.key(f"{name}#{processed}")


def post(
    tx: WriteTx, name: str, envelope: dict[str, Any], *, ping: str | None
) -> tuple[int, SignalResult | None]:
    """Append ``envelope`` and, when ``ping`` names a task, signal it in the same commit.

    Returns the envelope's number and the signal's result (None without ``ping``).
    """
    head = tx.get_doc(mailbox_head_key(name)) or {"name": name, "next": 0}
    seq = int(head["next"])
    tx.put_doc(envelope_key(name, seq), {"seq": seq, "at": tx.now(), **envelope})
    tx.put_doc(mailbox_head_key(name), {**head, "next": seq + 1})
    if ping is None:
        return seq, None
    result = tx.signal(ping, MAILBOX, f"{name}#{seq}", {"mailbox": name, "seq": seq})
    return seq, result


def read_mailbox(reader: Any, name: str, after: int = 0) -> list[dict[str, Any]]:
    """Envelopes numbered ``after`` and later, in order (``reader``: a harness, runtime or tx)."""
    return [
        body for _key, body in read_docs(reader, f"mailbox/{name}/m/") if int(body["seq"]) >= after
    ]


def sleep_for_next(name: str, processed: int, checkpoint: Checkpoint | str) -> Sleeping:
    """The state of a task that handled ``processed`` envelopes and waits for the next one."""
    return Sleeping(checkpoint=checkpoint, signals=(next_envelope(name, processed),))


def unread(tx: WriteTx, name: str, processed: int) -> list[dict[str, Any]]:
    """Envelopes ``processed`` and later, read one by one up to the mailbox's head: the cost
    of a pass follows the new envelopes, not every envelope the mailbox ever held."""
    head = tx.get_doc(mailbox_head_key(name))
    count = int(head["next"]) if head is not None else 0
    found = (tx.get_doc(envelope_key(name, seq)) for seq in range(processed, count))
    return [body for body in found if body is not None]


Handler = Callable[[WriteTx, dict[str, Any]], None]


def mailbox_task(kind: str, mailbox: str, handle: Handler) -> TaskDefinition:
    """A task kind that serves ``mailbox``: each pass hands every new envelope to
    ``handle(tx, envelope)`` inside one commit, then sleeps until the next envelope.

    ``handle`` may write documents, signal tasks or resolve promises through ``tx``; it may
    run more than once for the same envelope (a conflict evaluates the commit again), so it
    must be free of effects outside ``tx``.
    """

    async def serve(task: TaskView, rt: Any) -> None:
        processed = int(task.checkpoint.get("processed", 0))

        def build(tx: Any) -> Sleeping:
            envelopes = unread(tx, mailbox, processed)
            for envelope in envelopes:
                handle(tx, envelope)
            done = processed + len(envelopes)
            for seq in range(processed, done):
                # Its signal served no sleep (or its wake already moved it): settle it, so
                # the record does not keep one unused value per envelope read in a batch.
                tx.consume(next_envelope(mailbox, seq))
            return sleep_for_next(mailbox, done, {"phase": "serve", "processed": done})

        await rt.commit(build)

    return define_task(kind, 1, lambda _input: {"phase": "serve"}, {"serve": serve})
