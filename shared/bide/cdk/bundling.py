"""Offline Lambda bundling without Docker.

CDK's ``BundlingOptions(local=...)`` runs these bundlers on the synthesizing machine:

* each function's code asset = a two-line ``handler.py`` that imports the function's handler
  from :mod:`bide.handlers`, the ``bide`` package (less :mod:`bide.cdk` and
  :mod:`bide.scaffold`, which never run in Lambda) + the app's own modules (copied, no
  install);
* one shared layer = the runtime dependencies, boto3 and botocore included, installed for
  Lambda's platform (``manylinux2014_aarch64``, CPython 3.12) with ``uv pip`` or ``pip`` into
  ``python/``, then checked against the pins (:func:`check_pins`).

The layer ships its own boto3/botocore, at the version the tests ran with, rather than the
one the Lambda runtime happens to include: the runtime's copy changes without notice (AWS
updates it with the runtime; https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html
recommends packaging the SDK with the function for full control of the version). A layer's
``python/`` folder comes before the runtime's own packages on ``sys.path``
(https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html), so the pinned copy is
the one imported. Both bundles get bytecode compiled by a CPython 3.12 when one is at
hand (``_bytecode_python``).

Both come from the ``bide`` this module belongs to: in a checkout of the repository
(``shared/bide`` beside a ``pyproject.toml`` naming the project ``bide``) the layer's
requirements are the project's dependencies, pinned by its ``requirements.lock.txt``; from an
installed distribution they are the distribution's dependencies, pinned to the versions
installed here.

Asset hashes are computed from the inputs (file contents, requirements, target platform), so
an unchanged asset is not rebuilt in the same ``cdk.out`` and nothing nondeterministic leaks
into the hash. Setting the context flag ``bide:skipBundling`` (or ``BIDE_SKIP_BUNDLING=1``)
skips all of it: unit tests synthesize with plain source folders and never install anything.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

# Re-exported (``X as X``): what this module's users import from here.
from .bytecode import BYTECODE_PYTHON_ENV as BYTECODE_PYTHON_ENV
from .bytecode import PYTHON_VERSION as PYTHON_VERSION
from .bytecode import SDK_REQUIREMENTS as SDK_REQUIREMENTS
from .bytecode import bytecode_python as _bytecode_python
from .bytecode import check_pins as check_pins
from .bytecode import compile_tree, find_uv, warn_no_bytecode
from .bytecode import installed_versions as installed_versions

SKIP_BUNDLING_CONTEXT = "bide:skipBundling"
SKIP_BUNDLING_ENV = "BIDE_SKIP_BUNDLING"

# The target of every wheel: Lambda's python3.12 runtime on Graviton.
PIP_PLATFORM = "manylinux2014_aarch64"
UV_PLATFORM = "aarch64-manylinux2014"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64

DEFAULT_REQUIREMENTS = ("pydantic>=2.7", "aws-lambda-powertools>=3.0", "boto3>=1.35")
TRACING_REQUIREMENTS = ("aws-xray-sdk",)

# Bumped when the bundle layout changes, so old cached assets are not reused.
_BUNDLE_FORMAT = "2"
_IGNORED = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache", ".ruff_cache")
_PLACEHOLDER_DIR = Path(__file__).resolve().parent / "placeholder"
# The placeholder folder is a package of bide (so the layering checks see it); the asset is
# its handler.py alone.
_PLACEHOLDER_EXCLUDE = ["__init__.py", "__pycache__"]

#: The ``bide`` package this construct belongs to: what every function bundle ships.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: Folders of the package that are not bundled: the CDK code and the project templates.
NOT_BUNDLED = frozenset({"cdk", "scaffold"})
DISTRIBUTION = "bide"


def truthy(value: object) -> bool:
    """Context values are JSON booleans in cdk.json and strings after ``-c key=value``."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def context_flag(scope: IConstruct, name: str, default: bool = False) -> bool:
    """A boolean context value (``-c name=true`` or cdk.json), ``default`` when unset."""
    value = scope.node.try_get_context(name)
    return default if value is None else truthy(value)


