"""Invocations of workflow tools: recording and emitting them, and validating replies.

Documents:

* ``invocation/<id>``: one call of a bound tool: the binding, the arguments, the destination
  and producer identity, one promise and correlation id per completion key, and whether it
  could be delivered;
* ``mailbox/receiver.<name>/m/<n>``: what a receiver gets: ``request`` envelopes (push and
  pull) and ``cancel`` envelopes (a per-key notice that the caller no longer needs a result).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..engine.errors import BideError
from ..engine.host import WriteTx
from ..engine.ids import keyed_id
from ..engine.mailbox import Handler, mailbox_task, post, read_mailbox
from ..engine.signals import SignalResult
from ..promises import (
    NoticeRoute,
    ResolveResult,
    create_promise,
    read_promise,
    resolve_promise,
)
from ..promises.model import PromiseDoc
from .declaration import Receiver, WorkflowBinding


class ReplyRejected(BideError):
    """A reply that does not belong to the invocation it names: unknown invocation or key,
    another producer, another correlation, or a value that fails the reply schema. Nothing was
    written; ``rule`` says which check failed."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"reply rejected ({rule}): {message}; nothing was changed")


class KeyRef(BaseModel):
    """One completion key of an invocation: its promise and correlation id."""

    model_config = ConfigDict(extra="forbid")

    promise: str
    correlation: str


class InvocationDoc(BaseModel):
    """The document ``invocation/<id>``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    binding: str
    destination: Literal["push", "pull", "start"]
    completion: Literal["accepted", "joined", "promises"]
    receiver: str | None = None
    producer: str
    call_task: str | None
    arguments: dict[str, Any]
    arguments_digest: str
    keys: dict[str, KeyRef] = Field(default_factory=dict)
    status: Literal["accepted", "undeliverable"] = "accepted"
    error: str | None = None
    created_at: float = 0.0


def invocation_doc_key(invocation_id: str) -> str:
    """The document of an invocation."""
    return f"invocation/{invocation_id}"


def read_invocation(reader: Any, invocation_id: str) -> InvocationDoc | None:
    """An invocation (``reader``: a harness, runtime or tx); None when unknown."""
    body = reader.get_doc(invocation_doc_key(invocation_id))
    return None if body is None else InvocationDoc.model_validate(body)


def invocation_id_for(session_id: str, call_task: str, binding: str) -> str:
    """The stable identity of a call's invocation: a rerun of the call derives the same one."""
    return keyed_id("inv-", session_id, call_task, binding)


