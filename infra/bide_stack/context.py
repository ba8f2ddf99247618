"""The repository app's settings from CDK context: ``cdk.json`` holds the defaults, ``-c
key=value`` overrides one (the CLI passes it as a string; cdk.json values are JSON).

:func:`read_settings` turns the ``bide:*`` context into the stack name, its environment and
the :class:`bide.cdk.BideService` props, and refuses anything it cannot use with an error
naming the key: an unknown ``bide:`` key (a typo would otherwise be ignored), a value of the
wrong type or out of range. Nothing is looked up in an AWS account.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_logs as logs

from bide.cdk.bundling import truthy

PREFIX = "bide:"


class ContextError(ValueError):
    """A ``bide:`` context value the app cannot use; the message names the key."""


@dataclass(frozen=True)
class Settings:
    """What the context asks for: the stack's name and environment, and BideService props."""

    stack_name: str = "Bide"
    account: str | None = None
    region: str | None = None
    service_options: dict[str, Any] = field(default_factory=dict)

    @property
    def env(self) -> cdk.Environment | None:
        """The stack's environment; None (environment-agnostic) when neither is set."""
        if self.account is None and self.region is None:
            return None
        return cdk.Environment(account=self.account, region=self.region)


def _text(pattern: str, what: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            raise ValueError(f"must be {what}")
        return value

    return parse


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return truthy(value)
    raise ValueError("must be true or false")


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not re.fullmatch(r"\s*-?\d+\s*", str(value)):
            raise ValueError(f"must be a whole number from {low} to {high}")
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"must be from {low} to {high}, not {number}")
        return number

    return parse


def _strings(value: Any) -> list[str]:
    # A JSON list (cdk.json, or -c key='["a","b"]') or a comma-separated string (-c key=a,b).
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("["):
            value = _json(stripped)
        else:
            return [part.strip() for part in stripped.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of strings (JSON) or a comma-separated string")
    return list(value)


def _counts(value: Any) -> dict[str, int]:
    # A JSON object (cdk.json, -c key='{"worker": 5}') or ``worker=5,api=2``.
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{"):
            value = _json(stripped)
        else:
            pairs = [part.partition("=") for part in stripped.split(",") if part.strip()]
            if any(not sep for _, sep, _ in pairs):
                raise ValueError("must look like worker=5,api=2 (or a JSON object)")
            value = {name.strip(): count.strip() for name, _, count in pairs}
    if not isinstance(value, dict):
        raise ValueError("must be an object of function name to a number")
    number = _integer(0, 1000)
    return {str(name): number(count) for name, count in value.items()}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc.msg})") from None


# CloudWatch Logs' retention periods, in days (RetentionInDays), by RetentionDays member.
_RETENTION = {
    1: "ONE_DAY", 3: "THREE_DAYS", 5: "FIVE_DAYS", 7: "ONE_WEEK", 14: "TWO_WEEKS",
    30: "ONE_MONTH", 60: "TWO_MONTHS", 90: "THREE_MONTHS", 120: "FOUR_MONTHS",
    150: "FIVE_MONTHS", 180: "SIX_MONTHS", 365: "ONE_YEAR", 400: "THIRTEEN_MONTHS",
    545: "EIGHTEEN_MONTHS", 731: "TWO_YEARS", 1096: "THREE_YEARS", 1827: "FIVE_YEARS",
    2192: "SIX_YEARS", 2557: "SEVEN_YEARS", 2922: "EIGHT_YEARS", 3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}  # fmt: skip


def _retention(value: Any) -> logs.RetentionDays:
    days = _integer(1, 3653)(value)
    if days not in _RETENTION:
        raise ValueError(
            f"must be a CloudWatch Logs retention period in days: {sorted(_RETENTION)}"
        )
    return getattr(logs.RetentionDays, _RETENTION[days])  # type: ignore[no-any-return]


def _seconds(low: int, high: int) -> Callable[[Any], cdk.Duration]:
    return lambda value: cdk.Duration.seconds(_integer(low, high)(value))


