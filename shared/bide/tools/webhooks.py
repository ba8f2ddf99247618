"""Capability webhooks: an unguessable URL bound to (session, task, signal, key).

The capability itself, not its transport: tokens, binding documents, signatures, and
:func:`mint_webhook` for a tool. A tool mints one here, a workflow body through
``ctx.webhook()`` (:mod:`bide.workflow`), and every host that delivers a request (the signal
function, the local stack, :func:`bide.workflow.post_webhook`) checks it with the same code.

A token is ``<session id, base64url>.<task id, base64url>.<nonce>.<mac>``. The nonce (128 random
bits, memoized by the minting call so a rerun hands out the same URL) names the session's
binding document ``hook/<nonce>``; the task id lets the webhook route read that binding, the
session's head and the task in one consistent read (the binding's task must be the token's);
the mac is :func:`derive_mac`, an HMAC-SHA256 under the deployment's key
(:mod:`bide.tools.webhook_keys`) of everything the binding says: session, task, signal, key
and nonce, truncated to 192 bits. Nothing the store holds is a token: the mac is never
written, and checking a request recomputes it from the stored binding and compares in
constant time. Tokens minted before the task joined them, ``<session>.<nonce>.<mac>``, are
still accepted (their URLs are long-lived): the route then reads the binding first to learn
the task. A binding may also require an HMAC-SHA256 signature over
``"<timestamp>.<body>"`` with a timestamp window (the sender's secret, which the tool chose).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..constants import WEBHOOK_SIGNATURE_WINDOW_SECONDS, WEBHOOK_TOKEN_BYTES
from ..engine.signals import SignalToken
from ..engine.values import FrozenValue, frozen_value
from .webhook_keys import WebhookKeys, keys_of

if TYPE_CHECKING:
    from .api import ToolExecutionApi


WEBHOOK_MEMO_PREFIX = "bide.webhook."
"""A tool's webhook nonce is memoized as ``bide.webhook.<signal>/<key>`` (the sessions API
lists live webhooks from these memos: :mod:`bide.service.hooks`)."""

#: A nonce: lowercase hex, 128 bits for new webhooks (up to 256 accepted).
NONCE_PATTERN = re.compile(r"[0-9a-f]{32,64}")
NONCE_BYTES = 16
_MAC_CHARS = WEBHOOK_TOKEN_BYTES * 2
_MAC_PATTERN = re.compile(rf"[0-9a-f]{{{_MAC_CHARS}}}")
_UNKNOWN = "unknown webhook"


class InvalidBinding(ValueError):
    """A webhook binding that is not one: the message names the field and says why."""


# The binding's fields: the text ones every binding has, then those with defaults. A stored
# document has exactly these keys (its JSON shape, unchanged since bindings were first stored).
_REQUIRED_TEXT = ("session_id", "task_id", "signal", "key")
_set = object.__setattr__  # building a frozen value


@frozen_value
class WebhookBinding(FrozenValue):
    """Where a webhook's body goes, and how its sender proves itself. ``nonce`` names the
    binding; together with the rest it is what the token's mac is derived from. Stored as the
    document :meth:`to_doc` gives (read back by :meth:`from_doc`); each field is checked when
    the binding is made (:class:`InvalidBinding` names a wrong one)."""

    # Frozen value, not a dataclass: the same behaviour without its import cost
    # (bide.engine.values).
    __slots__ = ("hmac_secret", "key", "nonce", "session_id", "signal", "task_id", "window_seconds")
    session_id: str
    task_id: str
    signal: str
    key: str
    nonce: str
    hmac_secret: str | None
    window_seconds: int

    def __init__(
        self,
        session_id: str,
        task_id: str,
        signal: str,
        key: str,
        nonce: str = "",
        hmac_secret: str | None = None,
        window_seconds: int = WEBHOOK_SIGNATURE_WINDOW_SECONDS,
    ) -> None:
        _set(self, "session_id", session_id)
        _set(self, "task_id", task_id)
        _set(self, "signal", signal)
        _set(self, "key", key)
        _set(self, "nonce", nonce)
        _set(self, "hmac_secret", hmac_secret)
        _set(self, "window_seconds", window_seconds)
        for name in (*_REQUIRED_TEXT, "nonce"):
            if not isinstance(getattr(self, name), str):
                raise InvalidBinding(f"{name} must be text, not {_kind(getattr(self, name))}")
        if self.hmac_secret is not None and not isinstance(self.hmac_secret, str):
            raise InvalidBinding(f"hmac_secret must be text or None, not {_kind(self.hmac_secret)}")
        # bool is an int to Python, never a window.
        if type(self.window_seconds) is not int:
            raise InvalidBinding(
                f"window_seconds must be a whole number, not {_kind(self.window_seconds)}"
            )

    def to_doc(self) -> dict[str, Any]:
        """The stored document: every field, ``hmac_secret`` null when there is none."""
        return {
            "session_id": self.session_id,
            "task_id": self.task_id,
            "signal": self.signal,
            "key": self.key,
            "nonce": self.nonce,
            "hmac_secret": self.hmac_secret,
            "window_seconds": self.window_seconds,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> WebhookBinding:
        """The binding a stored document holds. Keys it does not know are ignored and missing
        optional ones take their defaults (documents written before a field existed still
        load); raises :class:`InvalidBinding` naming a missing or wrong field."""
        if not isinstance(doc, Mapping):
            raise InvalidBinding(f"a binding document is a JSON object, not {_kind(doc)}")
        missing = [name for name in _REQUIRED_TEXT if name not in doc]
        if missing:
            raise InvalidBinding(f"missing {', '.join(missing)}")
        fields = {name: doc[name] for name in _FIELDS if name in doc}
        return cls(**fields)


_FIELDS = (*_REQUIRED_TEXT, "nonce", "hmac_secret", "window_seconds")


def _kind(value: Any) -> str:
    return type(value).__name__


@frozen_value
class Webhook(FrozenValue):
    """A minted webhook: the URL to hand out and its token (a credential: bide never stores
    it; do not put it in a result, checkpoint or document either)."""

    __slots__ = ("token", "url")
    url: str
    token: str

    def __init__(self, url: str, token: str) -> None:
        _set(self, "url", url)
        _set(self, "token", token)


class WebhookRejected(Exception):
    """A webhook request refused: ``status`` and a message saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def new_nonce() -> str:
    """A fresh nonce for a webhook (random: it only has to be unique in its session)."""
    return secrets.token_hex(NONCE_BYTES)