def _digest(arguments: Mapping[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def record_invocation(
    tx: WriteTx, binding: WorkflowBinding, call_task: str, arguments: BaseModel
) -> InvocationDoc:
    """Record a call's invocation, its promises and its emission, all in ``tx``'s commit.

    Idempotent: an invocation already recorded is returned unchanged, so the emission happens
    once however often the call reruns. The destination comes from ``binding`` only.
    """
    invocation_id = invocation_id_for(tx.session_id, call_task, binding.name)
    existing = read_invocation(tx, invocation_id)
    if existing is not None:
        return existing
    dumped = arguments.model_dump(mode="json")
    keys = {
        key: KeyRef(
            promise=keyed_id("p-", invocation_id, key),
            correlation=keyed_id("corr-", invocation_id, key),
        )
        for key in binding.completion_keys(arguments)
    }
    destination = binding.destination
    receiver: Receiver | None = getattr(destination, "receiver", None)
    envelope = {
        "type": "request",
        "invocation": invocation_id,
        "binding": binding.name,
        "arguments": dumped,
        "keys": {key: ref.model_dump() for key, ref in keys.items()},
    }
    if destination.kind == "start":
        # A new execution per invocation, its identity derived from the invocation.
        producer = tx.create_task(
            destination.recipe, envelope, key=f"binding:{invocation_id}", owner=None
        )
    elif destination.kind == "push":
        assert receiver is not None and receiver.task is not None
        producer = tx.create_task(
            receiver.task, {"receiver": receiver.name}, key=f"receiver:{receiver.name}", owner=None
        )
    else:
        assert receiver is not None
        producer = f"receiver:{receiver.name}"
    doc = InvocationDoc(
        id=invocation_id,
        binding=binding.name,
        destination=destination.kind,
        completion=binding.completion,
        receiver=receiver.name if receiver is not None else None,
        producer=producer,
        call_task=call_task,
        arguments=dumped,
        arguments_digest=_digest(dumped),
        keys=keys,
        created_at=tx.now(),
    )
    deadline = None if binding.hard_deadline is None else tx.now() + binding.hard_deadline
    group = [ref.promise for ref in keys.values()]
    for key, ref in keys.items():
        if destination.kind == "start":
            notice = NoticeRoute(task=producer, key=key)
        else:
            assert receiver is not None
            notice = NoticeRoute(task=producer, mailbox=receiver.mailbox)
        create_promise(
            tx,
            ref.promise,
            deadline=deadline,
            # A joined call waits for its one promise: stopping the call cancels it (and tells
            # the producer). Handles of `promises` outlive the call that returned them.
            scope=call_task if binding.completion == "joined" else None,
            producer=producer,
            correlation=ref.correlation,
            key=key,
            invocation=invocation_id,
            group=group,
            close_task=producer if destination.kind == "start" else None,
            notice=notice,
            label=f"{binding.name}:{key}",
        )
    if receiver is not None:
        ping = producer if destination.kind == "push" else None
        _seq, delivered = post(tx, receiver.mailbox, envelope, ping=ping)
        if delivered not in (None, SignalResult.DELIVERED, SignalResult.DUPLICATE):
            why = f"receiver {receiver.name!r} is not running ({delivered})"
            doc = doc.model_copy(update={"status": "undeliverable", "error": why})
            for ref in keys.values():
                resolve_promise(tx, ref.promise, "rejected", error=why)
    tx.put_doc(invocation_doc_key(invocation_id), doc.model_dump(mode="json"))
    return doc


def check_reply(
    invocation: InvocationDoc | None,
    promise: PromiseDoc | None,
    key: str,
    producer: str | None,
    correlation: str,
) -> None:
    """Validate a reply's routing against what the invocation stored. Raises
    :class:`ReplyRejected`; a pure function of the documents."""
    if invocation is None:
        raise ReplyRejected("unknown-invocation", "no such invocation in this session")
    if key not in invocation.keys or promise is None:
        known = sorted(invocation.keys)
        raise ReplyRejected(
            "unknown-key", f"invocation {invocation.id} has no completion key {key!r} ({known})"
        )
    if producer != promise.producer:
        raise ReplyRejected(
            "producer-mismatch",
            f"invocation {invocation.id} was emitted to producer {promise.producer!r}, "
            f"not {producer!r}",
        )
    if correlation != promise.correlation:
        raise ReplyRejected(
            "correlation-mismatch",
            f"correlation {correlation!r} does not match key {key!r} of invocation {invocation.id}",
        )


def reply_in(
    tx: WriteTx,
    binding_of: Callable[[str], WorkflowBinding | None],
    invocation_id: str,
    key: str,
    *,
    correlation: str,
    producer: str | None = None,
    status: Literal["resolved", "rejected"] = "resolved",
    value: Any = None,
    error: str | None = None,
) -> ResolveResult:
    """Apply a producer's reply for one completion key, in ``tx``'s commit.

    ``producer`` defaults to the committing task (a receiver or execution replying from its own
    phase). The reply must match the stored producer identity and correlation, and a
    ``resolved`` value must match the binding's reply schema; otherwise :class:`ReplyRejected`
    is raised before anything is written. A valid reply is an ordinary terminal write, so a
    reply to a cancelled or expired promise is ``ignored``.
    """
    invocation = read_invocation(tx, invocation_id)
    ref = invocation.keys.get(key) if invocation is not None else None
    promise = read_promise(tx, ref.promise) if ref is not None else None
    check_reply(invocation, promise, key, producer or tx.task_id, correlation)
    assert invocation is not None and ref is not None
    if status == "resolved":
        binding = binding_of(invocation.binding)
        if binding is None:
            raise ReplyRejected(
                "unknown-binding", f"binding {invocation.binding!r} is not admitted"
            )
        if binding.reply_schema is not None:
            try:
                parsed = binding.reply_schema.model_validate(value)
            except ValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or '(value)'}: {e['msg']}"
                    for e in exc.errors()
                )
                raise ReplyRejected("reply-schema", f"the value fails {detail}") from None
            value = parsed.model_dump(mode="json")
    return resolve_promise(tx, ref.promise, status, value, error)


def pull_invocations(reader: Any, receiver: str, after: int = 0) -> list[dict[str, Any]]:
    """Request envelopes of a pull (or push) receiver numbered ``after`` and later."""
    return [
        envelope
        for envelope in read_mailbox(reader, f"receiver.{receiver}", after)
        if envelope["type"] == "request"
    ]


def task_receiver(name: str, handle: Handler) -> Receiver:
    """A push receiver whose task hands every envelope (``request`` or ``cancel``) to
    ``handle(tx, envelope)`` inside a commit, then sleeps until the next one (see
    :func:`~bide.engine.mailbox.mailbox_task`). ``handle`` may record state, reply with
    :func:`reply_in` (the receiver's task is the producer) or start work."""
    receiver = Receiver(name)
    kind = mailbox_task(f"bide.receiver.{name}", receiver.mailbox, handle)
    return Receiver(name, kind)
