"""How the twin fails: AWS's own error shapes, and a refusal for what it does not model."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError


class TwinUnsupported(ValueError):
    """The request is valid for AWS but uses something the twin does not model (a time zone
    other than UTC, a flexible time window, ...). Refused loudly rather than guessed at."""


def client_error(
    code: str, message: str, operation: str, *, status: int = 400, **extra: Any
) -> ClientError:
    """A :class:`botocore.exceptions.ClientError` shaped as botocore builds it from an AWS
    error response (``response["Error"]["Code"]`` is what callers branch on)."""
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
        **extra,
    }
    return ClientError(response, operation)  # type: ignore[arg-type]
