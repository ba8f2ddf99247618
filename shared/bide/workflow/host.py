"""Host-side entry points on an attached (or open) :class:`~bide.Harness`: complete a
sign-in, deliver a webhook request in-process, and the session's workflow view.

Answering a question (:func:`~bide.workflow.answer_in`), cancelling a background task and
ending a session (:func:`~bide.workflow.cancel_background_in`,
:func:`~bide.workflow.end_session_in`) live beside what they change. The service functions
that attach a harness for a request and wake the session's queue are in
:mod:`bide.service.workflow`.
"""

from __future__ import annotations

from typing import Any

from ..engine.harness import Draft, Harness
from ..engine.signals import SignalResult
from ..tools.redaction import register as register_secret
from ..tools.webhook_keys import keys_of
from ..tools.webhooks import WebhookRejected, resolve
from .auth import providers_of, resolved
from .history import WEBHOOK
from .index import background_tasks
from .nondeterminism import NONDETERMINISM_PREFIX
from .requests import auth_key, complete_in, pending_asks, pending_authorizations


async def complete_authorization_in(harness: Harness, request_id: str, token: str) -> SignalResult:
    """The sign-in callback: store ``token`` in the provider port (never in the session) and
    resume the run, whose interrupted step is retried."""
    body = harness.get_doc(auth_key(request_id))
    if body is None:
        return SignalResult.NOT_FOUND
    if body["status"] != "open":
        return SignalResult.DUPLICATE if body["status"] == "completed" else SignalResult.CLOSED
    register_secret(token)  # this process holds it now: scrub it from what it records
    port = providers_of(harness.services)
    await resolved(port.store_token(harness.session_id, body["provider"], token))
    return complete_in(harness, request_id)


#: The lists of the workflow view, in the order the view shows them.
VIEW_LISTS: tuple[str, ...] = ("asks", "authorizations", "tasks", "nondeterminism")


def view_lists(harness: Harness) -> dict[str, list[tuple[list[Any], dict[str, Any]]]]:
    """Each list of :func:`view_in` as ``([time, id], item)`` pairs in that order (oldest
    first): the position is what a page cursor holds (:mod:`bide.service.workflow`). An item
    added later never sorts before one already there (its time is later), so a cursor kept
    after the last item reads only what was added since."""
    asks = pending_asks(harness)
    auths = pending_authorizations(harness)
    tasks = background_tasks(harness)
    found = [d.body for d in harness.list_docs(NONDETERMINISM_PREFIX)]
    failed = sorted(found, key=lambda d: (d.get("detected_at", 0.0), d["task_id"]))
    return {
        "asks": [([a.created_at, a.id], a.model_dump(mode="json")) for a in asks],
        "authorizations": [([a.created_at, a.id], a.model_dump(mode="json")) for a in auths],
        "tasks": [([t.created_at, t.id], t.model_dump(mode="json")) for t in tasks],
        "nondeterminism": [([d.get("detected_at", 0.0), d["task_id"]], d) for d in failed],
    }


def view_in(harness: Harness) -> dict[str, Any]:
    """What a UI shows beside the transcript: open questions, open sign-ins, the task index,
    and every run that failed because its body no longer replays its history (oldest
    first: fix or roll back the deploy that changed the body). Whole lists, for in-process
    hosts; the HTTP route serves them by page (:mod:`bide.service.workflow`)."""
    return {name: [item for _, item in pairs] for name, pairs in view_lists(harness).items()}


def post_webhook(harness: Harness, url: str, body: Any) -> SignalResult:
    """Deliver one request to a workflow webhook through an attached harness (tests,
    examples and in-process hosts; the HTTP route does the same through
    :func:`bide.service.signals.deliver_webhook`). Raises
    :class:`~bide.tools.webhooks.WebhookRejected` for an unknown URL."""
    token = url.rstrip("/").rsplit("/", 1)[-1]

    def find(session_id: str, key: str) -> Any:
        return harness.get_doc(key) if session_id == harness.session_id else None

    binding = resolve(token, find, keys_of(harness.services))
    if binding.signal != WEBHOOK.name:
        raise WebhookRejected(404, "not a workflow webhook")

    def deliver(d: Draft) -> SignalResult:
        # The binding's key is a stream (wf.<seq>.*): the rule picks the member, as it does
        # for every other delivery path.
        now = harness.clock.now()
        return d.signal(binding.task_id, WEBHOOK, binding.key, body, now).result

    return harness._apply(deliver)