def skip_bundling_requested(scope: IConstruct) -> bool:
    """True when the context flag or the environment variable asks to skip bundling."""
    return context_flag(scope, SKIP_BUNDLING_CONTEXT) or truthy(
        os.environ.get(SKIP_BUNDLING_ENV, "")
    )


# --- inputs ----------------------------------------------------------------------------------


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return _normalize(match.group(1)) if match else ""


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def checkout_root(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The repository checkout ``package_dir`` lives in (``<root>/shared/bide`` beside a
    ``pyproject.toml`` of the project ``bide``), or None for an installed package."""
    root = package_dir.parent.parent
    pyproject = root / "pyproject.toml"
    if package_dir.parent.name != "shared" or not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    return root if project.get("name") == DISTRIBUTION else None


def _installed_requirements() -> list[str]:
    # The installed distribution's own dependencies; those of an extra (``bide[cdk]``) are
    # for the synthesizing machine, not for Lambda.
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return list(DEFAULT_REQUIREMENTS)
    return [r for r in declared if not re.search(r";.*\bextra\s*==", r)]


def runtime_requirements(
    source_root: Path | None, *, tracing: bool = False, extra: Iterable[str] = ()
) -> list[str]:
    """The layer's requirements: the project's runtime dependencies (from ``source_root``'s
    pyproject.toml, else from the installed distribution's metadata), boto3 and botocore
    (:data:`SDK_REQUIREMENTS`), the X-Ray SDK when tracing, and ``extra``."""
    declared = _installed_requirements() if source_root is None else list(DEFAULT_REQUIREMENTS)
    pyproject = None if source_root is None else source_root / "pyproject.toml"
    if pyproject is not None and pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        declared = list(project.get("dependencies", declared))
    wanted = list(declared)
    names = {_requirement_name(r) for r in wanted}
    wanted.extend(sdk for sdk in SDK_REQUIREMENTS if sdk not in names)
    if tracing:
        wanted.extend(TRACING_REQUIREMENTS)
    wanted.extend(extra)
    return wanted


def lock_constraints(source_root: Path | None) -> list[str]:
    """``name==version`` pins from the project's hashed lock file, used as constraints so the
    layer gets the versions the tests ran with. Names pinned twice (per-marker variants) are
    left unpinned: markers would be judged against this machine's Python, not Lambda's."""
    lock = None if source_root is None else source_root / "requirements.lock.txt"
    if lock is None or not lock.is_file():
        return []
    pins: dict[str, str] = {}
    seen_twice: set[str] = set()
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if not match:
            continue
        name = _normalize(match.group(1))
        if name in pins:
            seen_twice.add(name)
        pins[name] = f"{name}=={match.group(2)}"
    return [pin for name, pin in sorted(pins.items()) if name not in seen_twice]


def installed_constraints(requirements: Iterable[str]) -> list[str]:
    """``name==version`` for each requirement installed here: without a lock file (an
    installed bide), the layer gets the versions this machine runs."""
    pins = []
    for requirement in requirements:
        name = _requirement_name(requirement)
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return sorted(pins)


def package_copies(package_dir: Path) -> list[tuple[Path, str]]:
    """The copies that put ``package_dir`` into a bundle as ``bide/``, less :data:`NOT_BUNDLED`."""
    return [
        (child, f"bide/{child.name}")
        for child in sorted(package_dir.iterdir())
        if child.name not in NOT_BUNDLED and not _ignored(Path(child.name))
    ]


def entry_module(function: str) -> str:
    """The ``handler.py`` at the root of ``function``'s bundle (Lambda's ``handler.handler``);
    the repository's ``functions/<function>/handler.py`` is this text."""
    return (
        f'"""Lambda entry point of the {function} function: the handler of '
        f':mod:`bide.handlers.{function}`."""\n'
        "\n"
        "from bide.handlers import load\n"
        "\n"
        f'handler = load("{function}")  # the collector paused while it imports\n'
        "\n"
        '__all__ = ["handler"]\n'
    )


def fingerprint(
    copies: Sequence[tuple[Path, str]], *salt: str, texts: Mapping[str, str] | None = None
) -> str:
    """A content hash of every file that a copy bundle will contain (paths and bytes),
    ``texts`` (destination -> content) included."""
    digest = hashlib.sha256()
    for part in (_BUNDLE_FORMAT, *salt):
        digest.update(part.encode() + b"\0")
    for source, destination in copies:
        for path, relative in sorted(_files(source, destination), key=lambda item: item[1]):
            digest.update(relative.encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    for destination, text in sorted((texts or {}).items()):
        digest.update(str(Path(destination)).encode() + b"\0")
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()


def _files(source: Path, destination: str) -> Iterable[tuple[Path, str]]:
    if source.is_file():
        yield source, str(Path(destination))
        return
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if path.is_file() and not _ignored(relative):
            yield path, str(Path(destination) / relative)


def _ignored(relative: Path) -> bool:
    return any(
        part in {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
        for part in relative.parts
    ) or relative.suffix in {".pyc", ".pyo"}


# --- bundlers --------------------------------------------------------------------------------


@jsii.implements(cdk.ILocalBundling)
class CopyBundler:
    """Copies source folders/files into the asset: ``(source, destination)``; destination
    ``"."`` puts a folder's contents at the asset root. ``texts`` (destination -> content)
    are written as files."""

    def __init__(
        self,
        copies: Sequence[tuple[Path, str]],
        *,
        compile_bytecode: bool,
        texts: Mapping[str, str] | None = None,
    ) -> None:
        self.copies = list(copies)
        self.texts = dict(texts or {})
        self.compile_bytecode = compile_bytecode

    def try_bundle(self, output_dir: str, *_options: Any, **_kw: Any) -> bool:
        # The bundling options arrive from CDK; everything this bundler needs it already has.
        out = Path(output_dir)
        for source, destination in self.copies:
            target = (out / destination).resolve()
            if source.is_dir():
                shutil.copytree(
                    source, target, ignore=shutil.ignore_patterns(*_IGNORED), dirs_exist_ok=True
                )
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        for destination, text in self.texts.items():
            target = (out / destination).resolve()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if self.compile_bytecode:
            compile_tree(out)
        return True


@jsii.implements(cdk.ILocalBundling)
class LayerBundler:
    """Installs requirements for Lambda's platform into ``<output>/python``."""

    def __init__(
        self, requirements: Sequence[str], constraints: Sequence[str], *, compile_bytecode: bool
    ) -> None:
        self.requirements = list(requirements)
        self.constraints = list(constraints)
        self.compile_bytecode = compile_bytecode

    def try_bundle(self, output_dir: str, *_options: Any, **_kw: Any) -> bool:
        # The bundling options arrive from CDK; everything this bundler needs it already has.
        target = Path(output_dir) / "python"
        target.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="bide-layer-") as scratch:
            requirements = Path(scratch) / "requirements.txt"
            constraints = Path(scratch) / "constraints.txt"
            requirements.write_text("\n".join(self.requirements) + "\n")
            constraints.write_text("\n".join(self.constraints) + "\n")
            command, env = install_command(target, requirements, constraints)
            print(
                f"bide: installing layer dependencies with {Path(command[0]).name}", file=sys.stderr
            )
            result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                "bide: installing the layer's dependencies failed "
                f"({' '.join(command)}):\n{result.stderr[-4000:]}"
            )
        _tidy_install(target)
        check_pins(target, self.constraints)
        if self.compile_bytecode:
            compile_tree(target)
        print(f"bide: layer installed in {time.monotonic() - started:.1f} s", file=sys.stderr)
        return True


def install_command(
    target: Path, requirements: Path, constraints: Path
) -> tuple[list[str], dict[str, str]]:
    """The installer invocation: ``uv pip`` when uv is available (fast), else ``pip`` of the
    running interpreter. Binary wheels only, for CPython 3.12 on manylinux2014 aarch64."""
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", PIP_DISABLE_PIP_VERSION_CHECK="1")
    uv = _find_uv()
    # fmt: off
    if uv is not None:
        return [
            uv, "pip", "install", "--python", sys.executable,
            "--target", str(target),
            "--python-platform", UV_PLATFORM, "--python-version", PYTHON_VERSION,
            "--only-binary", ":all:", "--no-installer-metadata", "--quiet",
            "-r", str(requirements), "-c", str(constraints),
        ], env
    if importlib.util.find_spec("pip") is not None:
        return [
            sys.executable, "-m", "pip", "install",
            "--target", str(target),
            "--platform", PIP_PLATFORM, "--implementation", "cp",
            "--python-version", PYTHON_VERSION, "--only-binary=:all:",
            "--no-compile", "--no-input", "--quiet",
            "-r", str(requirements), "-c", str(constraints),
        ], env
    # fmt: on
    raise RuntimeError(
        "bide: bundling needs uv or pip (neither found): `python -m pip install uv`, or "
        f"synthesize with -c {SKIP_BUNDLING_CONTEXT}=true for a non-deployable template"
    )


def _find_uv() -> str | None:
    return find_uv()


def _tidy_install(target: Path) -> None:
    # Console scripts carry this machine's interpreter path and are useless in Lambda;
    # uv leaves a lock file behind.
    shutil.rmtree(target / "bin", ignore_errors=True)
    (target / ".lock").unlink(missing_ok=True)


# --- assets ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundling:
    """How a BideService builds its assets."""

    skip: bool
    compile_bytecode: bool = True

    @property
    def bytecode(self) -> bool:
        """Whether bundles get .pyc files: asked for, and a Python 3.12 is at hand. Part of
        every asset hash, so bundles with and without bytecode never share a hash."""
        if not self.compile_bytecode:
            return False
        if _bytecode_python() is None:
            warn_no_bytecode()
            return False
        return True

    def function_code(
        self, function: str, package_dir: Path, app_paths: Sequence[Path]
    ) -> lambda_.Code:
        """``handler.py`` (:func:`entry_module`) at the asset root, the package at
        ``package_dir`` as ``bide/`` and each app path under its own name."""
        if self.skip:
            return _placeholder()
        if not (package_dir / "handlers" / f"{function}.py").is_file():
            raise FileNotFoundError(
                f"no handlers/{function}.py in {package_dir}; bundling needs the bide package "
                f"(or synthesize a template only with -c {SKIP_BUNDLING_CONTEXT}=true)"
            )
        copies = [*package_copies(package_dir), *((p, p.name) for p in app_paths)]
        texts = {"handler.py": entry_module(function)}
        _check_disjoint(["bide", *texts, *(p.name for p in app_paths)])
        return lambda_.Code.from_asset(
            str(_PLACEHOLDER_DIR),
            asset_hash=fingerprint(copies, f"bytecode={self.bytecode}", texts=texts),
            asset_hash_type=cdk.AssetHashType.CUSTOM,
            bundling=cdk.BundlingOptions(
                image=RUNTIME.bundling_image,
                local=CopyBundler(copies, compile_bytecode=self.bytecode, texts=texts),
            ),
        )

    def layer_code(self, requirements: Sequence[str], constraints: Sequence[str]) -> lambda_.Code:
        """The dependencies under ``python/`` (where Lambda puts layers on ``sys.path``)."""
        if self.skip:
            return _placeholder()
        salt = [PIP_PLATFORM, PYTHON_VERSION, f"bytecode={self.bytecode}", *requirements, "--"]
        return lambda_.Code.from_asset(
            str(_PLACEHOLDER_DIR),
            asset_hash=hashlib.sha256("\n".join([*salt, *constraints]).encode()).hexdigest(),
            asset_hash_type=cdk.AssetHashType.CUSTOM,
            bundling=cdk.BundlingOptions(
                image=RUNTIME.bundling_image,
                local=LayerBundler(requirements, constraints, compile_bytecode=self.bytecode),
            ),
        )


def _placeholder() -> lambda_.Code:
    # Nothing runs from a template synthesized without bundling: every function and the
    # layer get the stand-in, whose handler says so.
    return lambda_.Code.from_asset(str(_PLACEHOLDER_DIR), exclude=_PLACEHOLDER_EXCLUDE)


def _check_disjoint(names: Sequence[str]) -> None:
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise ValueError(f"asset paths clash inside the function bundle: {', '.join(clashes)}")