def _minutes(low: int, high: int) -> Callable[[Any], cdk.Duration]:
    return lambda value: cdk.Duration.minutes(_integer(low, high)(value))


def _days(low: int, high: int) -> Callable[[Any], cdk.Duration]:
    return lambda value: cdk.Duration.days(_integer(low, high)(value))


def _session_retention(value: Any) -> cdk.Duration | None:
    # 0 keeps ended sessions forever; otherwise BideService's own range (1 day to 10 years).
    days = _integer(0, 3650)(value)
    return None if days == 0 else cdk.Duration.days(days)


#: The stack's own keys: context key -> (Settings field, parser).
STACK_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    # CloudFormation stack names: a letter, then letters, digits and hyphens, at most 128.
    "bide:stackName": ("stack_name", _text(r"[A-Za-z][A-Za-z0-9-]{0,127}", "a stack name")),
    "bide:account": ("account", _text(r"\d{12}", "a 12-digit AWS account id")),
    "bide:region": ("region", _text(r"[a-z]{2}(-[a-z]+)+-\d", "an AWS region like us-east-1")),
}
#: BideService props: context key -> (prop, parser).
SERVICE_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "bide:tracing": ("tracing", _boolean),
    "bide:retainData": ("retain_data", _boolean),
    "bide:alarmEmail": ("alarm_email", _text(r"[^@\s]+@[^@\s]+\.[^@\s]+", "an e-mail address")),
    "bide:adminPrincipals": ("admin_principals", _strings),
    "bide:modelAccess": ("model_access", _strings),
    "bide:workerMaxConcurrency": ("worker_max_concurrency", _integer(2, 1000)),
    "bide:reservedConcurrency": ("reserved_concurrency", _counts),
    # Lambda: timeout at most 900 s, memory 128 to 10240 MB.
    "bide:workerTimeoutSeconds": ("worker_timeout", _seconds(30, 900)),
    "bide:workerMemorySize": ("worker_memory_size", _integer(128, 10240)),
    "bide:handlerMemorySize": ("handler_memory_size", _integer(128, 10240)),
    # SQS redrive policy: maxReceiveCount 1 to 1000.
    "bide:maxReceiveCount": ("max_receive_count", _integer(1, 1000)),
    "bide:wakeAgeAlarmMinutes": ("wake_age_alarm", _minutes(1, 20160)),
    "bide:logRetentionDays": ("log_retention", _retention),
    "bide:valueExpirationDays": ("value_expiration", _days(1, 36500)),
    "bide:sessionRetentionDays": ("session_retention", _session_retention),
}
#: Keys read elsewhere (``bide.cdk.bundling``), known here so they are not called typos.
OTHER_KEYS = {"bide:skipBundling": _boolean}


def known_keys() -> list[str]:
    """Every ``bide:`` context key the app reads."""
    return sorted([*STACK_KEYS, *SERVICE_KEYS, *OTHER_KEYS])


def read_settings(context: Mapping[str, Any]) -> Settings:
    """The settings ``context`` (all of an app's context) asks for; raises
    :class:`ContextError` naming the first bad ``bide:`` key."""
    unknown = sorted(k for k in context if k.startswith(PREFIX) and k not in known_keys())
    if unknown:
        raise ContextError(
            f"unknown context key {unknown[0]!r} (a typo?); the keys are: {', '.join(known_keys())}"
        )
    stack: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for table, into in ((STACK_KEYS, stack), (SERVICE_KEYS, options), (OTHER_KEYS, None)):
        for key, entry in table.items():
            value = context.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                continue  # unset (or -c key= to unset a cdk.json value)
            name, parse = entry if isinstance(entry, tuple) else (key, entry)
            try:
                parsed = parse(value)
            except ValueError as exc:
                raise ContextError(f"context {key}={value!r}: {exc}") from None
            if into is not None:
                into[name] = parsed
    return Settings(**stack, service_options=options)


def context_key_of(prop: str) -> str | None:
    """The context key that sets BideService's ``prop``, if any."""
    return next((k for k, (p, _) in SERVICE_KEYS.items() if p == prop), None)
