"""Capability webhooks: an unguessable URL bound to (session, task, signal, key).

The capability itself, not its transport: tokens, binding documents, signatures, and
:func:`mint_webhook` for a tool. A tool mints one here, a workflow body through
``ctx.webhook()`` (:mod:`bide.workflow`), and every host that delivers a request (the signal
function, the local stack, :func:`bide.workflow.post_webhook`) checks it with the same code.

A token is ``<session id, base64url>.<secret>`` with a secret of 192 random bits; the
session's binding document is keyed by the secret's SHA-256, so the binding never holds the
secret. (The minting call memoizes the secret, so a rerun hands out the same URL; memos end
with the call.) A binding may require an
HMAC-SHA256 signature over ``"<timestamp>.<body>"`` with a timestamp window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..constants import WEBHOOK_SIGNATURE_WINDOW_SECONDS, WEBHOOK_TOKEN_BYTES
from ..engine.signals import SignalToken

if TYPE_CHECKING:
    from .api import ToolExecutionApi


WEBHOOK_MEMO_PREFIX = "bide.webhook."
"""A tool's minted secret is memoized as ``bide.webhook.<signal>/<key>`` (the sessions API
lists live webhooks from these memos: :mod:`bide.service.hooks`)."""


class WebhookBinding(BaseModel):
    """Where a webhook's body goes, and how its sender proves itself."""

    session_id: str
    task_id: str
    signal: str
    key: str
    hmac_secret: str | None = None
    window_seconds: int = WEBHOOK_SIGNATURE_WINDOW_SECONDS


class Webhook(BaseModel):
    """A minted webhook: the URL to hand out and its token."""

    url: str
    token: str


class WebhookRejected(Exception):
    """A webhook request refused: ``status`` and a message saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def binding_key(secret: str) -> str:
    """The document key of a binding: the secret itself is never stored."""
    return "hook/" + hashlib.sha256(secret.encode()).hexdigest()


def make_token(session_id: str, secret: str) -> str:
    """``<session>.<secret>`` with the session id base64url-encoded (no padding)."""
    encoded = base64.urlsafe_b64encode(session_id.encode()).decode().rstrip("=")
    return f"{encoded}.{secret}"


def parse_token(token: str) -> tuple[str, str]:
    """The session id and secret in a token; raises :class:`WebhookRejected` (404)."""
    encoded, dot, secret = token.partition(".")
    if not dot or not encoded or len(secret) < 32:
        raise WebhookRejected(404, "unknown webhook")
    try:
        session_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise WebhookRejected(404, "unknown webhook") from None
    return session_id, secret


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature a sender puts in ``X-Bide-Signature``: ``sha256=<hex>``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


_MAX_TIMESTAMP_DIGITS = 12  # whole seconds until the year 33658: plenty, and no huge ints


def verify(binding: WebhookBinding, headers: dict[str, str], body: bytes, now: float) -> None:
    """Check the signature and timestamp window when the binding asks for them."""
    if binding.hmac_secret is None:
        return
    timestamp = headers.get("x-bide-timestamp")
    signature = headers.get("x-bide-signature")
    if not timestamp or not signature:
        raise WebhookRejected(401, "missing X-Bide-Timestamp or X-Bide-Signature header")
    # Whole Unix seconds in plain ASCII digits only: float() would also take "nan" (which no
    # window comparison refuses), "inf", "1e9" and surrounding blanks.
    if not (
        timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS
    ):
        raise WebhookRejected(
            401, "X-Bide-Timestamp must be whole Unix seconds (ASCII digits, at most 12)"
        )
    sent = int(timestamp)
    if abs(now - sent) > binding.window_seconds:
        raise WebhookRejected(
            401, f"X-Bide-Timestamp is outside the {binding.window_seconds}s window (replay?)"
        )
    if not hmac.compare_digest(sign(binding.hmac_secret, timestamp, body), signature):
        raise WebhookRejected(401, "signature does not match")


async def mint_webhook(
    api: ToolExecutionApi, token: SignalToken[Any], key: str, *, hmac_secret: str | None = None
) -> Webhook:
    """For a tool (``api`` is its :class:`~bide.tools.ToolExecutionApi`): a webhook that
    delivers its JSON body as ``token``'s signal under ``key`` to this call. A rerun gets the
    same URL (memoized). Uses only the public API of ``api``: its session and task ids, a
    memo, a write and the host's ``webhook_base_url`` service."""
    secret = await api.memo(
        f"{WEBHOOK_MEMO_PREFIX}{token.name}/{key}", secrets.token_hex(WEBHOOK_TOKEN_BYTES)
    )
    binding = WebhookBinding(
        session_id=api.session_id,
        task_id=api.task_id,
        signal=token.name,
        key=key,
        hmac_secret=hmac_secret,
    )
    await api.write(lambda tx: tx.put_doc(binding_key(secret), binding.model_dump(mode="json")))
    base = str(api.services.get("webhook_base_url", "")).rstrip("/")
    hook_token = make_token(api.session_id, secret)
    return Webhook(url=f"{base}/hooks/{hook_token}", token=hook_token)
