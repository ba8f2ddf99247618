"""The bundles ship the tested SDK and precompiled bytecode.

The layer holds boto3/botocore at the version ``requirements.lock.txt`` pins (the version the
tests ran with), not the Lambda runtime's, and both the layer and the function bundles hold
``__pycache__/*.cpython-312.pyc`` compiled by a CPython 3.12 (Lambda's code folders are
read-only: without them every cold start compiles every module it imports). Nothing is
downloaded: the installer is the stub of ``test_infra_bundling`` (it installs each requested
SDK name at the version the constraints pin, as an installer honouring them would).
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from test_infra_bundling import _STUB_INSTALLER

from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_ENV, bundling
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


def _locked(name: str) -> str:
    match = re.search(rf"^{name}==([^\s;\\]+)", (ROOT / "requirements.lock.txt").read_text(), re.M)
    assert match, f"{name} is not pinned in requirements.lock.txt"
    return match.group(1)


def _python312() -> str:
    python = bundling._bytecode_python()
    assert python is not None, (
        "bundling needs a CPython 3.12 for bytecode: put python3.12 on PATH or set "
        f"{bundling.BYTECODE_PYTHON_ENV}"
    )
    return python


def _magic(python: str) -> bytes:
    done = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util, sys; sys.stdout.write(importlib.util.MAGIC_NUMBER.hex())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return bytes.fromhex(done.stdout)


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


def test_the_layer_ships_the_locked_sdk_and_every_bundle_has_bytecode(tmp_path, monkeypatch):
    magic = _magic(_python312())
    stack, outdir = _synth(tmp_path, monkeypatch)
    service = stack.service
    layer = _asset(stack, outdir, service.layer, "Content") / "python"
    for name in ("boto3", "botocore"):
        version = _locked(name)
        assert (layer / f"{name}-{version}.dist-info" / "METADATA").is_file(), name
        assert f"__version__ = {version!r}" in (layer / name / "__init__.py").read_text()
    assert bundling.installed_versions(layer)["botocore"] == _locked("botocore")
    layer_pyc = list(layer.glob("botocore/__pycache__/__init__.cpython-312.pyc"))
    assert layer_pyc and layer_pyc[0].read_bytes()[:4] == magic
    for fn in service.worker, service.signal_function, service.api_function:
        code = _asset(stack, outdir, fn, "Code")
        compiled = code / "bide" / "handlers" / "__pycache__" / f"{fn.node.id}.cpython-312.pyc"
        assert compiled.is_file(), compiled
        # CPython 3.12's magic number, and "unchecked-hash" (flags 0b01): valid whatever
        # timestamps the zip gives the sources.
        head = compiled.read_bytes()[:8]
        assert head[:4] == magic
        assert int.from_bytes(head[4:8], "little") == 0b01
        assert (code / "handler.py").is_file()
        assert list((code / "__pycache__").glob("handler.cpython-312.pyc"))


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
