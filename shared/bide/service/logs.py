"""The services' structured log: JSON lines on stdout, on the standard library alone.

Every line of the ``bide`` logger (and its children, ``bide.*``) is one JSON object:
``level``, ``location`` (function:line), ``message``, ``timestamp`` (UTC, ISO 8601 with
milliseconds), ``service``; inside a Lambda invocation (:func:`invocation`) ``cold_start``,
``function_name`` and ``function_request_id`` (and ``xray_trace_id`` when tracing is on);
the keys of the enclosing :func:`correlated` blocks (``session_id``, ``task_id``); the
record's ``extra=`` fields but those that are None; ``exception`` and ``exception_name`` for
``logger.exception``.
The field names are those of Powertools' Logger, which this replaces (its package root is
some 40 modules on every cold start), so log queries written for it still match.

The level comes from the environment, read once at import, in Powertools' order: Lambda's
advanced logging controls (``AWS_LAMBDA_LOG_LEVEL``, set by the function's application log
level) first, then ``POWERTOOLS_LOG_LEVEL``, then ``LOG_LEVEL``; INFO when none is set.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

#: Where the level is read from, first found wins.
LEVEL_ENVS = ("AWS_LAMBDA_LOG_LEVEL", "POWERTOOLS_LOG_LEVEL", "LOG_LEVEL")
# Lambda's level names (TRACE ... FATAL) next to Python's.
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
}
# What every LogRecord holds by itself: anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(
    {*logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "asctime"}
)

# The keys of the enclosing correlated() blocks: per asyncio task and thread, so concurrent
# requests served by one process (the local server) never see each other's keys.
_NO_KEYS: Mapping[str, str] = MappingProxyType({})
_correlated: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "bide_log_keys", default=_NO_KEYS
)
# The Lambda invocation's fields: one invocation at a time per execution environment, and
# a global is seen by every thread the invocation starts.
_invocation: dict[str, Any] = {}
_cold = True


def level_from_env(environ: Mapping[str, str]) -> int:
    """The log level the environment asks for (INFO when it asks for none). ValueError
    naming the variable for a value that is not a level."""
    for name in LEVEL_ENVS:
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        level = _LEVELS.get(raw.upper())
        if level is None:
            raise ValueError(f"{name}={raw!r} is not a log level: use one of {sorted(_LEVELS)}")
        return level
    return logging.INFO


class JsonFormatter(logging.Formatter):
    """One compact JSON object per record (see the module's docstring for the fields)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line (no newline)."""
        message: Any = record.msg if isinstance(record.msg, dict) else record.getMessage()
        line: dict[str, Any] = {
            "level": _LAMBDA_LEVEL_NAMES.get(record.levelname, record.levelname),
            "location": f"{record.funcName}:{record.lineno}",
            "message": message,
            "timestamp": _utc(record.created, record.msecs),
            "service": self.service,
        }
        line.update(_invocation)
        line.update(_correlated.get())
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and value is not None:  # as Powertools: no nulls
                line[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.exc_info and record.exc_info[0] is not None:
            line["exception_name"] = record.exc_info[0].__name__
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        # default=str: an extra field that JSON cannot hold is logged as its text.
        return json.dumps(line, separators=(",", ":"), default=str)


# ``level`` uses Lambda's names (TRACE DEBUG INFO WARN ERROR FATAL) rather than Python's
# WARNING and CRITICAL, which Lambda does not know and would file as INFO: so a function's
# application log level filters these lines as it means to ("Log-level filtering",
# https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html).
_LAMBDA_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL"}


# RFC 3339, as Lambda's JSON log format wants a stdout line's ``timestamp`` to use it (else it
# files the line as INFO and stamps it itself: same page).
def _utc(created: float, msecs: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(msecs):03d}Z"


class _NotOurs(logging.Filter):
    """On the root logger's handlers: drops the records of ``name`` and its children, which
    propagate there after their own handler wrote them (Lambda's runtime puts a handler on
    the root logger that would print each line a second time)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.prefix = name + "."
        self.exact = name

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the records of the service's loggers."""
        return not (record.name == self.exact or record.name.startswith(self.prefix))


def suppress_on_root(name: str) -> None:
    """Keep the records of logger ``name`` (and children) off the root logger's current
    handlers, pytest's log capture excepted (tests read records through it). Idempotent."""
    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "LogCaptureHandler":
            continue
        if not any(isinstance(f, _NotOurs) and f.exact == name for f in handler.filters):
            handler.addFilter(_NotOurs(name))


def service_logger(service: str) -> tuple[logging.Logger, logging.StreamHandler[Any]]:
    """The logger ``service`` and its handler (JSON lines to stdout), configured once per
    process: calling it again returns the same pair. The level from :func:`level_from_env`."""
    logger = logging.getLogger(service)
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler) and isinstance(
            handler.formatter, JsonFormatter
        ):
            return logger, handler
    stream: logging.StreamHandler[Any] = logging.StreamHandler(sys.stdout)
    stream.setFormatter(JsonFormatter(service))
    logger.addHandler(stream)
    logger.setLevel(level_from_env(os.environ))
    suppress_on_root(service)
    return logger, stream


@contextmanager
def correlated(**keys: str | None) -> Iterator[None]:
    """Log lines inside carry ``keys`` (None values are skipped); the enclosing values come
    back afterwards."""
    present = {k: v for k, v in keys.items() if v is not None}
    token = _correlated.set({**_correlated.get(), **present})
    try:
        yield
    finally:
        _correlated.reset(token)


def current_keys() -> dict[str, str]:
    """The correlated keys log lines carry here."""
    return dict(_correlated.get())


@contextmanager
def invocation(context: Any, *, trace_id: str | None = None) -> Iterator[None]:
    """Inside, every line carries the Lambda ``context``'s function name and request id and
    whether this is the execution environment's first invocation (``cold_start``), and no
    correlated key from before: the state is cleared per invocation, as it is after."""
    global _cold
    _invocation.clear()
    _invocation["cold_start"] = _cold
    _cold = False
    for field, attribute in (
        ("function_name", "function_name"),
        ("function_request_id", "aws_request_id"),
    ):
        value = getattr(context, attribute, None)
        if value is not None:
            _invocation[field] = value
    if trace_id:
        _invocation["xray_trace_id"] = trace_id
    token = _correlated.set(_NO_KEYS)
    try:
        yield
    finally:
        _correlated.reset(token)
        _invocation.clear()


def trace_id(environ: Mapping[str, str]) -> str | None:
    """The X-Ray trace id of the invocation (``Root=`` of ``_X_AMZN_TRACE_ID``), if any."""
    header = environ.get("_X_AMZN_TRACE_ID", "")
    for part in header.split(";"):
        key, _, value = part.partition("=")
        if key.strip() == "Root" and value:
            return value.strip()
    return None
