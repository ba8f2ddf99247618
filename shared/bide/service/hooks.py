"""A session's live webhook URLs, read back from the memos of its live tasks.

Minting keeps the webhook's nonce (not a secret) in the minting task's memos; the token is
derived from the binding under the deployment's key (:mod:`bide.tools.webhook_keys`), so it
is stored nowhere and rebuilt here:

* a tool's :func:`~bide.tools.webhooks.mint_webhook` memoizes the nonce as
  ``bide.webhook.<signal>/<key>`` (one value goes to that key);
* a workflow's ``await ctx.webhook()`` records it in its operation memo ``wf.<n>``
  (``{"op": "webhook", "nonce": ...}``) and binds the URL once the operation resolved
  (``wf.<n>.r``); request ``i`` goes to key ``wf.<n>.<i>`` of the workflow webhook signal.

Memos end with their task, so every URL listed here is one a live task still listens on. The
URL is built with the server's webhook base URL of now (the one that reaches it today) and
the current key (after a key rotation, the new token of the same webhook). Only webhooks
whose binding document exists are listed: that is what the webhook route checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..engine import memo_pages, slots
from ..engine.delivery import STREAM_SUFFIX
from ..engine.harness import Harness
from ..engine.records import TaskRecord
from ..engine.signals import slot_name
from ..tools.webhook_keys import WebhookKeys
from ..tools.webhooks import WEBHOOK_MEMO_PREFIX, WebhookBinding, binding_key, token_of
from ..workflow.history import WEBHOOK, result_memo

_WORKFLOW_OP = "wf."


def _tool_name(record: TaskRecord) -> str | None:
    # A tool call's input names its tool; a background workflow task's names it as "tool".
    data = record.input if isinstance(record.input, dict) else {}
    name = data.get("name") if record.kind == "bide.tool" else data.get("tool")
    return name if isinstance(name, str) else None


def _received(harness: Harness, record: TaskRecord, signal: str, key: str) -> int:
    """How many values arrived on ``key`` (``<prefix>.*``: on every key of the stream),
    counting the consumed ones whose slots moved to documents (:mod:`bide.engine.slots`)."""
    if key.endswith(STREAM_SUFFIX):
        stream = slot_name(signal, key[: -len(STREAM_SUFFIX)] + ".")
        docs = harness.list_docs(slots.task_prefix(record.id) + stream)
        every = slots.task_slots(record, docs)
        return sum(1 for name, s in every.items() if name.startswith(stream) and s.has_value)
    name = slot_name(signal, key)
    slot = record.signals.get(name) or slots.lookup(harness.get_doc, record.id)(name)
    return int(slot is not None and slot.has_value)


def _minted(harness: Harness, record: TaskRecord) -> list[tuple[str, str, str | None]]:
    """``(memo name, nonce, workflow operation name or None)`` of every webhook the task
    minted, in memo name order (sealed memos too: :mod:`bide.engine.memo_pages`)."""
    found: list[tuple[str, str, str | None]] = []
    # Through the process's cache of sealed pages, as a replay reads them (read-only use).
    every = memo_pages.SealedCache(
        harness.get_doc, memo_pages.page_scope(harness), list_docs=harness.list_docs
    ).every(record)
    for name, value in sorted(every.items()):
        if name.startswith(WEBHOOK_MEMO_PREFIX) and isinstance(value, str):
            found.append((name, value, None))
        elif (
            name.startswith(_WORKFLOW_OP)
            and name[len(_WORKFLOW_OP) :].isdigit()
            and isinstance(value, dict)
            and value.get("op") == "webhook"
            and isinstance(value.get("nonce"), str)
            and result_memo(int(name[len(_WORKFLOW_OP) :])) in every
        ):
            found.append((name, value["nonce"], str(value.get("name") or "webhook")))
    return found


#: A webhook's place in the listing: its task's creation time and id, and the memo naming it.
Position = tuple[float, str, str]


def live_webhooks(harness: Harness, base_url: str, keys: WebhookKeys) -> list[dict[str, Any]]:
    """Every webhook URL a live task of the attached ``harness``'s session listens on, in
    task creation order (:func:`webhooks_after`, from the start)."""
    return [hook for _, hook in webhooks_after(harness, base_url, keys)]


def webhooks_after(
    harness: Harness, base_url: str, keys: WebhookKeys, after: Position | None = None
) -> Iterator[tuple[Position, dict[str, Any]]]:
    """``(position, webhook)`` for each webhook URL a live task of the attached ``harness``'s
    session listens on, after ``after``, in task creation order then memo name order, read
    lazily (one binding read each), so a page stops reading when it is full. A webhook is
    ``url``, ``task_id``, ``tool`` (the tool whose call minted it, when known), ``signal``
    and ``key`` it delivers to, ``source`` (``tool`` or ``workflow``), ``name`` (a workflow
    webhook's operation name), ``signed`` (requests need an HMAC signature) and ``received``
    (requests taken so far). Tokens are derived under ``keys``' current key."""
    base = base_url.rstrip("/")
    for record in sorted(harness.live_tasks.values(), key=lambda r: (r.created_at, r.id)):
        if after is not None and (record.created_at, record.id) < after[:2]:
            continue
        for memo, nonce, op_name in _minted(harness, record):
            position = (record.created_at, record.id, memo)
            if after is not None and position <= after:
                continue
            found = harness.get_doc(binding_key(nonce))
            if found is None:
                continue
            binding = WebhookBinding.from_doc(found)
            if binding.task_id != record.id or binding.nonce != nonce:
                continue
            token = token_of(binding, keys)
            yield (
                position,
                {
                    "url": f"{base}/hooks/{token}",
                    "task_id": record.id,
                    "tool": _tool_name(record),
                    "signal": binding.signal,
                    "key": binding.key,
                    "source": "workflow" if binding.signal == WEBHOOK.name else "tool",
                    "name": op_name,
                    "signed": binding.hmac_secret is not None,
                    "received": _received(harness, record, binding.signal, binding.key),
                },
            )
