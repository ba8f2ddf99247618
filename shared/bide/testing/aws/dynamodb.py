"""DynamoDB as faulty and as strict as AWS's: :class:`DynamoDBTwin` wraps a real boto3 client
(moto's in-process ``mock_aws`` one, or DynamoDB Local) and adds what the emulator leaves out.

What moto gets wrong and the twin replaces (``tests/test_twin_dynamodb.py`` shows each on
moto):

* ``ClientRequestToken`` of TransactWriteItems: moto ignores it, so a resent transaction is
  applied twice and a reused token with other parameters succeeds. The twin answers a repeat
  within 10 minutes with success without applying it again, and a reused token with different
  parameters with ``IdempotentParameterMismatchException``.
* moto never throttles and never cancels a transaction for a conflict; the twin injects
  ``ProvisionedThroughputExceededException`` / ``ThrottlingException`` and
  ``TransactionCanceledException`` (reason ``TransactionConflict``) at seeded rates.

Everything else (conditions, ``CancellationReasons`` of failed conditions, reads) is moto's
or DynamoDB Local's, delegated unchanged.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from typing import Any

from .clock import SimClock
from .errors import client_error

# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
# (ClientRequestToken): "A client request token is valid for 10 minutes after the first
# request that uses it is completed. After 10 minutes, any request with the same client token
# is treated as a new request."
TOKEN_WINDOW = 600.0

# Data-plane operations, where AWS throttles (the control plane is passed through untouched).
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html :
# ProvisionedThroughputExceededException and ThrottlingException are both retryable 400s.
_DATA_OPERATIONS = frozenset(
    {
        "get_item",
        "put_item",
        "update_item",
        "delete_item",
        "query",
        "scan",
        "batch_get_item",
        "batch_write_item",
        "transact_get_items",
        "transact_write_items",
    }
)
_THROTTLES = ("ProvisionedThroughputExceededException", "ThrottlingException")


@dataclass
class _Token:
    completed: float
    fingerprint: str
    response: dict[str, Any]


class DynamoDBTwin:
    """A DynamoDB client: ``inner``'s, plus seeded faults and the token rules.

    ``throttle_rate``: probability that a data-plane call is throttled (nothing applied).
    ``conflict_rate``: probability that a TransactWriteItems is cancelled with
    ``TransactionConflict`` for one of its items (nothing applied). ``injected`` counts the
    faults by error code."""

    def __init__(
        self,
        inner: Any,
        clock: SimClock,
        rng: random.Random,
        *,
        throttle_rate: float = 0.0,
        conflict_rate: float = 0.0,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.rng = rng
        self.throttle_rate = throttle_rate
        self.conflict_rate = conflict_rate
        self.injected: dict[str, int] = {}
        self._tokens: dict[str, _Token] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in _DATA_OPERATIONS:
            return attr

        def call(**request: Any) -> Any:
            self._maybe_throttle(name)
            return attr(**request)

        return call

    def transact_write_items(self, **request: Any) -> Any:
        """TransactWriteItems with AWS's idempotency and injected faults."""
        op = "TransactWriteItems"
        token = request.get("ClientRequestToken")
        fingerprint = json.dumps(
            {k: v for k, v in request.items() if k != "ClientRequestToken"},
            sort_keys=True,
            default=str,
        )
        now = self.clock.now()
        if token is not None:
            seen = self._tokens.get(token)
            if seen is not None and now - seen.completed < TOKEN_WINDOW:
                # API_TransactWriteItems.html (ClientRequestToken): a repeat with the same
                # token and parameters succeeds with no further effect; different parameters
                # within the window answer IdempotentParameterMismatchException.
                if seen.fingerprint != fingerprint:
                    raise client_error(
                        "IdempotentParameterMismatchException",
                        "Request with same client request token has different parameters",
                        op,
                    )
                return copy.deepcopy(seen.response)
        self._maybe_throttle("transact_write_items")
        items = request.get("TransactItems", [])
        if items and self.rng.random() < self.conflict_rate:
            raise self._conflict(len(items))
        response: dict[str, Any] = self.inner.transact_write_items(**request)
        if token is not None:
            self._tokens[token] = _Token(self.clock.now(), fingerprint, copy.deepcopy(response))
        return response

    def _maybe_throttle(self, operation: str) -> None:
        if self.throttle_rate and self.rng.random() < self.throttle_rate:
            code = self.rng.choice(_THROTTLES)
            self.injected[code] = self.injected.get(code, 0) + 1
            op = "".join(part.title() for part in operation.split("_"))
            raise client_error(code, f"injected {code}", op)

    def _conflict(self, count: int) -> Exception:
        """https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
        (TransactionCanceledException): one reason per action, in order, ``None`` for the
        actions that did not cause the cancellation; ``TransactionConflict`` when another
        transaction or request is working on the item."""
        culprit = self.rng.randrange(count)
        codes = ["TransactionConflict" if i == culprit else "None" for i in range(count)]
        reasons: list[dict[str, str]] = [
            {"Code": c, "Message": "Transaction is ongoing for the item"}
            if c != "None"
            else {"Code": "None"}
            for c in codes
        ]
        name = "TransactionCanceledException"
        self.injected[name] = self.injected.get(name, 0) + 1
        return client_error(
            name,
            "Transaction cancelled, please refer cancellation reasons for specific reasons "
            f"[{', '.join(codes)}]",
            "TransactWriteItems",
            CancellationReasons=reasons,
        )
