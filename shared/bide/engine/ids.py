"""Ids as a port: the engine never invents randomness of its own."""

from __future__ import annotations

import hashlib
import itertools
import secrets
from typing import Protocol


class IdSource(Protocol):
    """Makes fresh ids for tasks and invocations."""

    def new_id(self, prefix: str) -> str:
        """A new id that starts with ``prefix``."""
        ...


class RandomIds:
    """128-bit random ids (the production default)."""

    def new_id(self, prefix: str) -> str:
        """``prefix`` followed by 32 hex digits from the OS's CSPRNG."""
        return f"{prefix}{secrets.token_hex(16)}"


class SequentialIds:
    """Predictable ids for tests and examples: ``t1``, ``t2``, ..."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        """``prefix`` followed by the next integer."""
        return f"{prefix}{next(self._counter)}"


def keyed_id(prefix: str, *parts: str) -> str:
    """A stable id derived from a creation key, so creating by key twice finds the same task."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]
    return f"{prefix}k{digest}"
