"""What the host services need, wired once per process: store, alarms, wake queue, the app."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..aws.ports import Alarms, DeadLetters, EndedSessions, WakeQueue
from ..constants import AUTH_PROVIDERS_SERVICE, NONDETERMINISM_SINK, WORKER_LEASE_SECONDS
from ..engine.clock import Clock, SystemClock
from ..engine.ids import IdSource, RandomIds
from ..engine.store.base import Store
from ..engine.values import Value, value_class
from ..tools.webhook_keys import WEBHOOK_KEYS_SERVICE, WebhookKeys, process_keys
from . import observability as obs
from .auth_tokens import StoredAuthProviders

if TYPE_CHECKING:
    from ..app import App  # the app's tasks and tools: imported by whoever builds Deps


@value_class
class Deps(Value):
    """Everything a handler needs. Built from configuration by the function (AWS) or the
    local stack; tests build it directly. Fields may be reassigned; :meth:`replace` copies."""

    __slots__ = (
        "__weakref__",  # the HTTP functions keep a resolver per live Deps (bide.service.http)
        "admin_principals",
        "alarms",
        "app",
        "clock",
        "dead_letters",
        "ended_sessions",
        "ids",
        "lease_seconds",
        "max_receive_count",
        "queue",
        "services",
        "sleep",
        "store",
        "webhook_base_url",
        "webhook_keys",
    )
    store: Store
    alarms: Alarms
    queue: WakeQueue
    app: App
    clock: Clock
    ids: IdSource
    webhook_base_url: str
    services: dict[str, Any]
    sleep: Callable[[float], Awaitable[None]]
    """How the worker waits (a deadline under the Scheduler's precision, a retry backoff, the
    invocation's deadline): the same time as ``clock``. Tests and simulated twins pass theirs."""
    dead_letters: DeadLetters | None
    """Where the worker sets a wake aside on its last attempt (None: SQS's redrive only)."""
    max_receive_count: int | None
    """The wake queue's maxReceiveCount: the attempt that is a wake's last."""
    #: Principals allowed into every session besides its owner (see bide.service.owners).
    admin_principals: frozenset[str]
    lease_seconds: float | None
    """How long a worker run holds the tasks it runs (the engine's lease): a duplicate
    delivery of the wake leaves them alone meanwhile. None: no lease (takeover at once)."""
    webhook_keys: WebhookKeys
    """The deployment key webhook tokens are derived under (:mod:`bide.tools.webhook_keys`):
    the functions read it from Secrets Manager, the local stack from its key file. The default,
    this process's random key, suits tests only."""
    ended_sessions: EndedSessions | None
    """Finishes ending sessions in a store that expires them (the functions' DynamoDB store:
    :mod:`bide.service.retention`); None: the store keeps every session (local, tests)."""

    def __init__(
        self,
        store: Store,
        alarms: Alarms,
        queue: WakeQueue,
        app: App,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        webhook_base_url: str = "http://127.0.0.1:8787",
        services: dict[str, Any] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        dead_letters: DeadLetters | None = None,
        max_receive_count: int | None = None,
        admin_principals: frozenset[str] = frozenset(),
        lease_seconds: float | None = WORKER_LEASE_SECONDS,
        webhook_keys: WebhookKeys | None = None,
        ended_sessions: EndedSessions | None = None,
    ) -> None:
        # None for clock, ids, services and webhook_keys: a new one each (the system clock,
        # random ids, no services, this process's key), as their default factories made.
        self.store = store
        self.alarms = alarms
        self.queue = queue
        self.app = app
        self.clock = SystemClock() if clock is None else clock
        self.ids = RandomIds() if ids is None else ids
        self.webhook_base_url = webhook_base_url
        self.services = {} if services is None else services
        self.sleep = sleep
        self.dead_letters = dead_letters
        self.max_receive_count = max_receive_count
        self.admin_principals = admin_principals
        self.lease_seconds = lease_seconds
        self.webhook_keys = process_keys() if webhook_keys is None else webhook_keys
        self.ended_sessions = ended_sessions

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
