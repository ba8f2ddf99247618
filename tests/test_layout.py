"""The layout rules of docs/architecture.md that import-linter does not check.

* No module over :data:`MAX_LINES` lines unless its top docstring says why it is long (a line
  starting ``Long because:``), so a god module cannot grow unnoticed.
* Every package folder under ``shared/bide`` is a real package (has ``__init__.py``): a folder
  without one is a namespace package that import-linter cannot see, so its imports would go
  unchecked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 500
CHECKED = ("shared", "functions", "infra", "tests", "bench", "examples", "scripts")
REASON = "Long because:"


def python_files() -> list[Path]:
    return sorted(
        p
        for folder in CHECKED
        for p in (ROOT / folder).rglob("*.py")
        if "cdk.out" not in p.parts and "node_modules" not in p.parts
    )


def long_without_reason(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    if text.count("\n") <= MAX_LINES:
        return False
    doc = ast.get_docstring(ast.parse(text)) or ""
    return not any(line.strip().startswith(REASON) for line in doc.splitlines())


def test_no_long_module_without_a_reason() -> None:
    offenders = [
        f"{p.relative_to(ROOT)} ({p.read_text(encoding='utf-8').count(chr(10))} lines)"
        for p in python_files()
        if long_without_reason(p)
    ]
    assert not offenders, (
        f"modules over {MAX_LINES} lines: split them by responsibility, or say why in a "
        f"'{REASON}' line of the top docstring: {offenders}"
    )


def test_the_rule_catches_a_long_module(tmp_path: Path) -> None:
    body = "\n".join(f"x{i} = {i}" for i in range(MAX_LINES + 1))
    plain = tmp_path / "plain.py"
    plain.write_text(f'"""A module."""\n{body}\n')
    explained = tmp_path / "explained.py"
    explained.write_text(f'"""A module.\n\n{REASON} one table.\n"""\n{body}\n')
    assert long_without_reason(plain)
    assert not long_without_reason(explained)


@pytest.mark.parametrize(
    "folder",
    sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "shared" / "bide").rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    ),
)
def test_every_package_folder_has_an_init(folder: str) -> None:
    assert (ROOT / folder / "__init__.py").is_file(), f"{folder} has no __init__.py"
