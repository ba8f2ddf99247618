"""Signal delivery for hosts: by task id (an authenticated API) or by capability webhook."""

from __future__ import annotations

import json
from typing import Any

from ..constants import MAX_WEBHOOK_BODY_BYTES
from ..engine.delivery import AtHead, deliver_signal
from ..engine.errors import DefinitionError
from ..engine.limits import ValueRefused
from ..engine.rules import SignalDecision
from ..engine.signals import SignalResult
from ..tools.webhooks import WebhookBinding, WebhookRejected, verify
from .deps import Deps
from .failure_body import delivery_of
from .json_body import JsonRefused, strict_json
from .webhook_read import read_webhook

# What each result means to an HTTP caller.
STATUS_OF: dict[SignalResult, int] = {
    SignalResult.DELIVERED: 202,
    SignalResult.DUPLICATE: 200,
    SignalResult.INVALID: 422,
    SignalResult.CLOSED: 410,
    SignalResult.NOT_FOUND: 404,
}


def deliver(
    deps: Deps,
    session_id: str,
    task_id: str,
    signal: str,
    key: str,
    value: Any,
    *,
    at_head: AtHead | None = None,
) -> SignalDecision:
    """Store the value, then queue one wake (docs/reliability.md, "One wake per signal").
    A :class:`~bide.engine.failures.SignalFailure` as ``value`` is stored and woken for
    exactly like a value: one conditional write, one wake.
    Raises :class:`DefinitionError` when the app has no signal by that name, and
    :class:`WebhookRejected` (400 too deep or not JSON, 413 too large or over the task's
    budget) for a value the limits of :mod:`bide.engine.limits` refuse; nothing is stored.

    The wake is queued only once the value is stored, so the worker it reaches always finds
    the value. A ``duplicate`` wakes the session too: a sender retries when it got no 2xx, and
    the attempt it retries may have died between storing the value and queueing its wake.
    ``at_head``: the head and the task already read (see
    :func:`~bide.engine.delivery.deliver_signal`)."""
    token = deps.app.signal_token(signal)
    try:
        decision = deliver_signal(
            deps.store, session_id, task_id, token, key, value, deps.clock, at_head=at_head
        )
    except ValueRefused as exc:
        raise WebhookRejected(exc.status, str(exc)) from None
    if decision.result in _STORED:
        # The wake names the task: only it can have become runnable by this value, so the
        # worker may run it alone (bide.service.worker, "targeted pass"). Its owner, known
        # from the record just written, lets that run check the owner in the same read.
        # Its sealed page count too (when it has pages: a long workflow body), so that read
        # also fetches the pages the worker's cache lacks (bide.engine.partial).
        record = decision.record
        owner = record.owner if record is not None else None
        pages = (record.memo_pages, record.created_at) if record and record.memo_pages else None
        deps.queue.wake(
            session_id, _WAKE_REASON[decision.result], task=task_id, owner=owner, pages=pages
        )
    return decision


# Results after which a value is stored for the task (by this request or an earlier attempt),
# and the reason each one's wake carries.
_WAKE_REASON: dict[SignalResult, str] = {
    SignalResult.DELIVERED: "signal",
    SignalResult.DUPLICATE: "signal-retried",
}
_STORED = frozenset(_WAKE_REASON)


def parse_json_body(body: bytes, content_type: str | None) -> Any:
    """A JSON body, or a :class:`WebhookRejected` saying why not (nothing is stored)."""
    if len(body) > MAX_WEBHOOK_BODY_BYTES:
        raise WebhookRejected(
            413, f"body is {len(body)} bytes; the limit is {MAX_WEBHOOK_BODY_BYTES}"
        )
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise WebhookRejected(
            415, f"content type must be application/json, not {media or 'none'!r}"
        )
    try:
        return strict_json(body.decode("utf-8"))
    except JsonRefused as exc:
        raise WebhookRejected(400, f"body refused: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WebhookRejected(400, f"body is not valid JSON: {exc}") from None


def deliver_webhook(
    deps: Deps, token: str, headers: dict[str, str], body: bytes, *, failure: bool = False
) -> tuple[SignalDecision, WebhookBinding]:
    """Check a webhook request and deliver its body. Raises :class:`WebhookRejected` for an
    unknown token, a bad signature, an oversized, mistyped or malformed body. ``failure``:
    the body is a failure (the ``/failure`` route); either way a ``$failure`` envelope is
    one (:mod:`bide.service.failure_body`). A four-part token's binding, head and task are one
    read (:func:`~bide.service.webhook_read.read_webhook`), which the delivery decides on."""
    binding, at_head = read_webhook(deps, token)  # one read for a four-part token
    session_id = binding.session_id
    lowered = {k.lower(): v for k, v in headers.items()}
    if len(body) > MAX_WEBHOOK_BODY_BYTES:  # before any work on it
        raise WebhookRejected(
            413, f"body is {len(body)} bytes; the limit is {MAX_WEBHOOK_BODY_BYTES}"
        )
    verify(binding, lowered, body, deps.clock.now())
    value = delivery_of(parse_json_body(body, lowered.get("content-type")), failure_route=failure)
    try:
        decision = deliver(
            deps, session_id, binding.task_id, binding.signal, binding.key, value, at_head=at_head
        )
    except DefinitionError:
        raise WebhookRejected(404, f"signal {binding.signal!r} is not deliverable here") from None
    return decision, binding
