"""How an HTTP request delivers a failure instead of a value (issue 13).

Two forms, on the signal route and on capability webhooks alike:

* the route form: the same path with ``/failure`` appended; the JSON body *is* the failure,
  ``{"type": ..., "message": ..., "data": ...}`` (``data`` optional);
* the body form: the normal route with the envelope ``{"$failure": {...}}`` as the body. The
  ``$failure`` key is reserved: a body holding it besides other keys is refused (400), so a
  value can never be taken for a failure by accident.

A malformed failure is refused with 400 naming the field and why; nothing is stored. A
webhook's signature covers the body as sent, so a failure is verified exactly like a value.
"""

from __future__ import annotations

from typing import Any

from ..engine.failures import MalformedFailure, SignalFailure, parse_failure
from ..tools.webhooks import WebhookRejected

ENVELOPE = "$failure"
"""The reserved key of the body form."""


def delivery_of(body: Any, *, failure_route: bool) -> Any:
    """What a parsed JSON body delivers: the value itself, or a :class:`SignalFailure` (the
    route form, or the ``$failure`` envelope). Raises :class:`WebhookRejected` (400) for a
    malformed failure or an envelope with other keys beside it."""
    if failure_route:
        return _failure(body, "body")
    if isinstance(body, dict) and ENVELOPE in body:
        if len(body) != 1:
            others = sorted(k for k in body if k != ENVELOPE)
            raise WebhookRejected(
                400,
                f"{ENVELOPE!r} is reserved for a failure and must be the body's only key "
                f"(found also {others[:3]}); nothing was stored",
            )
        return _failure(body[ENVELOPE], ENVELOPE)
    return body


def _failure(raw: Any, where: str) -> SignalFailure:
    try:
        return parse_failure(raw)
    except MalformedFailure as exc:
        raise WebhookRejected(400, f"{where}: {exc}") from None
