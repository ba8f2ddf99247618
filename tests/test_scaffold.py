"""``bide init DIR``: the files it writes, what it refuses, and the generated project working
(its own tests, CDK synthesis included, its demo and its lint) against this checkout's bide.

tests/test_wheel.py does the same from an installed wheel in a fresh venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bide.cli import EXIT_OK, EXIT_USAGE, main
from bide.scaffold import (
    Names,
    ProjectError,
    check_package,
    create_project,
    package_name,
    stack_name,
)

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {
    ".gitignore",
    "Makefile",
    "README.md",
    "cdk.json",
    "pyproject.toml",
    "infra/app.py",
    "my_agent/__init__.py",
    "my_agent/app.py",
    "my_agent/demo.py",
    "tests/test_app.py",
    "tests/test_infra.py",
}


def files_in(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_init_writes_the_project_from_the_templates(tmp_path, capsys):
    target = tmp_path / "my-agent"
    assert main(["init", str(target)]) == EXIT_OK
    assert files_in(target) == EXPECTED
    for path in target.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "{{" not in text and "__package__" not in text, path
    assert 'APP_MODULE = "my_agent.app:app"' in (target / "infra" / "app.py").read_text()
    assert 'STACK_NAME = "MyAgent"' in (target / "infra" / "app.py").read_text()
    assert 'define_signal("my_agent.review", 1, Review)' in (target / "my_agent/app.py").read_text()
    assert "\t$(PYTHON) -m my_agent.demo" in (target / "Makefile").read_text()
    out = capsys.readouterr().out
    assert all(str(Path(str(target)) / name) in out for name in EXPECTED)
    assert "make test" in out


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert main(["init", str(target)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "bide init:" in err and "is not empty (notes.txt)" in err
    assert files_in(target) == {"notes.txt"}
    assert (target / "notes.txt").read_text() == "mine"


def test_init_into_an_empty_folder_and_with_a_chosen_package(tmp_path):
    empty = tmp_path / "2fast"
    empty.mkdir()
    # "2fast" makes no package name: the error says so, and how to choose one.
    with pytest.raises(ProjectError, match="--package"):
        create_project(empty)
    assert not any(empty.iterdir())
    written = create_project(empty, package="fast_agent")
    assert Path("fast_agent/app.py") in written
    assert 'STACK_NAME = "Bide2fast"' in (empty / "infra" / "app.py").read_text()


def test_what_init_refuses_it_refuses_before_writing(tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(ProjectError, match="not a folder"):
        create_project(a_file)
    for name, reason in [
        ("class", "not a Python package name"),
        ("email", "the standard library one"),
        ("bide", "a module of its own"),
        ("tests", "a module of its own"),
    ]:
        with pytest.raises(ProjectError, match=reason):
            create_project(tmp_path / name)
        assert not (tmp_path / name).exists(), name
    assert main(["init", str(tmp_path / "x"), "--package", "not-a-name"]) == EXIT_USAGE
    assert "'not-a-name' is not a Python package name" in capsys.readouterr().err


def test_names_come_from_the_folder():
    assert package_name("My-Agent") == "my_agent"
    assert package_name("review bot!") == "review_bot"
    assert stack_name("my-agent") == "MyAgent"
    assert stack_name("review bot") == "ReviewBot"
    check_package("my_agent")


def test_a_template_naming_an_unknown_value_is_a_clear_error():
    names = Names(project="p", package="p", stack="P")
    assert names.fill("{{package}}.app:app in {{stack}}", where="t") == "p.app:app in P"
    with pytest.raises(ProjectError, match=r"template t names an unknown value \{\{nope\}\}"):
        names.fill("x {{nope}}", where="t")


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BIDE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT / "shared")  # this checkout's bide, as make test uses it
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_generated_project_passes_its_tests_runs_its_demo_and_is_lint_clean(tmp_path):
    project = tmp_path / "review-bot"
    create_project(project)
    # aws-cdk-lib is installed here, so the synthesis test runs too: nothing may be skipped.
    tests = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs"], project)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "7 passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]

    demo = run([sys.executable, "-m", "review_bot.demo"], project)
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "returned: 'approved: ship it'" in demo.stdout
    assert "the clock passed its deadline: Completed(" in demo.stdout

    for command in (["check", "."], ["format", "--check", "."]):
        lint = run([sys.executable, "-m", "ruff", *command], project)
        assert lint.returncode == 0, lint.stdout[-2000:]
