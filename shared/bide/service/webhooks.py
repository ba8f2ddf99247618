"""Capability webhooks, as the transports use them (re-exported from :mod:`bide.tools.webhooks`).

The capability is not transport: its tokens, bindings and signatures live in
:mod:`bide.tools.webhooks`, where tools and workflow bodies mint them. This module keeps the
import path the services, the functions and users' apps have always used.
"""

from ..tools.webhooks import (
    Webhook,
    WebhookBinding,
    WebhookRejected,
    binding_key,
    make_token,
    mint_webhook,
    parse_token,
    sign,
    verify,
)

__all__ = [
    "Webhook",
    "WebhookBinding",
    "WebhookRejected",
    "binding_key",
    "make_token",
    "mint_webhook",
    "parse_token",
    "sign",
    "verify",
]
