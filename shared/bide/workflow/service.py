"""Host-side entry points: answer a question, complete a sign-in, cancel a background task,
end a session, deliver a webhook request in-process, and the session's workflow view.

Each ``*_in`` function works on an attached (or open) :class:`~bide.Harness`; the service
functions (taking :class:`~bide.service.deps.Deps`) attach one, wake the session's queue
before they write (arm before signal: a crash in between never strands the session) and
again after a delivery landed (no lost wakeup: a worker may have parked in between).

HTTP routes they are meant for (wired by ``bide.service.http``):

* ``POST /sessions/{id}/asks/{ask_id}/answer`` ``{option_id?, text?}`` -> :func:`answer`
* ``POST /sessions/{id}/authorizations/{request_id}/complete`` ``{token}`` (the provider's
  OAuth callback, after exchanging its code) -> :func:`complete_authorization`
* ``POST /sessions/{id}/tasks/{task_id}/cancel`` -> :func:`cancel_background`
* ``POST /sessions/{id}/end`` -> :func:`end_session`
* ``GET /sessions/{id}/workflow`` -> :func:`view` (questions, sign-ins, the task index)
* webhook requests keep using ``POST /hooks/{token}`` (stream keys: :mod:`bide.engine.delivery`)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.delivery import stream_key
from ..engine.harness import Draft, Harness
from ..engine.rules import decide_signal
from ..engine.signals import SignalResult
from ..service.webhooks import WebhookBinding, WebhookRejected, binding_key, parse_token
from .auth import providers_of, resolved
from .background import background_tasks, cancel_background_in, end_session_in
from .history import WEBHOOK
from .requests import answer_in, auth_key, complete_in, pending_asks, pending_authorizations

if TYPE_CHECKING:
    from ..service.deps import Deps


async def _attach(deps: Deps, session_id: str) -> Harness:
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        services=deps.harness_services(),
    )
    await harness.attach()
    return harness


def _woken(deps: Deps, session_id: str, result: SignalResult, why: str) -> SignalResult:
    if result is SignalResult.DELIVERED:
        deps.queue.wake(session_id, why)
    return result


async def answer(
    deps: Deps,
    session_id: str,
    ask_id: str,
    option_id: str | None = None,
    text: str | None = None,
) -> SignalResult:
    """Answer a question: ``delivered``, ``duplicate`` (answered before; the first answer
    stands), ``closed`` (its run ended), ``invalid`` or ``not_found``. Never steers."""
    deps.queue.wake(session_id, "answer")
    harness = await _attach(deps, session_id)
    result = answer_in(harness, ask_id, option_id=option_id, text=text)
    return _woken(deps, session_id, result, "answer-stored")


async def complete_authorization_in(harness: Harness, request_id: str, token: str) -> SignalResult:
    """The sign-in callback: store ``token`` in the provider port (never in the session) and
    resume the run, whose interrupted step is retried."""
    body = harness.get_doc(auth_key(request_id))
    if body is None:
        return SignalResult.NOT_FOUND
    if body["status"] != "open":
        return SignalResult.DUPLICATE if body["status"] == "completed" else SignalResult.CLOSED
    port = providers_of(harness.services)
    await resolved(port.store_token(harness.session_id, body["provider"], token))
    return complete_in(harness, request_id)


async def complete_authorization(
    deps: Deps, session_id: str, request_id: str, token: str
) -> SignalResult:
    """:func:`complete_authorization_in` as a service (the port is ``Deps.services``)."""
    deps.queue.wake(session_id, "authorization")
    harness = await _attach(deps, session_id)
    result = await complete_authorization_in(harness, request_id, token)
    return _woken(deps, session_id, result, "authorization-stored")


async def cancel_background(deps: Deps, session_id: str, task_id: str) -> str:
    """Cancel a background task: ``cancelled``, ``ended`` or ``not_found``."""
    deps.queue.wake(session_id, "cancel-task")
    harness = await _attach(deps, session_id)
    result = await cancel_background_in(harness, task_id)
    if result == "cancelled":
        deps.queue.wake(session_id, "cancel-task-stored")
    return result


async def end_session(deps: Deps, session_id: str) -> list[str]:
    """End the session's background work: every working background task is cancelled and no
    new one starts. The ids cancelled."""
    deps.queue.wake(session_id, "end")
    harness = await _attach(deps, session_id)
    cancelled = await end_session_in(harness)
    deps.queue.wake(session_id, "end-stored")
    return cancelled


def view_in(harness: Harness) -> dict[str, Any]:
    """What a UI shows beside the transcript: open questions, open sign-ins, the task index."""
    return {
        "asks": [a.model_dump(mode="json") for a in pending_asks(harness)],
        "authorizations": [a.model_dump(mode="json") for a in pending_authorizations(harness)],
        "tasks": [t.model_dump(mode="json") for t in background_tasks(harness)],
    }


async def view(deps: Deps, session_id: str) -> dict[str, Any]:
    """:func:`view_in` as a service."""
    return view_in(await _attach(deps, session_id))


def post_webhook(harness: Harness, url: str, body: Any) -> SignalResult:
    """Deliver one request to a workflow webhook through an attached harness (tests,
    examples and in-process hosts; the HTTP route does the same through
    :func:`bide.service.signals.deliver_webhook`). Raises
    :class:`~bide.service.webhooks.WebhookRejected` for an unknown URL."""
    token = url.rstrip("/").rsplit("/", 1)[-1]
    session_id, secret = parse_token(token)
    if session_id != harness.session_id:
        raise WebhookRejected(404, "unknown webhook")
    found = harness.get_doc(binding_key(secret))
    if found is None:
        raise WebhookRejected(404, "unknown webhook")
    binding = WebhookBinding.model_validate(found)
    if binding.signal != WEBHOOK.name:
        raise WebhookRejected(404, "not a workflow webhook")

    def deliver(d: Draft) -> SignalResult:
        record = d.find(binding.task_id)
        now = harness.clock.now()
        key = stream_key(record, WEBHOOK.name, binding.key, now)
        decision = decide_signal(record, WEBHOOK, key, body, now)
        if decision.record is not None:
            d.put(decision.record)
        return decision.result

    return harness._apply(deliver)
