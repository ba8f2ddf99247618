"""Stores: the :class:`Store` protocol and the embedded SQLite implementation."""

from .base import MAX_COMMIT_ITEMS, Doc, SessionSnapshot, Store
from .sqlite import SQLiteStore

__all__ = ["MAX_COMMIT_ITEMS", "Doc", "SQLiteStore", "SessionSnapshot", "Store"]
