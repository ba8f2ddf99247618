"""Redaction of registered secrets (provider tokens) from what Bide records, logs and shows.

A provider token is handed to a step and nowhere else (design 000 §3.2: "a token never enters
the body's replay log"). A step can still leak it by accident: an exception whose message
quotes a request URL or a header, a result that embeds it. So every token the process handles
is *registered* here (the token store registers what it reads and what it stores), and the
points where text leaves a step or a tool pass through :func:`scrub`:

* a step's recorded attempt errors and final error, and a run's error (``bide.workflow``);
* every tool result before its commit: the outcome and the transcript entry the model reads
  (``bide.tools.task``);
* log records, through :class:`RedactingFilter` on the handlers of the root logger.

A secret is recognised in each encoding Bide's own code produces for a string: as is,
JSON-escaped (``json.dumps``, ASCII or not), ``repr`` of the string and of its UTF-8 bytes,
base64 (standard and URL-safe alphabets, at any of the three byte alignments, so a token inside
a larger encoded value such as ``Basic`` credentials is found too) and percent-encoded (every
reserved character encoded, or ``/`` kept, spaces as ``%20`` or ``+``). Every form is replaced
by :data:`REDACTED`. Secrets shorter than :data:`MIN_SECRET_CHARS` are not registered: they
would redact ordinary words.

The registry is per process and bounded (:data:`MAX_SECRETS`, least recently registered
forgotten first; every ``get_token`` registers again): a process only needs the secrets it
handled, because only it can leak them, and only while a step holds them. The bound keeps the
scan cheap: scrubbing checks every form against every string, about 30 ms per 100 KB of text
with 64 secrets registered (4 to 16 forms each), against 0.1 ms with one.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections import OrderedDict
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8
MAX_SECRETS = 64
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _percent(secret: str, safe: str, plus: bool) -> str:
    out = []
    for char in secret:
        if char in _UNRESERVED or char in safe:
            out.append(char)
        elif plus and char == " ":
            out.append("+")
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def _base64_cores(raw: bytes) -> set[str]:
    """The characters of ``raw``'s base64 that depend on ``raw`` alone, at each alignment in
    a larger value (offset 0, 1, 2 bytes): what any base64 text containing it must contain."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        start, end = (offset * 4 + 2) // 3, ((offset + len(raw)) * 4) // 3
        core = encoded[start:end]
        cores.add(core)
        cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def encodings(secret: str) -> set[str]:
    """Every form of ``secret`` that :func:`scrub` replaces."""
    raw = secret.encode("utf-8")
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(raw)[2:-1],
        _percent(secret, "", False),
        _percent(secret, "", True),
        _percent(secret, "/", False),
        _percent(secret, "/", True),
        *_base64_cores(raw),
    }
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


class Secrets:
    """A bounded registry of secrets and their encoded forms (thread-safe)."""

    def __init__(self, limit: int = MAX_SECRETS) -> None:
        self._limit = limit
        self._secrets: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._forms: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def register(self, secret: str) -> None:
        """Redact ``secret`` from now on (ignored when shorter than MIN_SECRET_CHARS)."""
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
            return
        with self._lock:
            if secret in self._secrets:
                self._secrets.move_to_end(secret)
                return
            self._secrets[secret] = frozenset(encodings(secret))
            while len(self._secrets) > self._limit:
                self._secrets.popitem(last=False)
            # Longest first: a form that contains another is replaced whole.
            every = {form for forms in self._secrets.values() for form in forms}
            self._forms = tuple(sorted(every, key=len, reverse=True))

    def forget_all(self) -> None:
        """Drop every registered secret (tests)."""
        with self._lock:
            self._secrets.clear()
            self._forms = ()

    def leaks(self, text: str) -> bool:
        """Whether ``text`` holds a registered secret in any form."""
        return any(form in text for form in self._forms)

    def leaks_value(self, value: Any) -> bool:
        """Whether any string (key or value) of a JSON value holds a registered secret: each
        string is checked as it is, so a JSON text nested in a string is seen unescaped."""
        if isinstance(value, str):
            return self.leaks(value)
        if isinstance(value, dict):
            return any(self.leaks_value(k) or self.leaks_value(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.leaks_value(v) for v in value)
        return False

    def scrub(self, text: str) -> str:
        """``text`` with every form of every registered secret replaced by REDACTED."""
        forms = self._forms
        if not forms or not any(form in text for form in forms):
            return text
        for form in forms:
            text = text.replace(form, REDACTED)
        return text

    def scrub_value(self, value: Any) -> Any:
        """A JSON value with every string (keys included) scrubbed."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub_value(k): self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_value(v) for v in value]
        return value


#: The process's registry: what the token store registers and every redaction point reads.
SECRETS = Secrets()


def register(secret: str) -> None:
    """Register ``secret`` in the process's registry."""
    SECRETS.register(secret)


def scrub(text: str) -> str:
    """``text`` without any registered secret."""
    return SECRETS.scrub(text)


def scrub_value(value: Any) -> Any:
    """A JSON value without any registered secret."""
    return SECRETS.scrub_value(value)


class RedactingFilter(logging.Filter):
    """Rewrites a log record that holds a registered secret: its message (arguments merged)
    and its exception text, scrubbed and folded into the message (formatters differ in how
    they print ``exc_info``; a folded text prints the same under all of them). A record with
    no secret is left as it is (a dict message stays a dict). Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub ``record`` in place when it leaks."""
        if not SECRETS._forms:
            return True
        message = record.getMessage()
        trace = record.exc_text or ""
        if record.exc_info and not trace:
            trace = logging.Formatter().formatException(record.exc_info)
        if not SECRETS.leaks(message) and not SECRETS.leaks(trace):
            return True
        text = SECRETS.scrub(message)
        if trace:
            text = f"{text}\n{SECRETS.scrub(trace)}"
        record.msg, record.args = text, None
        record.exc_info, record.exc_text = None, None
        return True


_FILTER = RedactingFilter()


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Put the redacting filter on every handler of ``logger`` (the root logger by default)
    and on the logger itself (records logged directly to it). Idempotent."""
    target = logger or logging.getLogger()
    if _FILTER not in target.filters:
        target.addFilter(_FILTER)
    for handler in target.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
