"""What the bundles are checked and compiled with: the layer's installed versions against the
pins (:func:`check_pins`), and a CPython 3.12 to precompile bytecode with
(:func:`bytecode_python`, :func:`compile_tree`). Used by :mod:`bide.cdk.bundling`."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: A CPython 3.12 interpreter used to precompile bytecode (optional; see ``compile_tree``).
BYTECODE_PYTHON_ENV = "BIDE_BYTECODE_PYTHON"
PYTHON_VERSION = "3.12"
#: The SDK the layer ships at the locked version (see :mod:`bide.cdk.bundling`).
SDK_REQUIREMENTS = ("boto3", "botocore")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_uv() -> str | None:
    """uv beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def installed_versions(target: Path) -> dict[str, str]:
    """Normalized name -> version of every distribution installed in ``target`` (from its
    ``*.dist-info/METADATA``)."""
    found: dict[str, str] = {}
    for metadata in target.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1)
            for line in metadata.read_text(errors="replace").splitlines()[:20]
            if ": " in line
        )
        if "Name" in fields and "Version" in fields:
            found[_normalize(fields["Name"])] = fields["Version"].strip()
    return found


def check_pins(target: Path, constraints: Sequence[str]) -> None:
    """Refuse a layer whose installed boto3/botocore (or any pinned distribution it holds)
    is not at the pinned version: the layer must ship what the tests ran with."""
    installed = installed_versions(target)
    wrong = []
    for pin in constraints:
        name, _, version = pin.partition("==")
        have = installed.get(_normalize(name))
        if have is not None and have != version:
            wrong.append(f"{name} {have} (pinned {version})")
    missing = [sdk for sdk in SDK_REQUIREMENTS if sdk not in installed]
    if wrong or missing:
        problems = [*wrong, *(f"{name} not installed" for name in missing)]
        raise RuntimeError(
            "bide: the layer does not hold the tested dependency versions: "
            + "; ".join(problems)
            + ". Check the installer's index or mirror, and requirements.lock.txt"
        )


def _interpreter_candidates() -> list[str]:
    # The explicit choice, PATH, then pyenv's and uv's own installs (found without a
    # download: UV_PYTHON_DOWNLOADS=never).
    found = [os.environ.get(BYTECODE_PYTHON_ENV) or "", shutil.which("python3.12") or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found.extend(str(p) for p in sorted(pyenv.glob("versions/3.12*/bin/python3.12"), reverse=True))
    uv = find_uv()
    if uv is not None:
        done = subprocess.run(
            [uv, "python", "find", "--no-project", PYTHON_VERSION],
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"),
        )
        found.append(done.stdout.strip() if done.returncode == 0 else "")
    return [f for f in found if f]


@functools.cache
def bytecode_python() -> str | None:
    """A CPython 3.12 (same bytecode magic as Lambda's runtime), if this machine has one:
    ``$BIDE_BYTECODE_PYTHON``, ``python3.12`` on PATH, a pyenv install, or one uv knows."""
    probe = "import sys; print(sys.implementation.name, '%d.%d' % sys.version_info[:2])"
    for candidate in _interpreter_candidates():
        try:
            found = subprocess.run(
                [candidate, "-c", probe], capture_output=True, text=True, check=False
            )
        except OSError:
            continue  # not there, or not runnable: the next candidate
        if found.returncode == 0 and found.stdout.split() == ["cpython", PYTHON_VERSION]:
            return candidate
    return None


def compile_tree(root: Path) -> None:
    # Lambda's code and layer folders are read-only, so without shipped bytecode every cold
    # start compiles every imported module. "unchecked-hash" .pyc files stay valid whatever
    # the zip's timestamps are. Without a local 3.12 the bundle ships sources only.
    python = bytecode_python()
    if python is None:
        return
    command = [python, "-m", "compileall", "-q", "-j", "0"]
    subprocess.run([*command, "--invalidation-mode", "unchecked-hash", str(root)], check=True)


@functools.cache
def warn_no_bytecode() -> None:
    print(
        f"bide: no Python {PYTHON_VERSION} found (set {BYTECODE_PYTHON_ENV}); "
        "bundles ship sources without bytecode (slower cold starts)",
        file=sys.stderr,
    )
