"""The bundles ship the tested SDK and precompiled bytecode.

The layer holds boto3/botocore at the version ``requirements.lock.txt`` pins (the version the
tests ran with), not the Lambda runtime's, and both the layer and the function bundles hold
``__pycache__/*.pyc`` compiled by the bytecode interpreter, which bundling only takes when it
is a CPython 3.12 (Lambda's code folders are read-only: without bytecode every cold start
compiles every module it imports). Nothing is
downloaded: the installer is the stub of ``test_infra_bundling`` (it installs each requested
SDK name at the version the constraints pin, as an installer honouring them would).
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from test_infra_bundling import _STUB_INSTALLER

from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_ENV, bundling, bytecode
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


def _locked(name: str) -> str:
    match = re.search(rf"^{name}==([^\s;\\]+)", (ROOT / "requirements.lock.txt").read_text(), re.M)
    assert match, f"{name} is not pinned in requirements.lock.txt"
    return match.group(1)


def _synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *skew: str) -> tuple[Any, Path]:
    source = tmp_path / "src"
    shutil.copytree(ROOT / "shared" / "bide", source / "shared" / "bide")
    for name in ("pyproject.toml", "requirements.lock.txt"):
        shutil.copyfile(ROOT / name, source / name)
    examples = source / "examples"
    examples.mkdir()
    (examples / "agent_app.py").write_text("app = None\n")

    def stub_install(target: Path, requirements: Path, constraints: Path):
        args = [str(target), str(requirements), str(constraints), *skew]
        return [sys.executable, "-c", _STUB_INSTALLER, *args], {}

    monkeypatch.setattr(bundling, "install_command", stub_install)
    monkeypatch.delenv(SKIP_BUNDLING_ENV, raising=False)
    outdir = tmp_path / "cdk.out"
    app = cdk.App(outdir=str(outdir), context=dict(FEATURE_FLAGS))
    stack = BideStack(app, "Bide", app_paths=[examples], service_options={"source_root": source})
    app.synth()
    return stack, outdir


def _asset(stack: Any, outdir: Path, construct: Any, code_key: str) -> Path:
    template = json.loads((outdir / "Bide.template.json").read_text())
    logical_id = stack.get_logical_id(construct.node.default_child)
    key = template["Resources"][logical_id]["Properties"][code_key]["S3Key"]
    return outdir / f"asset.{key.removesuffix('.zip')}"


def test_the_layer_ships_the_locked_sdk(tmp_path, monkeypatch):
    monkeypatch.setattr(bundling, "_bytecode_python", lambda: None)
    stack, outdir = _synth(tmp_path, monkeypatch)
    layer = _asset(stack, outdir, stack.service.layer, "Content") / "python"
    for name in ("boto3", "botocore"):
        version = _locked(name)
        assert (layer / f"{name}-{version}.dist-info" / "METADATA").is_file(), name
        assert f"__version__ = {version!r}" in (layer / name / "__init__.py").read_text()
    assert bundling.installed_versions(layer)["botocore"] == _locked("botocore")
    requested = (layer / "REQUESTED.txt").read_text().split()
    assert {"boto3>=1.35", "botocore"} <= set(requested)


def test_every_bundle_gets_bytecode(tmp_path, monkeypatch):
    # The bytecode interpreter is this one here (its own magic number), so the wiring is
    # checked whatever Pythons this machine has; finding a 3.12 is checked below.
    monkeypatch.setattr(bundling, "_bytecode_python", lambda: sys.executable)
    monkeypatch.setattr(bytecode, "bytecode_python", lambda: sys.executable)
    tag = sys.implementation.cache_tag
    magic = importlib.util.MAGIC_NUMBER
    stack, outdir = _synth(tmp_path, monkeypatch)
    service = stack.service
    layer = _asset(stack, outdir, service.layer, "Content") / "python"
    layer_pyc = layer / "botocore" / "__pycache__" / f"__init__.{tag}.pyc"
    assert layer_pyc.read_bytes()[:4] == magic
    for fn in service.worker, service.signal_function, service.api_function:
        code = _asset(stack, outdir, fn, "Code")
        compiled = code / "bide" / "handlers" / "__pycache__" / f"{fn.node.id}.{tag}.pyc"
        assert compiled.is_file(), compiled
        # The interpreter's magic number, and "unchecked-hash" (flags 0b01): valid whatever
        # timestamps the zip gives the sources.
        head = compiled.read_bytes()[:8]
        assert head[:4] == magic
        assert int.from_bytes(head[4:8], "little") == 0b01
        assert (code / "__pycache__" / f"handler.{tag}.pyc").is_file()


def test_only_a_cpython_312_compiles_the_bytecode(monkeypatch, tmp_path):
    # Lambda's runtime reads only its own version's .pyc files: another interpreter is passed over.
    bytecode.bytecode_python.cache_clear()
    monkeypatch.setattr(bytecode, "_interpreter_candidates", lambda: [sys.executable])
    expected = sys.executable if sys.version_info[:2] == (3, 12) else None
    assert bytecode.bytecode_python() == expected
    bytecode.bytecode_python.cache_clear()
    missing = str(tmp_path / "python3.12")
    monkeypatch.setattr(bytecode, "_interpreter_candidates", lambda: [missing])
    assert bytecode.bytecode_python() is None
    bytecode.bytecode_python.cache_clear()


def test_a_layer_with_another_sdk_version_is_refused(tmp_path, monkeypatch):
    # An index or mirror that serves some other botocore than the pinned one.
    monkeypatch.setattr(bundling, "_bytecode_python", lambda: None)
    with pytest.raises(
        RuntimeError, match=r"botocore 9\.9\.9 \(pinned " + re.escape(_locked("botocore"))
    ):
        _synth(tmp_path, monkeypatch, "botocore")


def test_check_pins_names_what_is_missing(tmp_path):
    (tmp_path / "boto3-1.0.dist-info").mkdir()
    (tmp_path / "boto3-1.0.dist-info" / "METADATA").write_text("Name: boto3\nVersion: 1.0\n")
    with pytest.raises(RuntimeError, match="botocore not installed"):
        bundling.check_pins(tmp_path, ["boto3==1.0"])
    (tmp_path / "botocore-1.0.dist-info").mkdir()
    (tmp_path / "botocore-1.0.dist-info" / "METADATA").write_text("Name: botocore\nVersion: 1.0\n")
    bundling.check_pins(tmp_path, ["boto3==1.0", "botocore==1.0"])
