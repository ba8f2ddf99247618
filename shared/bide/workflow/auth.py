"""Provider authorization inside steps (design 000 §3.2).

Tokens come from an :class:`AuthProviders` port the host puts in the harness services under
``"auth_providers"`` (``Deps.services`` on AWS). A step that received its context calls
``await step.get_token(provider)``: a cached token is returned to the step; none means the
person must sign in, so the attempt ends, the run parks on an authorization request (a
document like an ask) and the step is retried once the callback stored a token and completed
the request. ``require_auth(provider)`` says the token was rejected: sign in again. A token
rejected in the attempt right after a sign-in fails the step (no loop).

Tokens never enter the recorded history: they are returned to the step only. Every token a
step receives is registered for redaction (:mod:`bide.tools.redaction`): a step whose result
holds one, in any encoding the redaction knows, fails instead of being recorded; a step's
error, the run's error, tool results and log lines have it replaced by ``[redacted]``. In the
workflow body itself both methods raise :class:`~bide.workflow.errors.WorkflowError`.

Whose token a session uses is the port's business: the service and the local stack pass
:class:`bide.service.auth_tokens.StoredAuthProviders` (sealed at rest, per session owner and
provider); :class:`InMemoryAuthProviders` keeps tokens per session, in memory (tests, examples).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any, Protocol

from ..constants import AUTH_PROVIDERS_SERVICE
from .errors import WorkflowError

SERVICE = AUTH_PROVIDERS_SERVICE


class AuthProviders(Protocol):
    """Where tokens live: looked up by session and provider (the port decides whose token a
    session uses)."""

    def get_token(self, session_id: str, provider: str) -> str | Awaitable[str | None] | None:
        """The cached token, or None when the person must sign in (may be async)."""
        ...

    def store_token(self, session_id: str, provider: str, token: str) -> Awaitable[None] | None:
        """Keep the token the sign-in callback brought (may be async)."""
        ...


class InMemoryAuthProviders:
    """Tokens in a dict: tests, examples and the local stack."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, str], str] = {}
        self.lookups = 0

    def get_token(self, session_id: str, provider: str) -> str | None:
        """The token stored for this session and provider, if any."""
        self.lookups += 1
        return self.tokens.get((session_id, provider))

    def store_token(self, session_id: str, provider: str, token: str) -> None:
        """Keep ``token``."""
        self.tokens[(session_id, provider)] = token

    def forget(self, session_id: str, provider: str) -> None:
        """Drop a token (e.g. one the provider revoked)."""
        self.tokens.pop((session_id, provider), None)


def providers_of(services: dict[str, Any]) -> AuthProviders:
    """The port from the harness services; raises when the host configured none."""
    found = services.get(SERVICE)
    if found is None:
        raise WorkflowError(
            f"no AuthProviders in the harness services under {SERVICE!r}: "
            "the host must provide one for get_token/require_auth"
        )
    return found  # type: ignore[no-any-return]


async def resolved(value: Any) -> Any:
    """``value``, awaited when the port is async."""
    return await value if inspect.isawaitable(value) else value
