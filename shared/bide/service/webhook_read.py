"""The webhook routes' read: a request's binding, and the session's head and the task with it.

A four-part token (``<session>.<task>.<nonce>.<mac>``, :mod:`bide.tools.webhooks`) names its
task, so the binding document, the session's sequence number and the task come back in one
consistent read (:meth:`~bide.engine.store.base.Store.task_and_doc_at_head`: one
``TransactGetItems`` on DynamoDB), the same single read the IAM signal route makes for its
owner check. The binding is checked against the token exactly as before (its task must be
the token's), and the delivery then decides on the head and task read with it (``at_head``)
instead of reading them again. A three-part token, minted before tokens carried the task,
still works: its binding is read first to learn the task, and the delivery reads the head and
the task itself (one read more).

The trade: one request and one round trip fewer, but the binding is now read in a transaction,
which DynamoDB bills at twice a strongly consistent read's units (2 RRU per 4 KB item instead
of 1: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling),
as the IAM route's owner document already is.
"""

from __future__ import annotations

from ..engine.delivery import AtHead
from ..tools.webhooks import WebhookBinding, binding_key, check_binding, token_parts
from .deps import Deps


def read_webhook(deps: Deps, token: str) -> tuple[WebhookBinding, AtHead | None]:
    """The binding ``token`` is for and, for a four-part token, the session's head and the
    binding's task as they stood with it (None for a three-part token: the delivery reads
    them). Raises :class:`~bide.tools.webhooks.WebhookRejected` (404, the same answer for
    every way a token can be wrong) before anything is decided or written."""
    parts = token_parts(token)
    key = binding_key(parts.nonce)
    if parts.task_id is None:  # a three-part token: the binding says which task
        doc = deps.store.get_doc(parts.session_id, key)
        at_head = None
    else:
        seq, record, doc = deps.store.task_and_doc_at_head(parts.session_id, parts.task_id, key)
        at_head = (seq, record)
    binding = check_binding(parts, None if doc is None else doc.body, deps.webhook_keys)
    return binding, at_head
