"""A webhook binding as stored: the document's JSON shape, documents written by earlier
versions, and what a malformed one gets (a binding names its field and why; a token whose
binding is malformed gets the same 404 as any wrong token)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bide.constants import WEBHOOK_SIGNATURE_WINDOW_SECONDS
from bide.tools.webhook_keys import StaticWebhookKeys
from bide.tools.webhooks import (
    InvalidBinding,
    WebhookBinding,
    WebhookRejected,
    binding_key,
    check_binding,
    derive_mac,
    make_token,
    resolve,
    token_parts,
)

KEY = b"k" * 32
KEYS = StaticWebhookKeys(KEY)
NONCE = "ab" * 16

# What bindings have been stored as since the nonce joined them (pydantic's model_dump in
# JSON mode wrote exactly this): every field, in this order, hmac_secret null when unsigned.
STORED = {
    "session_id": "s-1",
    "task_id": "t-1",
    "signal": "reply",
    "key": "done",
    "nonce": NONCE,
    "hmac_secret": None,
    "window_seconds": WEBHOOK_SIGNATURE_WINDOW_SECONDS,
}


def test_the_stored_document_keeps_its_json_shape() -> None:
    binding = WebhookBinding("s-1", "t-1", "reply", "done", nonce=NONCE)
    doc = binding.to_doc()
    assert json.dumps(doc) == json.dumps(STORED)  # same keys, same order, same values
    assert WebhookBinding.from_doc(json.loads(json.dumps(doc))) == binding
    signed = WebhookBinding("s-1", "t-1", "reply", "done", nonce=NONCE, hmac_secret="x")
    assert signed.to_doc()["hmac_secret"] == "x"
    assert WebhookBinding.from_doc(signed.to_doc()) == signed


def test_documents_of_earlier_versions_load() -> None:
    # Before the nonce (and a window of its own) joined the binding, and with a key a later
    # version may add: missing optional fields take their defaults, unknown ones are ignored.
    old = {"session_id": "s-1", "task_id": "t-1", "signal": "reply", "key": "done"}
    binding = WebhookBinding.from_doc({**old, "added_later": [1, 2]})
    assert binding == WebhookBinding("s-1", "t-1", "reply", "done")
    assert binding.nonce == "" and binding.hmac_secret is None
    assert binding.window_seconds == WEBHOOK_SIGNATURE_WINDOW_SECONDS


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (["s-1"], "JSON object, not list"),
        (None, "JSON object, not NoneType"),
        ({k: v for k, v in STORED.items() if k != "signal"}, "missing signal"),
        ({"nonce": NONCE}, "missing session_id, task_id, signal, key"),
        ({**STORED, "session_id": 7}, "session_id must be text, not int"),
        ({**STORED, "key": None}, "key must be text, not NoneType"),
        ({**STORED, "nonce": None}, "nonce must be text, not NoneType"),
        ({**STORED, "hmac_secret": 1}, "hmac_secret must be text or None, not int"),
        ({**STORED, "window_seconds": "300"}, "window_seconds must be a whole number, not str"),
        ({**STORED, "window_seconds": True}, "window_seconds must be a whole number, not bool"),
        ({**STORED, "window_seconds": 1.5}, "window_seconds must be a whole number, not float"),
    ],
)
def test_a_malformed_document_names_its_field(doc: Any, named: str) -> None:
    with pytest.raises(InvalidBinding, match=named):
        WebhookBinding.from_doc(doc)


def test_a_binding_made_in_code_is_checked_too() -> None:
    with pytest.raises(InvalidBinding, match="key must be text, not int"):
        WebhookBinding("s-1", "t-1", "reply", 5)  # type: ignore[arg-type]


def test_a_token_whose_binding_is_malformed_is_unknown() -> None:
    good = WebhookBinding.from_doc(STORED)
    token = make_token("s-1", NONCE, derive_mac(KEY, good), "t-1")
    assert resolve(token, lambda s, k: STORED if k == binding_key(NONCE) else None, KEYS) == good
    for broken in ({**STORED, "window_seconds": "300"}, {**STORED, "key": 5}, ["s-1"]):
        with pytest.raises(WebhookRejected) as caught:
            check_binding(token_parts(token), broken, KEYS)
        assert (caught.value.status, caught.value.message) == (404, "unknown webhook")
