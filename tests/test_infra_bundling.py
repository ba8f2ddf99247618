"""Offline bundling: what goes into each function's code and into the dependency layer.

No test here installs anything or uses the network: the installer command is checked as
data, and the one end-to-end synthesis swaps in a stub installer.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from bide import constants as c
from infra.bide_stack import FEATURE_FLAGS, SKIP_BUNDLING_ENV, BideStack, bundling

ROOT = Path(__file__).resolve().parents[1]


def _names(requirements: list[str]) -> set[str]:
    return {bundling._requirement_name(r) for r in requirements}


def test_layer_requirements_come_from_pyproject_without_the_runtimes_boto3():
    names = _names(bundling.runtime_requirements(ROOT))
    assert {"pydantic", "aws-lambda-powertools"} <= names
    assert not names & {"boto3", "botocore"}
    traced = bundling.runtime_requirements(ROOT, tracing=True, extra=["httpx>=0.27"])
    assert {"aws-xray-sdk", "httpx"} <= _names(traced)


def test_lock_pins_become_constraints(tmp_path):
    pins = bundling.lock_constraints(ROOT)
    assert any(p.startswith("pydantic==") for p in pins)
    assert any(p.startswith("aws-lambda-powertools==") for p in pins)
    (tmp_path / "requirements.lock.txt").write_text(
        "# comment\n"
        "Typing_Extensions==4.0.0 \\\n    --hash=sha256:00\n"
        "networkx==3.6.1 ; python_full_version < '3.12' \\\n"
        "networkx==3.7 ; python_full_version >= '3.12' \\\n"
    )
    # A name pinned per marker is left to the resolver (markers would be judged against
    # this machine's Python, not Lambda's).
    assert bundling.lock_constraints(tmp_path) == ["typing-extensions==4.0.0"]
    assert bundling.lock_constraints(tmp_path / "nowhere") == []


def test_installer_targets_lambdas_platform(monkeypatch, tmp_path):
    target, req, con = tmp_path / "python", tmp_path / "r.txt", tmp_path / "c.txt"
    monkeypatch.setattr(bundling, "_find_uv", lambda: "uv")
    command, env = bundling.install_command(target, req, con)
    assert command[:3] == ["uv", "pip", "install"]
    joined = " ".join(command)
    for flag in (
        f"--target {target}",
        "--python-platform aarch64-manylinux2014",
        "--python-version 3.12",
        "--only-binary :all:",
        f"-r {req}",
        f"-c {con}",
    ):
        assert flag in joined
    assert env["UV_PYTHON_DOWNLOADS"] == "never"

    monkeypatch.setattr(bundling, "_find_uv", lambda: None)
    monkeypatch.setattr(bundling.importlib.util, "find_spec", lambda name: object())
    command, _ = bundling.install_command(target, req, con)
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    joined = " ".join(command)
    for flag in (
        f"--target {target}",
        "--platform manylinux2014_aarch64",
        "--implementation cp",
        "--python-version 3.12",
        "--only-binary=:all:",
        "--no-compile",
    ):
        assert flag in joined

    monkeypatch.setattr(bundling.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="bide:skipBundling"):
        bundling.install_command(target, req, con)


def _handler_dir(tmp_path: Path) -> Path:
    handler = tmp_path / "functions" / "worker"
    (handler / "__pycache__").mkdir(parents=True)
    (handler / "handler.py").write_text("def handler(event, context):\n    return None\n")
    (handler / "__pycache__" / "handler.cpython-312.pyc").write_bytes(b"stale")
    return handler


def test_function_bundle_layout(tmp_path):
    handler = _handler_dir(tmp_path)
    app = tmp_path / "my_tools"
    app.mkdir()
    (app / "tools.py").write_text("app = None\n")
    copies = [(handler, "."), (ROOT / "shared" / "bide", "bide"), (app, "my_tools")]
    out = tmp_path / "out"
    assert bundling.CopyBundler(copies, compile_bytecode=False).try_bundle(str(out)) is True
    assert (out / "handler.py").is_file()
    assert (out / "bide" / "__init__.py").is_file()
    assert (out / "bide" / "constants.py").is_file()
    assert (out / "my_tools" / "tools.py").is_file()
    assert not list(out.rglob("__pycache__"))
    assert not list(out.rglob("*.pyc"))


def test_fingerprint_follows_every_bundled_file_and_nothing_else(tmp_path):
    handler = _handler_dir(tmp_path)
    bide = tmp_path / "bide"
    shutil.copytree(ROOT / "shared" / "bide", bide)
    copies = [(handler, "."), (bide, "bide")]
    first = bundling.fingerprint(copies)
    (bide / "__pycache__").mkdir(exist_ok=True)
    (bide / "__pycache__" / "extra.cpython-312.pyc").write_bytes(b"cache")
    assert bundling.fingerprint(copies) == first
    # A change in the shared package (not only in the handler folder) changes the asset.
    (bide / "app.py").write_text((bide / "app.py").read_text() + "\n# changed\n")
    assert bundling.fingerprint(copies) != first
    assert bundling.fingerprint(copies, "bytecode=True") != bundling.fingerprint(copies)


def test_bundle_paths_must_not_clash(tmp_path):
    handler = _handler_dir(tmp_path)
    clash = tmp_path / "elsewhere" / "bide"
    clash.mkdir(parents=True)
    with pytest.raises(ValueError, match="clash"):
        bundling.Bundling(skip=False).function_code(handler, ROOT / "shared" / "bide", [clash])
    with pytest.raises(FileNotFoundError, match=r"handler\.py"):
        bundling.Bundling(skip=False).function_code(tmp_path / "missing", ROOT, [])


def test_skip_bundling_flag(monkeypatch):
    monkeypatch.delenv(SKIP_BUNDLING_ENV, raising=False)
    assert not bundling.skip_bundling_requested(cdk.App())
    assert bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": "true"}))
    assert bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": True}))
    assert not bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": "false"}))
    monkeypatch.setenv(SKIP_BUNDLING_ENV, "1")
    assert bundling.skip_bundling_requested(cdk.App())


_STUB_INSTALLER = """
import pathlib, shutil, sys
target, requirements = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(target / "fakedep").mkdir(parents=True)
(target / "fakedep" / "__init__.py").write_text("")
(target / "bin").mkdir()
(target / "bin" / "script").write_text("#!/somewhere/python")
shutil.copyfile(requirements, target / "REQUESTED.txt")
"""


def test_synthesis_bundles_functions_and_layer_without_docker(tmp_path, monkeypatch):
    """The real bundling path through CDK (jsii local bundlers), with a stub installer."""
    source = tmp_path / "src"
    for name in (c.FUNCTION_WORKER, c.FUNCTION_SIGNAL, c.FUNCTION_API):
        folder = source / "functions" / name
        folder.mkdir(parents=True)
        (folder / "handler.py").write_text(f"NAME = {name!r}\ndef handler(event, context): ...\n")
    shutil.copytree(ROOT / "shared" / "bide", source / "shared" / "bide")
    shutil.copyfile(ROOT / "pyproject.toml", source / "pyproject.toml")
    examples = source / "examples"
    examples.mkdir()
    (examples / "agent_app.py").write_text("app = None\n")

    def stub_install(target: Path, requirements: Path, constraints: Path):
        return [sys.executable, "-c", _STUB_INSTALLER, str(target), str(requirements)], {}

    monkeypatch.setattr(bundling, "install_command", stub_install)
    monkeypatch.setattr(bundling, "_bytecode_python", lambda: None)
    monkeypatch.delenv(SKIP_BUNDLING_ENV, raising=False)
    outdir = tmp_path / "cdk.out"
    app = cdk.App(outdir=str(outdir), context=dict(FEATURE_FLAGS))
    stack = BideStack(app, "Bide", app_paths=[examples], service_options={"source_root": source})
    app.synth()

    template = json.loads((outdir / "Bide.template.json").read_text())
    resources = template["Resources"]

    def asset_dir(construct: Any, code_key: str) -> Path:
        logical_id = stack.get_logical_id(construct.node.default_child)
        key = resources[logical_id]["Properties"][code_key]["S3Key"]
        return outdir / f"asset.{key.removesuffix('.zip')}"

    service = stack.service
    layer = asset_dir(service.layer, "Content")
    assert (layer / "python" / "fakedep" / "__init__.py").is_file()
    assert not (layer / "python" / "bin").exists()  # console scripts carry local paths
    requested = (layer / "python" / "REQUESTED.txt").read_text()
    assert "aws-lambda-powertools" in requested
    assert "boto3" not in requested
    seen = set()
    for fn in (service.worker, service.signal_function, service.api_function):
        code = asset_dir(fn, "Code")
        seen.add(code)
        assert f"NAME = {fn.node.id!r}" in (code / "handler.py").read_text()
        assert (code / "bide" / "constants.py").is_file()
        assert (code / "examples" / "agent_app.py").is_file()
        assert not (code / "python").exists()  # dependencies live in the layer only
    assert len(seen) == 3
