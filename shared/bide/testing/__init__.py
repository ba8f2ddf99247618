"""Tools for testing durability claims: a store that crashes the process at a chosen write.

:class:`FaultyStore` wraps any :class:`~bide.engine.store.Store` and raises :class:`Crash` at the
N-th commit, either before the write reaches the store or right after it did. ``Crash`` is a
``BaseException`` so no ``except Exception`` in engine or user code can swallow it: like a
real process death, it unwinds everything.

:func:`deliver_webhook` posts a body to a capability webhook URL a tool minted, in-process,
with the checks of the deployed webhook route, so a test drives a parked tool the way its
caller will: a value, a failure (``url + "/failure"`` or the ``$failure`` envelope) or a
heartbeat (``url + "/heartbeat"``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..app import App
from ..engine.errors import DefinitionError
from ..engine.failures import SignalFailure
from ..engine.harness import Harness
from ..engine.records import TaskRecord
from ..engine.rules import SignalDecision
from ..engine.store.base import Doc, Store
from ..engine.store.wrapper import StoreWrapper
from ..service.failure_body import ENVELOPE, delivery_of
from ..tools.webhook_keys import keys_of
from ..tools.webhooks import WebhookRejected, resolve, verify

#: The webhook's routes beside the value route: ``{url}/failure`` and ``{url}/heartbeat``.
_FAILURE, _HEARTBEAT = "failure", "heartbeat"


async def deliver_webhook(
    harness: Harness,
    app: App,
    url: str,
    body: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> SignalDecision:
    """POST ``body`` (any JSON value) to ``url``, a webhook minted in ``harness``'s session,
    as the webhook route would: the URL's token must be bound, a signed binding needs
    ``headers`` (``X-Bide-Timestamp``, ``X-Bide-Signature`` over ``json.dumps(body)``), and
    the signal must be one of ``app``'s (the token is checked under the harness's
    ``webhook_keys`` service, or this process's key when it has none). Raises
    :class:`~bide.tools.webhooks.WebhookRejected` (with the route's status) otherwise; the
    decision says ``delivered``, ``duplicate``, ``invalid`` (and which fields failed) or
    ``closed``. Run the harness afterwards to resume the task.

    The routes of the deployed webhook: ``url`` itself takes a value, or a failure in the
    ``{"$failure": {...}}`` envelope; ``url + "/failure"`` takes the failure as the body; a
    malformed failure is refused 400 (nothing stored). A :class:`SignalFailure` as ``body`` is
    sent as its JSON (on ``url``: in the envelope), and that JSON is what a signature covers.
    ``url + "/heartbeat"`` is a beat: the body is ignored but signed (no body: the signature
    covers the empty body); the decision's result is the beat's."""
    route, path = _route_of(url)

    def find(session_id: str, key: str) -> Any:
        return harness.get_doc(key) if session_id == harness.session_id else None

    try:
        binding = resolve(path.rsplit("/", 1)[-1], find, keys_of(harness.services))
    except WebhookRejected:
        raise WebhookRejected(
            404, f"unknown webhook in session {harness.session_id!r}: {url}"
        ) from None
    if isinstance(body, SignalFailure):
        body = body.to_json() if route == _FAILURE else {ENVELOPE: body.to_json()}
    raw = b"" if route == _HEARTBEAT and body is None else json.dumps(body).encode()
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    verify(binding, lowered, raw, harness.clock.now())
    try:
        token = app.signal_token(binding.signal)
    except DefinitionError:
        raise WebhookRejected(
            404, f"signal {binding.signal!r} is not deliverable here: list it in App(signals=...)"
        ) from None
    if route == _HEARTBEAT:
        return SignalDecision(await harness.beat(binding.task_id, token, binding.key))
    delivered = delivery_of(body, failure_route=route == _FAILURE)  # WebhookRejected: 400
    return await harness.deliver(binding.task_id, token, binding.key, delivered)


def _route_of(url: str) -> tuple[str, str]:
    # ("value" | "failure" | "heartbeat", the URL without the route's suffix)
    path = url.rstrip("/")
    head, _, last = path.rpartition("/")
    return (last, head) if last in (_FAILURE, _HEARTBEAT) else ("value", path)


class Crash(BaseException):
    """The simulated process died here."""


class FaultyStore(StoreWrapper):
    """A Store that dies at the ``fail_at``-th commit (1-based), or at the first commit whose
    writes satisfy ``match``; ``when`` = ``before`` (nothing written) or ``after`` (written,
    then the process dies before it learns so). ``commits`` counts the commits attempted.
    Every other call passes straight through to ``inner``."""

    def __init__(
        self,
        inner: Store,
        fail_at: int | None = None,
        when: Literal["before", "after"] = "before",
        match: Callable[[Sequence[TaskRecord]], bool] | None = None,
    ) -> None:
        super().__init__(inner)
        self.fail_at = fail_at
        self.match = match
        self.when = when
        self.commits = 0
        self.crashed = False

    def disarm(self) -> None:
        """No more faults (the restarted process)."""
        self.fail_at = None
        self.match = None

    def commit(
        self,
        session_id: str,
        expected_seq: int,
        writes: Sequence[TaskRecord],
        docs: Sequence[Doc] = (),
        *,
        absent: Sequence[str] = (),
    ) -> int:
        """Pass through, or crash at the chosen commit."""
        self.commits += 1
        hit = (self.fail_at is not None and self.commits == self.fail_at) or (
            self.match is not None and self.match(writes)
        )
        if hit:
            self.disarm()  # one death per arming
        if hit and self.when == "before":
            self.crashed = True
            raise Crash(f"crash before commit {self.commits}")
        seq = self.inner.commit(session_id, expected_seq, writes, docs, absent=absent)
        if hit:
            self.crashed = True
            raise Crash(f"crash after commit {self.commits}")
        return seq
