"""What the host services need, wired once per process: store, alarms, wake queue, the app."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..aws.ports import Alarms, DeadLetters, EndedSessions, WakeQueue
from ..constants import AUTH_PROVIDERS_SERVICE, NONDETERMINISM_SINK, WORKER_LEASE_SECONDS
from ..engine.clock import Clock, SystemClock
from ..engine.ids import IdSource, RandomIds
from ..engine.store.base import Store
from ..tools.webhook_keys import WEBHOOK_KEYS_SERVICE, WebhookKeys, process_keys
from . import observability as obs
from .auth_tokens import StoredAuthProviders

if TYPE_CHECKING:
    from ..app import App  # the app's tasks and tools: imported by whoever builds Deps


@dataclass
class Deps:
    """Everything a handler needs. Built from configuration by the function (AWS) or the
    local stack; tests build it directly."""

    store: Store
    alarms: Alarms
    queue: WakeQueue
    app: App
    clock: Clock = field(default_factory=SystemClock)
    ids: IdSource = field(default_factory=RandomIds)
    webhook_base_url: str = "http://127.0.0.1:8787"
    services: dict[str, Any] = field(default_factory=dict)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """How the worker waits (a deadline under the Scheduler's precision, a retry backoff, the
    invocation's deadline): the same time as ``clock``. Tests and simulated twins pass theirs."""
    dead_letters: DeadLetters | None = None
    """Where the worker sets a wake aside on its last attempt (None: SQS's redrive only)."""
    max_receive_count: int | None = None
    """The wake queue's maxReceiveCount: the attempt that is a wake's last."""
    #: Principals allowed into every session besides its owner (see bide.service.owners).
    admin_principals: frozenset[str] = frozenset()
    lease_seconds: float | None = WORKER_LEASE_SECONDS
    """How long a worker run holds the tasks it runs (the engine's lease): a duplicate
    delivery of the wake leaves them alone meanwhile. None: no lease (takeover at once)."""
    webhook_keys: WebhookKeys = field(default_factory=process_keys)
    """The deployment key webhook tokens are derived under (:mod:`bide.tools.webhook_keys`):
    the functions read it from Secrets Manager, the local stack from its key file. The default,
    this process's random key, suits tests only."""
    ended_sessions: EndedSessions | None = None
    """Finishes ending sessions in a store that expires them (the functions' DynamoDB store:
    :mod:`bide.service.retention`); None: the store keeps every session (local, tests)."""

    def harness_services(self) -> dict[str, Any]:
        """What tasks may read through ``rt.services``."""
        return {
            "webhook_base_url": self.webhook_base_url,
            WEBHOOK_KEYS_SERVICE: self.webhook_keys,
            NONDETERMINISM_SINK: obs.workflow_nondeterminism,
            # Provider tokens for steps (bide.workflow.auth): sealed in this store under the
            # deployment key; a host may pass its own port in ``services``.
            AUTH_PROVIDERS_SERVICE: StoredAuthProviders(self.store, self.webhook_keys),
            **self.services,
        }
