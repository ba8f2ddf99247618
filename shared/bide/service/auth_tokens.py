"""Provider tokens at rest: the :class:`~bide.workflow.AuthProviders` port the service and the
local stack give workflow steps, over the session store, sealed by envelope encryption.

**Whose token.** A token belongs to the session's owner (the IAM principal that created it,
:mod:`bide.service.owners`) and a provider: every session of that principal finds it, no other
principal's does. A session without a recorded owner (made in-process, or before owners were
recorded) keeps its tokens to itself (identity ``session:<id>``).

**Where.** One document per (identity, provider) in the store partition ``#auth/<identity>``
(a ``#`` no API session id may hold, like the owners' index), key ``p/<provider>``: on AWS an
item of the sessions table (no new resource, no new IAM action: the functions already read and
write that table), locally a row of the SQLite file. Writing is one commit on that partition,
retried on a conflict with another write of the same principal.

**Sealed.** The document never holds the token. It holds an envelope:

* a fresh 256-bit data key per write seals the token with AES-256-GCM (96-bit random nonce);
* the data key is wrapped with AES-256-GCM under the *key-encryption key*, derived
  (HMAC-SHA256 with a fixed label) from the deployment key of :mod:`bide.tools.webhook_keys`:
  on AWS the Secrets Manager secret the functions already read once per cold start (with
  Powertools Parameters), locally the 0600 key file beside the SQLite file. The derivation
  keeps the two uses apart: a webhook MAC is never an AES key and back;
* both seals authenticate ``identity`` and ``provider`` (GCM associated data), so a document
  copied under another principal or provider does not open;
* ``kid`` (a hash of the key-encryption key) says which deployment key sealed it, so a key
  rotated into ``previous`` still opens older documents; new writes use ``current``.

Whoever reads the table, a backup or the SQLite file sees ciphertext; without the secret (or the
key file) nothing opens. A document that no listed key opens (its key was dropped, or it was
tampered with) reads as "no token": the step asks the person to sign in again, and a warning is
logged. AES-GCM comes from the ``cryptography`` package (imported on first use, so a function
that never touches a token does not load it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from typing import Any

from ..engine.errors import ConflictError, StoreUnavailable
from ..engine.limits import ValueRefused
from ..engine.store.base import Doc, Store
from ..tools.redaction import register
from ..tools.webhook_keys import WebhookKeys
from .owners import owner_of

log = logging.getLogger(__name__)

PARTITION_PREFIX = "#auth/"
DOC_PREFIX = "p/"
#: The label the key-encryption key is derived under (changing it orphans every sealed token).
KEK_LABEL = b"bide provider tokens: key-encryption key v1"
#: The longest token accepted, in UTF-8 bytes: the route takes 16,384 characters of at most 4
#: bytes each; sealed and base64-encoded that stays far under DynamoDB's 400 KB item.
MAX_TOKEN_BYTES = 64 * 1024
MAX_PROVIDER_CHARS = 128
_RETRIES = 20
_VERSION = 1


class TokenRefused(ValueRefused):
    """A token or provider name the store does not take (nothing was stored): the message
    says which field and why; the route answers 400."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not base64 text")
    return base64.b64decode(text.encode("ascii"), validate=True)


def kek(deployment_key: bytes) -> bytes:
    """The key-encryption key derived from a deployment key (32 bytes)."""
    return hmac.new(deployment_key, KEK_LABEL, hashlib.sha256).digest()


def key_id(key_encryption_key: bytes) -> str:
    """A public name of a key-encryption key (reveals nothing about it)."""
    return hashlib.sha256(b"kid:" + key_encryption_key).hexdigest()[:16]


def _aad(identity: str, provider: str) -> bytes:
    return f"bide-token\n{identity}\n{provider}".encode()


