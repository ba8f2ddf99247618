"""``bide init DIR``: a new project for your own tools, tasks and agent, from the templates in
this package's ``template/`` folder.

The project (see its README.md) holds an app module with a tool that parks on a capability
webhook and a task that sleeps, tests that drive both with :mod:`bide.testing` and a manual
clock, a demo, and a CDK app that deploys the app with :class:`bide.cdk.BideService`.

A template file is ``<path>.tmpl``; the folder ``__package__`` becomes the project's Python
package and ``gitignore`` becomes ``.gitignore``. In the text, ``{{package}}`` is the package
name, ``{{project}}`` the folder's name and ``{{stack}}`` the CDK stack's name. Nothing is
written into a folder that already holds anything.
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from ..engine.errors import BideError

TEMPLATE_SUFFIX = ".tmpl"
PACKAGE_FOLDER = "__package__"
RENAMED = {"gitignore": ".gitignore"}
# Names a generated package must not take: it would hide bide itself or the project's own
# folders on sys.path.
RESERVED = frozenset({"bide", "tests", "infra", "test"})
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class ProjectError(BideError):
    """A project cannot be created where or as asked; the message says why."""


@dataclass(frozen=True)
class Names:
    """What the templates are filled with."""

    project: str
    package: str
    stack: str

    def fill(self, text: str, *, where: str) -> str:
        """``text`` with every ``{{name}}`` replaced; an unknown name is a template bug."""
        values = {"project": self.project, "package": self.package, "stack": self.stack}

        def value(match: re.Match[str]) -> str:
            if match.group(1) not in values:
                raise ProjectError(f"template {where} names an unknown value {match.group(0)}")
            return values[match.group(1)]

        return _PLACEHOLDER.sub(value, text)


def package_name(project: str) -> str:
    """The Python package a project folder's name suggests: lower case, ``-`` and other
    non-identifier characters as ``_`` (``My-Agent`` -> ``my_agent``)."""
    return re.sub(r"\W+", "_", project).strip("_").lower()


def check_package(package: str) -> None:
    """Raise :class:`ProjectError` unless ``package`` can be the project's package."""
    if not package.isidentifier() or keyword.iskeyword(package):
        raise ProjectError(
            f"{package!r} is not a Python package name: pass --package NAME "
            "(letters, digits and _, not starting with a digit)"
        )
    if package in RESERVED or package in sys.stdlib_module_names:
        raise ProjectError(
            f"a package named {package!r} would hide "
            f"{'a module of its own' if package in RESERVED else 'the standard library one'}: "
            "pass --package NAME"
        )


def stack_name(project: str) -> str:
    """A CloudFormation stack name from the folder's name (``my-agent`` -> ``MyAgent``)."""
    words = re.findall(r"[A-Za-z0-9]+", project)
    name = "".join(w[:1].upper() + w[1:] for w in words)
    if not name or not name[0].isalpha():
        name = "Bide" + name
    return name[:128]


def templates() -> Traversable:
    """The template folder (inside the installed package or the repository)."""
    return resources.files(__name__).joinpath("template")


def _walk(folder: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    found: list[tuple[tuple[str, ...], str]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            found.extend(_walk(entry, (*prefix, entry.name)))
        elif entry.name.endswith(TEMPLATE_SUFFIX):
            found.append(((*prefix, entry.name), entry.read_text(encoding="utf-8")))
    return found


def _target(parts: tuple[str, ...], names: Names) -> Path:
    renamed = [names.package if p == PACKAGE_FOLDER else p for p in parts]
    leaf = renamed[-1].removesuffix(TEMPLATE_SUFFIX)
    renamed[-1] = RENAMED.get(leaf, leaf)
    return Path(*renamed)


def create_project(directory: str | Path, *, package: str | None = None) -> list[Path]:
    """Write a new project into ``directory`` (created if missing; it must be empty) and return
    the files written, relative to it. ``package`` defaults to :func:`package_name` of the
    folder's name. Raises :class:`ProjectError` for a non-empty folder, a file in the way or
    an unusable package name, before anything is written."""
    root = Path(directory).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise ProjectError(f"{directory} exists and is not a folder")
    if root.is_dir():
        present = sorted(p.name for p in root.iterdir())
        if present:
            shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
            raise ProjectError(
                f"{directory} is not empty ({shown}); bide init writes a new project into a "
                "new or empty folder"
            )
    names = Names(
        project=root.name,
        package=package if package is not None else package_name(root.name),
        stack=stack_name(root.name),
    )
    check_package(names.package)
    # Fill every template before writing one, so a broken template leaves nothing behind.
    files = [
        (_target(parts, names), names.fill(text, where="/".join(parts)))
        for parts, text in _walk(templates())
    ]
    for relative, text in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return [relative for relative, _ in files]
