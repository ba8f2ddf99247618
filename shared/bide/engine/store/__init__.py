"""Stores: the :class:`Store` protocol, the embedded SQLite implementation and
:class:`StoreWrapper`, the pass-through base of store wrappers."""

from .base import MAX_COMMIT_ITEMS, Doc, SessionSnapshot, Store
from .sqlite import SQLiteStore
from .wrapper import StoreWrapper

__all__ = ["MAX_COMMIT_ITEMS", "Doc", "SQLiteStore", "SessionSnapshot", "Store", "StoreWrapper"]
