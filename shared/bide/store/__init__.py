"""Stores: the :class:`Store` protocol and the embedded SQLite implementation."""

from .base import SessionSnapshot, Store
from .sqlite import SQLiteStore

__all__ = ["SQLiteStore", "SessionSnapshot", "Store"]
