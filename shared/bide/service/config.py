"""A function's configuration: its settings (:mod:`bide.service.settings`, environment
variables read and validated once per cold start) and the :class:`~bide.service.deps.Deps`
built from them.

Minting or checking a webhook needs ``BIDE_WEBHOOK_KEY_SECRET`` (the Secrets Manager secret
holding the key webhook tokens are derived under: :mod:`bide.aws.webhook_keys`); a function
without the scheduler settings gets alarms that refuse to arm, saying what to set. AWS clients
are created on first use and once per process: a function that never arms an alarm never pays
for a Scheduler client.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..constants import ENV_APP, ENV_WEBHOOK_KEY_SECRET
from ..engine.errors import BideError
from .deps import Deps
from .owners import parse_admins
from .settings import ALARM_VARIABLES, ConfigError, Settings, settings_from_env

__all__ = [
    "ConfigError",
    "LazyClient",
    "Settings",
    "deps_from_env",
    "settings_from_env",
]


class LazyClient:
    """A boto3 client created on first use (then shared by every user in the process), so
    importing and configuring a function costs no client it never calls."""

    def __init__(self, service: str, *, sdk_retries: bool = True) -> None:
        self.service = service
        self.sdk_retries = sdk_retries
        self._client: Any = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.client, name)

    @property
    def client(self) -> Any:
        """The real client (created now if needed)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = _new_client(self.service, sdk_retries=self.sdk_retries)
        return self._client


def _new_client(service: str, *, sdk_retries: bool) -> Any:
    import boto3
    from botocore.config import Config

    # The DynamoDB store runs its own retry loop (it decides what is safe to resend), so its
    # clients make one attempt each; SQS and Scheduler calls use the SDK's standard retries.
    attempts = 3 if sdk_retries else 1
    config = Config(
        retries={"mode": "standard", "total_max_attempts": attempts},
        connect_timeout=5,
        read_timeout=10,
    )
    return boto3.client(service, config=config)  # type: ignore[call-overload]


class _WebhookKeysNotConfigured:
    """Stands in for the webhook key when no secret is configured: minting or checking a
    webhook then fails, saying which variable to set (the stack always sets it)."""

    def current(self) -> bytes:
        """Refuse: no webhook key secret is configured."""
        raise ConfigError(f"webhooks need a key: set {ENV_WEBHOOK_KEY_SECRET}")

    def accepted(self) -> list[bytes]:
        """Refuse: no webhook key secret is configured."""
        raise ConfigError(f"webhooks need a key: set {ENV_WEBHOOK_KEY_SECRET}")


class _AlarmsNotConfigured:
    """Stands in for the Scheduler in functions that never arm (signal, api)."""

    def arm(self, session_id: str, at: float) -> bool:
        """Refuse: this function has no scheduler settings."""
        raise ConfigError(_no_alarms())

    def disarm(self, session_id: str) -> None:
        """Refuse: this function has no scheduler settings."""
        raise ConfigError(_no_alarms())


def _no_alarms() -> str:
    return f"this function cannot arm alarms: set {', '.join(ALARM_VARIABLES)}"


def deps_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    require_alarms: bool = False,
    settings: Settings | None = None,
) -> Deps:
    """Build a function's :class:`Deps` from its environment (or from ``settings``): the
    DynamoDB store (S3 offload to the bucket; commit conflicts counted; ended sessions kept
    ``BIDE_RETENTION_SECONDS``), the SQS wake queue,
    Scheduler alarms when configured, and the app named by ``BIDE_APP``."""
    # Imported here, not at the top: the app pulls in what its tasks use, and the AWS
    # adapters import botocore; a function pays for them when it first configures itself.
    from ..app import load_app
    from ..aws.dynamodb import DynamoDBStore
    from ..aws.scheduler import SchedulerAlarms
    from ..aws.sqs import SqsDeadLetters, SqsWakeQueue
    from ..aws.webhook_keys import SecretsManagerWebhookKeys
    from ..engine.ids import RandomIds
    from .observability import ObservedStore

    if settings is None:
        settings = settings_from_env(environ, require_alarms=require_alarms)
    store = DynamoDBStore(
        settings.table,
        client=LazyClient("dynamodb", sdk_retries=False),  # type: ignore[arg-type]
        bucket=settings.bucket,
        s3_client=LazyClient("s3", sdk_retries=False),  # type: ignore[arg-type]
    )
    store.set_retention(settings.retention_seconds or None)
    ids = RandomIds()
    sqs = LazyClient("sqs")
    alarms: Any = _AlarmsNotConfigured()
    if settings.has_alarms:
        assert settings.schedule_group and settings.queue_arn and settings.scheduler_role_arn
        alarms = SchedulerAlarms(
            LazyClient("scheduler"),
            group=settings.schedule_group,
            queue_arn=settings.queue_arn,
            role_arn=settings.scheduler_role_arn,
            ids=ids,
            dead_letter_arn=settings.schedule_dlq_arn,
        )
    keys: Any = _WebhookKeysNotConfigured()
    if settings.webhook_key_secret is not None:
        keys = SecretsManagerWebhookKeys(settings.webhook_key_secret, LazyClient("secretsmanager"))
    try:
        app = load_app(settings.app)
    except BideError as exc:
        raise ConfigError(f"{ENV_APP}={settings.app!r}: {exc}") from exc
    return Deps(
        store=ObservedStore(store),
        alarms=alarms,
        queue=SqsWakeQueue(sqs, settings.queue_url),
        app=app,
        ids=ids,
        webhook_base_url=settings.webhook_base_url.rstrip("/"),
        dead_letters=(
            None
            if settings.dead_letter_url is None
            else SqsDeadLetters(sqs, settings.dead_letter_url)
        ),
        max_receive_count=settings.max_receive_count,
        admin_principals=parse_admins(settings.admin_principals),
        webhook_keys=keys,
        ended_sessions=store,
    )
