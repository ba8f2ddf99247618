"""A function's entry module imports its handler with the collector paused (bide.handlers.load):
no collection runs during the import, what it made is frozen, and the collector runs again
afterwards, also when the import fails."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bide.handlers import load

ROOT = Path(__file__).resolve().parents[1]

# In a fresh interpreter: count the collections that run while the entry module imports the
# handler (bide.handlers itself, a few small modules, first: what load() can pause starts after).
PROBE = """
import gc, json, sys
sys.path[:0] = json.loads(sys.argv[1])
import bide.handlers
runs = []
def seen(phase, info):
    if phase == "start":
        runs.append(info["generation"])
gc.callbacks.append(seen)
import handler
during = list(runs)
print(json.dumps({"collections": during, "enabled": gc.isenabled(),
                  "frozen": gc.get_freeze_count(), "handler": callable(handler.handler)}))
"""


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # load() freezes this test process's objects: let them go again
    gc.enable()


@pytest.mark.parametrize("function", ["worker", "signal", "api"])
def test_an_entry_modules_import_runs_no_collection_and_freezes_what_it_made(
    function: str,
) -> None:
    folders = json.dumps([str(ROOT / "functions" / function), str(ROOT / "shared")])
    done = subprocess.run(
        [sys.executable, "-c", PROBE, folders],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # Without the pause the import sets off a hundred collections, one of them a full one.
    assert found["collections"] == []
    assert found["enabled"] and found["handler"]
    assert found["frozen"] > 10_000  # the modules, classes and functions it made


def test_the_collector_runs_again_when_the_import_fails() -> None:
    assert gc.isenabled()
    with pytest.raises(ModuleNotFoundError):
        load("no_such_function")
    assert gc.isenabled()


def test_a_collector_paused_before_stays_paused() -> None:
    gc.disable()
    assert callable(load("worker"))
    assert not gc.isenabled()