def seal(token: str, identity: str, provider: str, key_encryption_key: bytes) -> dict[str, Any]:
    """The envelope document of ``token`` (see the module)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aad = _aad(identity, provider)
    data_key = AESGCM.generate_key(bit_length=256)
    token_nonce, key_nonce = secrets.token_bytes(12), secrets.token_bytes(12)
    sealed = AESGCM(data_key).encrypt(token_nonce, token.encode("utf-8"), aad)
    wrapped = AESGCM(key_encryption_key).encrypt(key_nonce, data_key, aad)
    return {
        "v": _VERSION,
        "alg": "AES-256-GCM",
        "kid": key_id(key_encryption_key),
        "wrapped_key": _b64(key_nonce + wrapped),
        "sealed": _b64(token_nonce + sealed),
    }


def unseal(body: Any, identity: str, provider: str, keys: list[bytes]) -> str | None:
    """The token in an envelope, or None when no key in ``keys`` (key-encryption keys) opens
    it, or it was altered."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not isinstance(body, dict) or body.get("v") != _VERSION:
        return None
    aad = _aad(identity, provider)
    try:
        wrapped, sealed = _unb64(body.get("wrapped_key")), _unb64(body.get("sealed"))
    except ValueError:
        return None
    for candidate in keys:
        if key_id(candidate) != body.get("kid"):
            continue
        try:
            data_key = AESGCM(candidate).decrypt(wrapped[:12], wrapped[12:], aad)
            return AESGCM(data_key).decrypt(sealed[:12], sealed[12:], aad).decode("utf-8")
        except (InvalidTag, ValueError):
            return None
    return None


def partition(identity: str) -> str:
    """The store partition holding ``identity``'s tokens."""
    return PARTITION_PREFIX + identity


def doc_key(provider: str) -> str:
    """The document key of a provider's token."""
    return DOC_PREFIX + provider


class StoredAuthProviders:
    """:class:`~bide.workflow.AuthProviders` over a :class:`~bide.engine.store.base.Store`,
    tokens sealed under ``keys`` (see the module). Every token read or stored is registered
    for redaction (:mod:`bide.tools.redaction`)."""

    def __init__(self, store: Store, keys: WebhookKeys) -> None:
        self.store = store
        self.keys = keys

    def identity(self, session_id: str) -> str:
        """Whose tokens the session uses: its owner, else the session itself."""
        owner = owner_of(self.store, session_id)
        return owner if owner is not None else f"session:{session_id}"

    def get_token(self, session_id: str, provider: str) -> str | None:
        """The stored token, or None (never stored, or no longer opens: sign in again)."""
        who = self.identity(session_id)
        found = self.store.get_doc(partition(who), doc_key(provider))
        if found is None:
            return None
        token = unseal(found.body, who, provider, [kek(k) for k in self.keys.accepted()])
        if token is None:
            log.warning(
                "the stored %r token of a principal does not open (its key was rotated out or "
                "the document changed): the step asks for a new sign-in",
                provider,
            )
            return None
        register(token)
        return token

    def store_token(self, session_id: str, provider: str, token: str) -> None:
        """Seal and keep ``token`` (replacing an older one). Raises :class:`TokenRefused`
        for an empty or oversized token or provider name."""
        if not isinstance(token, str) or not token:
            raise TokenRefused("token", "must be a non-empty string")
        if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
            raise TokenRefused("token", f"is longer than {MAX_TOKEN_BYTES} bytes", MAX_TOKEN_BYTES)
        if not provider or len(provider) > MAX_PROVIDER_CHARS:
            raise TokenRefused("provider", f"must be 1 to {MAX_PROVIDER_CHARS} characters")
        register(token)
        who = self.identity(session_id)
        body = seal(token, who, provider, kek(self.keys.current()))
        where = partition(who)
        for _ in range(_RETRIES):
            try:
                self.store.commit(where, self.store.head(where), [], [Doc(doc_key(provider), body)])
                return
            except ConflictError:
                continue  # another write of the same principal's tokens landed first
        raise StoreUnavailable("could not store the token: the principal's tokens kept changing")