def binding_key(nonce: str) -> str:
    """The document key of a webhook's binding (the nonce is not a secret)."""
    return "hook/" + nonce


def derive_mac(key: bytes, binding: WebhookBinding) -> str:
    """The token's secret part: HMAC-SHA256 under ``key`` of the binding's identity (a JSON
    array, so no two identities share an encoding), as hex truncated to 192 bits."""
    identity = json.dumps(
        ["bide.webhook.v1", binding.session_id, binding.task_id, binding.signal, binding.key,
         binding.nonce],
        separators=(",", ":"),
    )  # fmt: skip
    return hmac.new(key, identity.encode(), hashlib.sha256).hexdigest()[:_MAC_CHARS]


#: A task id longer than this (UTF-8 bytes) is left out of its tokens: they take the
#: three-part form, whose binding names the task (a path and a store key stay small).
MAX_TOKEN_TASK_BYTES = 256


@frozen_value
class TokenParts(FrozenValue):
    """What a token says: its session, its task (None for a three-part token, minted before
    tokens carried the task), the nonce naming its binding and the mac to check."""

    __slots__ = ("mac", "nonce", "session_id", "task_id")
    session_id: str
    task_id: str | None
    nonce: str
    mac: str

    def __init__(self, session_id: str, task_id: str | None, nonce: str, mac: str) -> None:
        _set(self, "session_id", session_id)
        _set(self, "task_id", task_id)
        _set(self, "nonce", nonce)
        _set(self, "mac", mac)


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(encoded: str) -> str | None:
    # Only the canonical encoding: the decoder skips stray characters and ignores a final
    # character's spare bits, and a token altered that way must be refused, not read as is.
    try:
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return text if text and _b64(text) == encoded else None


def make_token(session_id: str, nonce: str, mac: str, task_id: str | None = None) -> str:
    """``<session>.<task>.<nonce>.<mac>`` with the ids base64url-encoded (no padding); without
    ``task_id`` (or one over :data:`MAX_TOKEN_TASK_BYTES`), the three-part
    ``<session>.<nonce>.<mac>``."""
    if task_id is None or not 0 < len(task_id.encode()) <= MAX_TOKEN_TASK_BYTES:
        return f"{_b64(session_id)}.{nonce}.{mac}"
    return f"{_b64(session_id)}.{_b64(task_id)}.{nonce}.{mac}"


