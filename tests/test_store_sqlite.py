"""The store contract on the embedded SQLite store: in memory, and on a file shared by two
connections (what two processes on one machine would hold)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("store_contract", "store_contract_absent")

from store_contract import StoreContract  # noqa: E402

from bide.engine.store import SQLiteStore  # noqa: E402


class TestSQLiteInMemory(StoreContract):
    @pytest.fixture
    def store(self) -> Iterator[SQLiteStore]:
        store = SQLiteStore(":memory:")
        yield store
        store.close()


class TestSQLiteFile(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteStore]:
        store = SQLiteStore(str(tmp_path / "bide.db"))
        yield store
        store.close()

    @pytest.fixture
    def other_store(self, tmp_path: Path, store: SQLiteStore) -> Iterator[SQLiteStore]:
        other = SQLiteStore(str(tmp_path / "bide.db"))
        yield other
        other.close()
