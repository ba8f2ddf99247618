"""A function's settings: the environment variables it reads, each checked once per cold
start by a plain rule of its own, into a frozen :class:`Settings`.

Every function needs ``BIDE_APP``, ``BIDE_TABLE``, ``BIDE_BUCKET`` and
``BIDE_WAKE_QUEUE_URL``. The scheduler variables (:data:`ALARM_VARIABLES`) come together or not
at all; only the worker arms alarms, so only the worker requires them
(``settings_from_env(require_alarms=True)``). :mod:`bide.service.config` builds a function's
dependencies from these settings and is where callers import them from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ..constants import (
    DEFAULT_SAFETY_MARGIN_MS,
    ENV_ADMIN_PRINCIPALS,
    ENV_APP,
    ENV_BUCKET,
    ENV_DEAD_LETTER_URL,
    ENV_MAX_RECEIVE_COUNT,
    ENV_QUEUE_ARN,
    ENV_QUEUE_URL,
    ENV_RETENTION_SECONDS,
    ENV_SAFETY_MARGIN_MS,
    ENV_SCHEDULE_DLQ_ARN,
    ENV_SCHEDULE_GROUP,
    ENV_SCHEDULER_ROLE_ARN,
    ENV_TABLE,
    ENV_TRACING,
    ENV_WEBHOOK_BASE_URL,
    ENV_WEBHOOK_KEY_SECRET,
)
from ..engine.errors import BideError
from ..engine.values import FrozenValue, frozen_value


@frozen_value
class _Rule(FrozenValue):
    """How one setting is read: its variable, what it must hold (for messages), and the
    checks its value must pass (a text setting: ``pattern`` and lengths; a number: a range)."""

    __slots__ = (
        "highest",
        "lowest",
        "max_length",
        "meaning",
        "min_length",
        "number",
        "pattern",
        "required",
        "var",
    )
    var: str
    meaning: str
    required: bool
    number: bool
    pattern: str | None
    min_length: int | None
    max_length: int | None
    lowest: int | None
    highest: int | None

    def __init__(
        self,
        var: str,
        meaning: str,
        required: bool = False,
        number: bool = False,
        pattern: str | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        lowest: int | None = None,
        highest: int | None = None,
    ) -> None:
        for name, value in (
            ("var", var),
            ("meaning", meaning),
            ("required", required),
            ("number", number),
            ("pattern", pattern),
            ("min_length", min_length),
            ("max_length", max_length),
            ("lowest", lowest),
            ("highest", highest),
        ):
            object.__setattr__(self, name, value)


# Field of Settings <- its rule. Plain checks, not a validation library: the settings are read
# on every cold start, and importing one costs more than the whole check (docs/performance.md d).
_RULES: dict[str, _Rule] = {
    "app": _Rule(
        ENV_APP,
        "'package.module:attribute' naming the bide.App to run",
        required=True,
        pattern=r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*",
    ),
    "table": _Rule(
        ENV_TABLE, "the DynamoDB table of sessions", required=True, min_length=3, max_length=255
    ),
    "bucket": _Rule(
        ENV_BUCKET, "the S3 bucket for large values", required=True, min_length=3, max_length=63
    ),
    "queue_url": _Rule(
        ENV_QUEUE_URL, "the URL of the SQS FIFO wake queue", required=True, pattern=r"https?://\S+"
    ),
    "queue_arn": _Rule(
        ENV_QUEUE_ARN,
        "the ARN of the same queue (the Scheduler's target)",
        pattern=r"arn:[\w-]+:sqs:\S+\.fifo",
    ),
    "schedule_group": _Rule(
        ENV_SCHEDULE_GROUP,
        "the EventBridge Scheduler group of session alarms",
        min_length=1,
        max_length=64,
    ),
    "scheduler_role_arn": _Rule(
        ENV_SCHEDULER_ROLE_ARN,
        "the role the Scheduler assumes to send",
        pattern=r"arn:[\w-]+:iam::\S+",
    ),
    "webhook_base_url": _Rule(
        ENV_WEBHOOK_BASE_URL, "the public base URL of the HTTP API", pattern=r"https?://\S+"
    ),
    "tracing": _Rule(ENV_TRACING, "'1' to turn X-Ray tracing on, '0' or unset for off"),
    "safety_margin_ms": _Rule(
        ENV_SAFETY_MARGIN_MS,
        "milliseconds before the timeout to stop",
        number=True,
        lowest=0,
        highest=900_000,
    ),
    "dead_letter_url": _Rule(
        ENV_DEAD_LETTER_URL,
        "the URL of the wake queue's dead-letter queue",
        pattern=r"https?://\S+",
    ),
    # SQS's redrive policy takes a maxReceiveCount of 1 to 1,000.
    "max_receive_count": _Rule(
        ENV_MAX_RECEIVE_COUNT,
        "the wake queue's maxReceiveCount (1-1000)",
        number=True,
        lowest=1,
        highest=1000,
    ),
    "admin_principals": _Rule(
        ENV_ADMIN_PRINCIPALS,
        "comma-separated IAM principal ARNs",
        pattern=r"(arn:[^,\s]+)?(\s*,\s*arn:[^,\s]+)*",
    ),
    # A standard queue: Scheduler refuses a FIFO dead-letter queue.
    "schedule_dlq_arn": _Rule(
        ENV_SCHEDULE_DLQ_ARN,
        "the ARN of the schedules' standard SQS DLQ",
        pattern=r"arn:[\w-]+:sqs:[\w:-]+",
    ),
    # Secrets Manager takes a name (1-512 of these characters) or an ARN.
    "webhook_key_secret": _Rule(
        ENV_WEBHOOK_KEY_SECRET,
        "the Secrets Manager secret (name or ARN) holding the webhook key",
        pattern=r"[\w/+=.@:-]+",
        max_length=2048,
    ),
    # DynamoDB ignores TTL values more than five years in the past; a retention is never
    # negative, and ten years is far beyond any sane one (a typo guard).
    "retention_seconds": _Rule(
        ENV_RETENTION_SECONDS,
        "seconds an ended session is kept (0: forever), a whole number",
        number=True,
        lowest=0,
        highest=10 * 366 * 86_400,
    ),
}
_ALARM_FIELDS = ("queue_arn", "schedule_group", "scheduler_role_arn")
#: The scheduler's variables, which come together (the worker requires them).
ALARM_VARIABLES: tuple[str, ...] = tuple(_RULES[n].var for n in _ALARM_FIELDS)
#: A whole number as a variable holds one: ASCII digits, maybe signed (int() would also take
#: "1_000", other scripts' digits and surrounding blanks).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHOWN = 80  # characters of a refused value quoted in a message


_set = object.__setattr__  # the one place a frozen Settings is written


class ConfigError(BideError):
    """The function's environment is incomplete or invalid; the message names each variable
    and says why. Fix the deployment: retrying cannot help."""


@frozen_value
class Settings(FrozenValue):
    """What a function reads from its environment: built by :func:`settings_from_env`, which
    checks every value (each field's variable and checks are in ``_RULES``). Frozen, keyword
    arguments only; not a ``@dataclass``, whose build is a cold-start cost
    (:mod:`bide.engine.values`)."""

    __slots__ = (
        "admin_principals",
        "app",
        "bucket",
        "dead_letter_url",
        "max_receive_count",
        "queue_arn",
        "queue_url",
        "retention_seconds",
        "safety_margin_ms",
        "schedule_dlq_arn",
        "schedule_group",
        "scheduler_role_arn",
        "table",
        "tracing",
        "webhook_base_url",
        "webhook_key_secret",
    )
    app: str
    table: str
    bucket: str
    queue_url: str
    queue_arn: str | None
    schedule_group: str | None
    scheduler_role_arn: str | None
    webhook_base_url: str
    tracing: bool
    safety_margin_ms: int
    dead_letter_url: str | None
    max_receive_count: int | None
    admin_principals: str
    schedule_dlq_arn: str | None
    webhook_key_secret: str | None
    retention_seconds: int

    def __init__(
        self,
        *,
        app: str,
        table: str,
        bucket: str,
        queue_url: str,
        queue_arn: str | None = None,
        schedule_group: str | None = None,
        scheduler_role_arn: str | None = None,
        webhook_base_url: str = "",
        tracing: bool = False,
        safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
        dead_letter_url: str | None = None,
        max_receive_count: int | None = None,
        admin_principals: str = "",
        schedule_dlq_arn: str | None = None,
        webhook_key_secret: str | None = None,
        retention_seconds: int = 0,
    ) -> None:
        _set(self, "app", app)
        _set(self, "table", table)
        _set(self, "bucket", bucket)
        _set(self, "queue_url", queue_url)
        _set(self, "queue_arn", queue_arn)
        _set(self, "schedule_group", schedule_group)
        _set(self, "scheduler_role_arn", scheduler_role_arn)
        _set(self, "webhook_base_url", webhook_base_url)
        _set(self, "tracing", tracing)
        _set(self, "safety_margin_ms", safety_margin_ms)
        _set(self, "dead_letter_url", dead_letter_url)
        _set(self, "max_receive_count", max_receive_count)
        _set(self, "admin_principals", admin_principals)
        _set(self, "schedule_dlq_arn", schedule_dlq_arn)
        _set(self, "webhook_key_secret", webhook_key_secret)
        _set(self, "retention_seconds", retention_seconds)

    @property
    def has_alarms(self) -> bool:
        """Whether the Scheduler settings are present (the worker needs them)."""
        return self.schedule_group is not None


def settings_from_env(
    environ: Mapping[str, str] | None = None, *, require_alarms: bool = False
) -> Settings:
    """Read and validate the settings; raises :class:`ConfigError` naming each bad or
    missing variable and why. Empty variables count as unset."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, rule in _RULES.items():
        raw = env.get(rule.var, "").strip()
        if not raw:
            if rule.required:
                problems.append(f"{rule.var} ({rule.meaning}): required, but not set")
            continue
        if name == "tracing":
            # Only "1" switches tracing on; anything but "0" is a typo worth refusing.
            if raw not in ("0", "1"):
                raise ConfigError(f"{ENV_TRACING}={raw!r}: must be '1' or '0'")
            values[name] = raw == "1"
            continue
        try:
            values[name] = _checked(rule, raw)
        except ValueError as exc:
            problems.append(f"{rule.var} ({rule.meaning}): {exc}")
    given = [name for name in _ALARM_FIELDS if name in values]
    if given and len(given) != len(_ALARM_FIELDS):
        missing = ", ".join(_RULES[n].var for n in _ALARM_FIELDS if n not in given)
        problems.append(f"the scheduler settings come together: also set {missing}")
    if problems:
        raise ConfigError("invalid function configuration: " + "; ".join(problems))
    settings = Settings(**values)
    if require_alarms and not settings.has_alarms:
        raise ConfigError(f"this function arms alarms: set {', '.join(ALARM_VARIABLES)}")
    return settings


def _checked(rule: _Rule, raw: str) -> str | int:
    """``raw`` as the setting ``rule`` reads; raises ValueError saying why not."""
    shown = repr(raw if len(raw) <= _SHOWN else raw[:_SHOWN] + "...")
    if rule.number:
        if not _INTEGER.fullmatch(raw):
            raise ValueError(f"{shown} is not a whole number")
        number = int(raw)
        if rule.lowest is not None and number < rule.lowest:
            raise ValueError(f"{number} is below the least allowed, {rule.lowest}")
        if rule.highest is not None and number > rule.highest:
            raise ValueError(f"{number} is above the most allowed, {rule.highest}")
        return number
    if rule.min_length is not None and len(raw) < rule.min_length:
        raise ValueError(f"{shown} is shorter than {rule.min_length} characters")
    if rule.max_length is not None and len(raw) > rule.max_length:
        raise ValueError(f"{len(raw)} characters, more than {rule.max_length}")
    if rule.pattern is not None and not re.fullmatch(rule.pattern, raw):
        raise ValueError(f"{shown} does not have that form (it must match {rule.pattern})")
    return raw
