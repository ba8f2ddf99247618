"""Heartbeats for hosts: a beat by task id (an authenticated API) or by capability webhook.

A beat (:mod:`bide.engine.heartbeats`) is one conditional write of the task and nothing else:
unlike a signal value it queues no wake, so no worker runs for it. The session's alarm stays
armed at the earlier deadline; when it fires, the worker finds nothing due (the beat moved
``beat_by``) and arms again at the new deadline: one spare wake per alarm a beat overtakes
(docs/architecture.md, "Wake path on AWS"). A missed beat is then noticed by that alarm
exactly as a passed ``until`` is.

The body of a beat is ignored (an empty one is fine) but, on a webhook that asks for
signatures, it is what the signature covers, exactly as for a value: an unsigned beat to a
signed webhook is refused (401).
"""

from __future__ import annotations

from ..constants import MAX_WEBHOOK_BODY_BYTES
from ..engine.delivery import AtHead, deliver_beat
from ..engine.errors import DefinitionError
from ..engine.rules import SignalDecision
from ..tools.webhooks import WebhookBinding, WebhookRejected, verify
from .deps import Deps
from .webhook_read import read_webhook


def beat(
    deps: Deps,
    session_id: str,
    task_id: str,
    signal: str,
    key: str,
    *,
    at_head: AtHead | None = None,
) -> SignalDecision:
    """Deliver one beat: at most one conditional write, no wake. Raises
    :class:`DefinitionError` when the app has no signal by that name (nothing written).
    ``at_head``: the head and the task already read (see
    :func:`~bide.engine.delivery.deliver_beat`)."""
    deps.app.signal_token(signal)
    return deliver_beat(deps.store, session_id, task_id, signal, key, deps.clock, at_head=at_head)


def beat_webhook(
    deps: Deps, token: str, headers: dict[str, str], body: bytes
) -> tuple[SignalDecision, WebhookBinding]:
    """Check a webhook beat (token, size, signature when the binding asks for one) and deliver
    it. Raises :class:`WebhookRejected` as a value's request would be refused."""
    binding, at_head = read_webhook(deps, token)  # one read for a four-part token
    if len(body) > MAX_WEBHOOK_BODY_BYTES:
        raise WebhookRejected(
            413, f"body is {len(body)} bytes; the limit is {MAX_WEBHOOK_BODY_BYTES}"
        )
    verify(binding, {k.lower(): v for k, v in headers.items()}, body, deps.clock.now())
    try:
        decision = beat(
            deps, binding.session_id, binding.task_id, binding.signal, binding.key, at_head=at_head
        )
    except DefinitionError:
        raise WebhookRejected(404, f"signal {binding.signal!r} is not deliverable here") from None
    return decision, binding
