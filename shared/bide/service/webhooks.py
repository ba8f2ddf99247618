"""Capability webhooks, as the transports use them (re-exported from :mod:`bide.tools.webhooks`).

The capability is not transport: its tokens, bindings and signatures live in
:mod:`bide.tools.webhooks`, where tools and workflow bodies mint them. This module keeps the
import path the services, the functions and users' apps have always used.
"""

from ..tools.webhook_keys import StaticWebhookKeys, WebhookKeys, keys_of, process_keys
from ..tools.webhooks import (
    TokenParts,
    Webhook,
    WebhookBinding,
    WebhookRejected,
    binding_key,
    check_binding,
    derive_mac,
    make_token,
    mint_webhook,
    parse_token,
    resolve,
    sign,
    token_of,
    token_parts,
    verify,
)

__all__ = [
    "StaticWebhookKeys",
    "TokenParts",
    "Webhook",
    "WebhookBinding",
    "WebhookKeys",
    "WebhookRejected",
    "binding_key",
    "check_binding",
    "derive_mac",
    "keys_of",
    "make_token",
    "mint_webhook",
    "parse_token",
    "process_keys",
    "resolve",
    "sign",
    "token_of",
    "token_parts",
    "verify",
]
