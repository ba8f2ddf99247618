"""How the AWS store survives throttling and lost answers: which botocore errors are worth
another try (and which are a definite "no"), capped and jittered exponential backoff, and the
``ClientRequestToken`` that makes resending a commit safe.

These belong together: a transient error is only safe to retry because reads are idempotent
and every attempt of one commit carries the same token and the same seq condition, so a commit
can never apply twice. :class:`Retrier` alone decides how often to try: clients made by
:func:`new_client` have botocore's own retries turned off. What is left after the last attempt
is :class:`~bide.engine.errors.StoreUnavailable`; a failed seq condition is
:class:`~bide.engine.errors.ConflictError` at once and never retried (the caller must reload).
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ..engine.errors import CommitTooLarge, ConflictError, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

T = TypeVar("T")

# Errors after which the request certainly or possibly did not apply, and where sending it
# again is safe: reads are idempotent, and a commit is resent with the same ClientRequestToken
# and the same seq condition, so it can never apply twice.
TRANSIENT_CODES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "TransactionConflictException",
        # The first attempt of this very commit is still running; wait and ask again.
        "TransactionInProgressException",
        # S3
        "SlowDown",
        "InternalError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# Per-action reasons in a TransactionCanceledException that say "try again", not "no".
TRANSIENT_CANCELLATIONS: Final = frozenset(
    {"TransactionConflict", "ProvisionedThroughputExceeded", "ThrottlingError"}
)


class Retrier:
    """Runs calls up to ``max_attempts`` times, sleeping a capped, jittered exponential
    backoff between attempts. ``sleep`` is injectable so tests do not wait, and ``rng`` (the
    source of the jitter; a fresh :class:`random.Random` when omitted) so a test can make the
    delays repeatable. ``label`` names the store in the
    :class:`~bide.engine.errors.StoreUnavailable` raised at the end. Safe to share between
    threads."""

    def __init__(
        self,
        label: str,
        *,
        max_attempts: int,
        base_delay: float,
        max_delay: float,
        sleep: Callable[[float], None],
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.label = label
        self.max_attempts = max_attempts
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._sleep = sleep
        self._rng = random.Random() if rng is None else rng

    def run(self, what: str, call: Callable[[], T]) -> T:
        """Run ``call``, retrying transient failures with backoff; then StoreUnavailable.
        Any other error propagates at once."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return call()
            except (ClientError, BotoCoreError) as exc:
                if not is_transient(exc):
                    raise
                if attempt == self.max_attempts:
                    raise StoreUnavailable(
                        f"{self.label}: {what} failed {attempt} times "
                        f"({describe(exc)}); try again later"
                    ) from exc
            self.pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def pause(self, attempt: int) -> None:
        """Sleep the backoff that follows failed attempt number ``attempt`` (from 1)."""
        self._sleep(self.backoff(attempt))

    def backoff(self, attempt: int) -> float:
        """The delay after failed attempt number ``attempt`` (from 1)."""
        # "Full jitter": racing retriers spread out instead of colliding again in lockstep.
        return self._rng.uniform(0, min(self._max_delay, self._base_delay * 2 ** (attempt - 1)))


def request_token() -> str:
    """A fresh ``ClientRequestToken`` for one commit, to be sent with every attempt of it:
    DynamoDB answers a resent, already applied transaction with success instead of applying
    it again (within a 10 minute window)."""
    return secrets.token_hex(16)


class ChecksFailed(Exception):
    """A commit's ``ConditionCheck`` actions failed while its head's condition held: the items
    they check exist. :attr:`failed` holds each failed action's index in the transaction and
    the item as it stands (from ``ReturnValuesOnConditionCheckFailure=ALL_OLD``; None when the
    service did not return it). Nothing was written; never retried."""

    def __init__(self, failed: list[tuple[int, dict[str, Any] | None]]) -> None:
        self.failed = failed
        super().__init__(f"condition checks failed at actions {[i for i, _ in failed]}")


def transact(
    client: DynamoDBClient,
    session_id: str,
    expected_seq: int,
    token: str,
    actions: list[TransactWriteItemTypeDef],
) -> None:
    """One attempt of a commit whose action 0 is the session head, conditioned on
    ``expected_seq`` with ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` and writing ``txn =
    token``. Returns on success; raises the domain error for a definite "no"
    (:class:`~bide.engine.errors.ConflictError`,
    :class:`~bide.engine.errors.CommitTooLarge`) and :class:`ChecksFailed` when only later
    actions' conditions failed (only ``ConditionCheck`` actions carry one); lets transient
    errors through for :meth:`Retrier.run`."""
    try:
        client.transact_write_items(TransactItems=actions, ClientRequestToken=token)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "TransactionCanceledException":
            reasons = exc.response.get("CancellationReasons", [])
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                # The head is action 0; ALL_OLD put the head as it stands into the reason.
                old: dict[str, Any] = dict(reasons[0].get("Item", {}))
                actual = 0 if not old else int(old["seq"]["N"])
                if old and old.get("txn", {}).get("S") == token:
                    # An earlier attempt of this very commit was applied and its answer
                    # lost (DynamoDB normally answers the resent request with success
                    # itself; this covers the token window and emulators). Success.
                    return
                raise ConflictError(session_id, expected_seq, actual) from None
            # The head held: a failed condition further on is a check of an item that
            # exists. A definite "no" too (not transient, not a conflict to reload for); the
            # item, asked for with ALL_OLD, comes in the same reason: no second read.
            failed = [
                (i, dict(r["Item"]) if r.get("Item") else None)
                for i, r in enumerate(reasons)
                if i > 0 and r.get("Code") == "ConditionalCheckFailed"
            ]
            if failed:
                raise ChecksFailed(failed) from None
            codes = {r.get("Code") for r in reasons}
            if "ItemCollectionSizeLimitExceeded" in codes:
                raise CommitTooLarge(
                    f"session {session_id!r} has reached DynamoDB's 10 GB item collection "
                    "limit; nothing was written"
                ) from exc
            if "ValidationError" in codes and "size" in message.lower():
                raise CommitTooLarge(
                    f"DynamoDB refused the commit to session {session_id!r} as too large "
                    f"({message}); nothing was written"
                ) from exc
        elif code == "ValidationException" and "size" in message.lower():
            raise CommitTooLarge(
                f"DynamoDB refused the commit to session {session_id!r} as too large "
                f"({message}); nothing was written"
            ) from exc
        raise


def new_client(service: str) -> Any:
    """A boto3 client for ``service`` with botocore's retries off."""
    import boto3
    from botocore.config import Config

    # Our own retry loop is the only one, so attempts, backoff and sleeps are ours to control.
    config = Config(retries={"mode": "standard", "total_max_attempts": 1})
    return boto3.client(service, config=config)  # type: ignore[call-overload]


def is_transient(exc: Exception) -> bool:
    """Whether ``exc`` leaves the request possibly unapplied and safe to send again."""
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True  # connection refused/reset, timeouts: the request may or may not have run
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code", "")
    if code in TRANSIENT_CODES:
        return True
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons", [])
        codes = {r.get("Code") for r in reasons} - {"None", None}
        return bool(codes) and codes <= TRANSIENT_CANCELLATIONS
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status >= 500


def describe(exc: Exception) -> str:
    """``exc`` in one line, for messages."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', '?')}: {error.get('Message', '')}"
    return f"{type(exc).__name__}: {exc}"
