"""A session's live webhook URLs, read back from the memos of its live tasks.

Minting keeps the webhook's secret in the minting task's memos, so the URL can be rebuilt
without storing it anywhere else:

* a tool's :func:`~bide.tools.webhooks.mint_webhook` memoizes it as
  ``bide.webhook.<signal>/<key>`` (one value goes to that key);
* a workflow's ``await ctx.webhook()`` records it in its operation memo ``wf.<n>``
  (``{"op": "webhook", "secret": ...}``) and binds the URL once the operation resolved
  (``wf.<n>.r``); request ``i`` goes to key ``wf.<n>.<i>`` of the workflow webhook signal.

Memos end with their task, so every URL listed here is one a live task still listens on. The
URL is built with the server's webhook base URL of now (the one that reaches it today), from
the same token the task handed out. Only webhooks whose binding document exists are listed:
that is what the webhook route checks.
"""

from __future__ import annotations

from typing import Any

from ..engine.delivery import STREAM_SUFFIX
from ..engine.harness import Harness
from ..engine.records import TaskRecord
from ..engine.signals import slot_name
from ..tools.webhooks import WEBHOOK_MEMO_PREFIX, WebhookBinding, binding_key, make_token
from ..workflow.history import WEBHOOK, result_memo

_WORKFLOW_OP = "wf."


def _tool_name(record: TaskRecord) -> str | None:
    # A tool call's input names its tool; a background workflow task's names it as "tool".
    data = record.input if isinstance(record.input, dict) else {}
    name = data.get("name") if record.kind == "bide.tool" else data.get("tool")
    return name if isinstance(name, str) else None


def _received(record: TaskRecord, signal: str, key: str) -> int:
    """How many values arrived on ``key`` (``<prefix>.*``: on every key of the stream)."""
    if key.endswith(STREAM_SUFFIX):
        stream = slot_name(signal, key[: -len(STREAM_SUFFIX)] + ".")
        return sum(
            1 for name, s in record.signals.items() if name.startswith(stream) and s.has_value
        )
    slot = record.signals.get(slot_name(signal, key))
    return int(slot is not None and slot.has_value)


def _minted(record: TaskRecord) -> list[tuple[str, str | None]]:
    """``(secret, workflow operation name or None)`` of every webhook the task minted."""
    found: list[tuple[str, str | None]] = []
    for name, value in sorted(record.memos.items()):
        if name.startswith(WEBHOOK_MEMO_PREFIX) and isinstance(value, str):
            found.append((value, None))
        elif (
            name.startswith(_WORKFLOW_OP)
            and name[len(_WORKFLOW_OP) :].isdigit()
            and isinstance(value, dict)
            and value.get("op") == "webhook"
            and isinstance(value.get("secret"), str)
            and result_memo(int(name[len(_WORKFLOW_OP) :])) in record.memos
        ):
            found.append((value["secret"], str(value.get("name") or "webhook")))
    return found


def live_webhooks(harness: Harness, base_url: str) -> list[dict[str, Any]]:
    """Every webhook URL a live task of the attached ``harness``'s session listens on, in
    task creation order: ``url``, ``task_id``, ``tool`` (the tool whose call minted it, when
    known), ``signal`` and ``key`` it delivers to, ``source`` (``tool`` or ``workflow``),
    ``name`` (a workflow webhook's operation name), ``signed`` (requests need an HMAC
    signature) and ``received`` (requests taken so far)."""
    base = base_url.rstrip("/")
    hooks: list[dict[str, Any]] = []
    for record in sorted(harness.live_tasks.values(), key=lambda r: (r.created_at, r.id)):
        for secret, op_name in _minted(record):
            found = harness.get_doc(binding_key(secret))
            if found is None:
                continue
            binding = WebhookBinding.model_validate(found)
            if binding.task_id != record.id:
                continue
            token = make_token(harness.session_id, secret)
            hooks.append(
                {
                    "url": f"{base}/hooks/{token}",
                    "task_id": record.id,
                    "tool": _tool_name(record),
                    "signal": binding.signal,
                    "key": binding.key,
                    "source": "workflow" if binding.signal == WEBHOOK.name else "tool",
                    "name": op_name,
                    "signed": binding.hmac_secret is not None,
                    "received": _received(record, binding.signal, binding.key),
                }
            )
    return hooks
