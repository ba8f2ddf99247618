"""The deployment key capability webhook tokens are derived under: a port and its plain forms.

A webhook token is never stored: it is an HMAC-SHA256, under a deployment key, of the
webhook's identity (session, task, signal, key and a per-webhook nonce that *is* stored; see
:mod:`bide.tools.webhooks`). Whoever can read the table, the offloaded objects or a backup
sees the identity and not the key, so nothing they read is a token the webhook route takes.

The key lives outside the store, behind :class:`WebhookKeys`:

* on AWS, a Secrets Manager secret the stack creates (:mod:`bide.aws.webhook_keys`);
* locally, a 0600 key file next to the SQLite file (:mod:`bide.local.webhook_keys`), never in
  the SQLite file itself, so a copy of the database is not a copy of the key;
* in an in-process harness (tests, examples) that is given none, a random key of this process
  (:func:`process_keys`): its URLs stop working when the process ends.

Both stored forms hold the same JSON document, ``{"current": "<key>", "previous": ["<key>",
...]}``: new webhooks are minted under ``current``; a token minted under a ``previous`` key is
still accepted. Rotating is: move ``current`` to the front of ``previous`` and put a new
``current``; drop a previous key once the webhooks minted under it have ended (a webhook minted
under a key that is no longer listed is refused as unknown).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..engine.errors import BideError
from ..engine.values import FrozenValue, value_class

#: The shortest key accepted, in bytes (UTF-8 of the key string): 256 bits.
KEY_MIN_BYTES = 32
#: The harness service name under which a host passes its :class:`WebhookKeys`.
WEBHOOK_KEYS_SERVICE = "webhook_keys"


class WebhookKeyError(BideError):
    """The deployment's webhook key document is missing or malformed; the message says which
    field and why. Fix the secret or the key file: retrying cannot help."""


@runtime_checkable
class WebhookKeys(Protocol):
    """Where webhook tokens' deployment key comes from (a port: AWS, local, in-process)."""

    def current(self) -> bytes:
        """The key new webhooks are minted under."""
        ...

    def accepted(self) -> Sequence[bytes]:
        """Every key a presented token may have been minted under: the current key first,
        then the previous keys still honoured."""
        ...


@value_class
class StaticWebhookKeys(FrozenValue):
    """A current key and the previous keys still accepted, held in memory."""

    __slots__ = ("current_key", "previous")
    current_key: bytes
    previous: tuple[bytes, ...]

    def __init__(self, current_key: bytes, previous: tuple[bytes, ...] = ()) -> None:
        for name, key in (("current", current_key), *(("previous", k) for k in previous)):
            if len(key) < KEY_MIN_BYTES:
                raise WebhookKeyError(
                    f"webhook key {name!r} is {len(key)} bytes; at least {KEY_MIN_BYTES} needed"
                )
        object.__setattr__(self, "current_key", current_key)
        object.__setattr__(self, "previous", previous)

    def current(self) -> bytes:
        """The key new webhooks are minted under."""
        return self.current_key

    def accepted(self) -> Sequence[bytes]:
        """The current key, then the previous ones."""
        return (self.current_key, *self.previous)


def parse_keys(text: str, *, source: str) -> StaticWebhookKeys:
    """The keys in a key document (``{"current": ..., "previous": [...]}``) read from
    ``source`` (named in errors); raises :class:`WebhookKeyError` saying what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise WebhookKeyError(f"{source}: the webhook key document is not JSON") from None
    if not isinstance(document, dict):
        raise WebhookKeyError(f"{source}: the webhook key document must be a JSON object")
    current = document.get("current")
    previous = document.get("previous", [])
    if not isinstance(current, str) or not current:
        raise WebhookKeyError(f"{source}: 'current' must be a non-empty string")
    if not isinstance(previous, list) or not all(isinstance(k, str) and k for k in previous):
        raise WebhookKeyError(f"{source}: 'previous' must be a list of non-empty strings")
    try:
        return StaticWebhookKeys(current.encode(), tuple(k.encode() for k in previous))
    except WebhookKeyError as exc:
        raise WebhookKeyError(f"{source}: {exc}") from None


def new_key_document() -> str:
    """A fresh key document: a random current key (384 bits, URL-safe text), no previous."""
    return json.dumps({"current": secrets.token_urlsafe(48), "previous": []})


_process_keys: StaticWebhookKeys | None = None
_process_lock = threading.Lock()


def process_keys() -> StaticWebhookKeys:
    """A random key of this process, for in-process harnesses that were given none (tests,
    examples). Every harness of the process shares it; a host serving webhooks across
    processes must pass its own (the functions and the local stack do)."""
    global _process_keys
    with _process_lock:
        if _process_keys is None:
            _process_keys = parse_keys(new_key_document(), source="this process")
        return _process_keys


def keys_of(services: Mapping[str, Any]) -> WebhookKeys:
    """The :class:`WebhookKeys` a host passed in its services, or this process's own."""
    found = services.get(WEBHOOK_KEYS_SERVICE)
    if found is None:
        return process_keys()
    if not isinstance(found, WebhookKeys):
        raise WebhookKeyError(f"service {WEBHOOK_KEYS_SERVICE!r} is not a WebhookKeys")
    return found
