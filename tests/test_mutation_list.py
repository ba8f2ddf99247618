"""The mutation run's list stays true to the code: every mutant's text is where it says, once,
and names tests that exist (``make proof`` runs the mutants themselves; this keeps a
refactoring from silently turning one into a no-op)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "scripts/mutation_run.py")
assert _spec is not None and _spec.loader is not None
mutation_run = importlib.util.module_from_spec(_spec)
sys.modules["mutation_run"] = mutation_run  # dataclasses look their module up there
_spec.loader.exec_module(mutation_run)


@pytest.mark.parametrize("mutant", mutation_run.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_once_and_names_real_tests(mutant, tmp_path):
    source = ROOT / mutant.path
    assert source.read_text().count(mutant.find) == 1, mutant.name
    assert mutant.find != mutant.replace
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), test
    target = tmp_path / mutant.path
    target.parent.mkdir(parents=True)
    target.write_text(source.read_text())
    mutation_run.plant(tmp_path, mutant)
    assert target.read_text() != source.read_text()


def test_planting_refuses_text_that_is_not_there(tmp_path):
    mutant = mutation_run.MUTANTS[0]
    target = tmp_path / mutant.path
    target.parent.mkdir(parents=True)
    target.write_text("nothing to mutate here\n")
    with pytest.raises(SystemExit, match="occurs 0 times"):
        mutation_run.plant(tmp_path, mutant)