def token_of(binding: WebhookBinding, keys: WebhookKeys) -> str:
    """The token of ``binding`` under the current key (what is handed out and listed)."""
    mac = derive_mac(keys.current(), binding)
    return make_token(binding.session_id, binding.nonce, mac, binding.task_id)


def token_parts(token: str) -> TokenParts:
    """Read a token of either form; raises :class:`WebhookRejected` (404) for anything else,
    before any read."""
    pieces = token.split(".")
    if len(pieces) == 3:
        (encoded, nonce, mac), encoded_task = pieces, None
    elif len(pieces) == 4:
        encoded, encoded_task, nonce, mac = pieces
    else:
        raise WebhookRejected(404, _UNKNOWN)
    if not NONCE_PATTERN.fullmatch(nonce) or not _MAC_PATTERN.fullmatch(mac):
        raise WebhookRejected(404, _UNKNOWN)
    session_id = _unb64(encoded)
    task_id = None if encoded_task is None else _unb64(encoded_task)
    if session_id is None or (encoded_task is not None and task_id is None):
        raise WebhookRejected(404, _UNKNOWN)
    if task_id is not None and len(task_id.encode()) > MAX_TOKEN_TASK_BYTES:
        raise WebhookRejected(404, _UNKNOWN)  # never minted: such a task gets three parts
    return TokenParts(session_id, task_id, nonce, mac)


def parse_token(token: str) -> tuple[str, str, str]:
    """The session id, nonce and mac in a token of either form; raises
    :class:`WebhookRejected` (404)."""
    parts = token_parts(token)
    return parts.session_id, parts.nonce, parts.mac


def check_binding(
    parts: TokenParts, found: Mapping[str, Any] | None, keys: WebhookKeys
) -> WebhookBinding:
    """The binding a token (``parts``) is for, given the document found under its nonce
    (``found``, None when there is none): it must name the token's session, nonce and (for a
    four-part token) task, and the token's mac must be the one derived from it under one of
    ``keys``' accepted keys (compared in constant time). Raises :class:`WebhookRejected` (404,
    the same answer for every way a token can be wrong)."""
    if found is None:
        raise WebhookRejected(404, _UNKNOWN)
    try:
        binding = WebhookBinding.from_doc(found)
    except InvalidBinding:
        raise WebhookRejected(404, _UNKNOWN) from None
    if binding.session_id != parts.session_id or binding.nonce != parts.nonce:
        raise WebhookRejected(404, _UNKNOWN)
    # The route read the head and the task the token names: they must be the binding's.
    if parts.task_id is not None and binding.task_id != parts.task_id:
        raise WebhookRejected(404, _UNKNOWN)
    # Every accepted key is tried, not the first that matches: the time taken does not say
    # which key (or whether any) matched.
    matched = False
    for key in keys.accepted():
        matched |= hmac.compare_digest(derive_mac(key, binding), parts.mac)
    if not matched:
        raise WebhookRejected(404, _UNKNOWN)
    return binding


def resolve(
    token: str, find: Callable[[str, str], Mapping[str, Any] | None], keys: WebhookKeys
) -> WebhookBinding:
    """The binding ``token`` (either form) is for: ``find(session_id, doc_key)`` reads the
    session's binding document, checked by :func:`check_binding`. Raises
    :class:`WebhookRejected` (404, the same answer for every way a token can be wrong)."""
    parts = token_parts(token)
    return check_binding(parts, find(parts.session_id, binding_key(parts.nonce)), keys)


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
    same URL (the nonce is memoized; the key is the host's ``webhook_keys`` service). Uses only
    the public API of ``api``: its session and task ids, a memo, a write and the host's
    ``webhook_base_url`` and ``webhook_keys`` services."""
    nonce = await api.memo(f"{WEBHOOK_MEMO_PREFIX}{token.name}/{key}", new_nonce())
    binding = WebhookBinding(
        session_id=api.session_id,
        task_id=api.task_id,
        signal=token.name,
        key=key,
        nonce=str(nonce),
        hmac_secret=hmac_secret,
    )
    await api.write(lambda tx: tx.put_doc(binding_key(binding.nonce), binding.to_doc()))
    base = str(api.services.get("webhook_base_url", "")).rstrip("/")
    hook_token = token_of(binding, keys_of(api.services))
    return Webhook(url=f"{base}/hooks/{hook_token}", token=hook_token)
