"""Stores: the :class:`Store` protocol, the embedded SQLite implementation and
:class:`StoreWrapper`, the pass-through base of store wrappers."""

from typing import TYPE_CHECKING, Any

from .base import MAX_COMMIT_ITEMS, Doc, SessionSnapshot, Store
from .wrapper import StoreWrapper

if TYPE_CHECKING:
    from .sqlite import SQLiteStore


if not TYPE_CHECKING:  # mypy checks names against the imports above

    def __getattr__(name: str) -> Any:
        # Imported on first use: a Lambda function stores in DynamoDB and never loads sqlite3.
        if name == "SQLiteStore":
            from .sqlite import SQLiteStore

            return SQLiteStore
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_COMMIT_ITEMS", "Doc", "SQLiteStore", "SessionSnapshot", "Store", "StoreWrapper"]
