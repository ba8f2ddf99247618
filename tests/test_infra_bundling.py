"""Offline bundling: what goes into each function's code and into the dependency layer.

No test here installs anything or uses the network: the installer command is checked as
data, and the one end-to-end synthesis swaps in a stub installer.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import gc
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from bide import constants as c
from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_ENV, bundling
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


def _names(requirements: list[str]) -> set[str]:
    return {bundling._requirement_name(r) for r in requirements}


def test_layer_requirements_come_from_pyproject_with_the_tested_sdk():
    names = _names(bundling.runtime_requirements(ROOT))
    # boto3/botocore ship in the layer (at the locked version), not taken from the runtime.
    assert {"pydantic", "aws-lambda-powertools", "boto3", "botocore"} <= names
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


def _package(tmp_path: Path) -> Path:
    """A copy of the bide package with leftovers a bundle must not ship."""
    package = tmp_path / "bide"
    shutil.copytree(ROOT / "shared" / "bide", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "constants.cpython-312.pyc").write_bytes(b"stale")
    return package


def test_function_bundle_layout(tmp_path):
    package = _package(tmp_path)
    app = tmp_path / "my_tools"
    app.mkdir()
    (app / "tools.py").write_text("app = None\n")
    copies = [*bundling.package_copies(package), (app, "my_tools")]
    texts = {"handler.py": bundling.entry_module("worker")}
    out = tmp_path / "out"
    bundler = bundling.CopyBundler(copies, compile_bytecode=False, texts=texts)
    assert bundler.try_bundle(str(out)) is True
    assert (out / "handler.py").read_text() == bundling.entry_module("worker")
    assert (out / "bide" / "__init__.py").is_file()
    assert (out / "bide" / "constants.py").is_file()
    assert (out / "bide" / "handlers" / "worker.py").is_file()
    assert (out / "my_tools" / "tools.py").is_file()
    # The CDK code and the project templates never run in Lambda.
    assert not (out / "bide" / "cdk").exists()
    assert not (out / "bide" / "scaffold").exists()
    assert not list(out.rglob("__pycache__"))
    assert not list(out.rglob("*.pyc"))


def test_the_entry_module_imports_the_packaged_handler(tmp_path):
    for name in (c.FUNCTION_WORKER, c.FUNCTION_SIGNAL, c.FUNCTION_API):
        text = bundling.entry_module(name)
        assert f'handler = load("{name}")' in text
        namespace: dict[str, Any] = {}
        try:
            exec(compile(text, "handler.py", "exec"), namespace)
        finally:
            gc.unfreeze()  # load() froze this test process's objects: let them go again
        module = __import__(f"bide.handlers.{name}", fromlist=["handler"])
        assert namespace["handler"] is module.handler


def test_the_repositorys_functions_are_the_bundles_entry_modules():
    # functions/<name>/handler.py is what every bundle puts at its root, so the repository's
    # cold-start bench and a reader see exactly what Lambda imports.
    for name in (c.FUNCTION_WORKER, c.FUNCTION_SIGNAL, c.FUNCTION_API):
        path = ROOT / "functions" / name / "handler.py"
        assert path.read_text() == bundling.entry_module(name), path


def test_fingerprint_follows_every_bundled_file_and_nothing_else(tmp_path):
    bide = _package(tmp_path)
    texts = {"handler.py": bundling.entry_module("worker")}
    copies = bundling.package_copies(bide)
    first = bundling.fingerprint(copies, texts=texts)
    (bide / "__pycache__" / "extra.cpython-312.pyc").write_bytes(b"cache")
    (bide / "cdk" / "notes.txt").write_text("not bundled")
    assert bundling.fingerprint(bundling.package_copies(bide), texts=texts) == first
    # A change in the shared package (not only in the handler module) changes the asset.
    (bide / "app.py").write_text((bide / "app.py").read_text() + "\n# changed\n")
    assert bundling.fingerprint(copies, texts=texts) != first
    assert bundling.fingerprint(copies, texts=texts) != bundling.fingerprint(copies)
    other = {"handler.py": bundling.entry_module("api")}
    assert bundling.fingerprint(copies, texts=other) != bundling.fingerprint(copies, texts=texts)
    assert bundling.fingerprint(copies, "bytecode=True") != bundling.fingerprint(copies)


def test_bundle_paths_must_not_clash(tmp_path):
    clash = tmp_path / "elsewhere" / "bide"
    clash.mkdir(parents=True)
    package = ROOT / "shared" / "bide"
    with pytest.raises(ValueError, match="clash"):
        bundling.Bundling(skip=False).function_code("worker", package, [clash])
    with pytest.raises(FileNotFoundError, match=r"handlers/nothing\.py"):
        bundling.Bundling(skip=False).function_code("nothing", package, [])


def test_sources_from_a_checkout_or_an_installed_package(tmp_path, monkeypatch):
    assert bundling.checkout_root() == ROOT
    assert bundling.PACKAGE_DIR == ROOT / "shared" / "bide"
    # An installed package (site-packages/bide) has no checkout around it.
    installed = tmp_path / "site-packages" / "bide"
    installed.mkdir(parents=True)
    assert bundling.checkout_root(installed) is None
    # Nor does a shared/bide of some other project.
    other = tmp_path / "other"
    (other / "shared" / "bide").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "not-bide"\n')
    assert bundling.checkout_root(other / "shared" / "bide") is None

    metadata = [
        "pydantic>=2.7",
        "boto3>=1.35",
        "aws-lambda-powertools>=3.37",
        'aws-cdk-lib>=2.150; extra == "cdk"',
    ]
    monkeypatch.setattr(bundling.importlib.metadata, "requires", lambda name: metadata)
    # Without a checkout: the distribution's dependencies (not its extras) and botocore.
    assert bundling.runtime_requirements(None) == [
        "pydantic>=2.7",
        "boto3>=1.35",
        "aws-lambda-powertools>=3.37",
        "botocore",
    ]
    pins = bundling.installed_constraints(["pydantic>=2.7", "no-such-dist-here>=1"])
    assert pins == [f"pydantic=={bundling.importlib.metadata.version('pydantic')}"]
    assert bundling.lock_constraints(None) == []


def test_skip_bundling_flag(monkeypatch):
    monkeypatch.delenv(SKIP_BUNDLING_ENV, raising=False)
    assert not bundling.skip_bundling_requested(cdk.App())
    assert bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": "true"}))
    assert bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": True}))
    assert not bundling.skip_bundling_requested(cdk.App(context={"bide:skipBundling": "false"}))
    monkeypatch.setenv(SKIP_BUNDLING_ENV, "1")
    assert bundling.skip_bundling_requested(cdk.App())


_STUB_INSTALLER = """
import pathlib, re, shutil, sys
target, requirements = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
constraints = pathlib.Path(sys.argv[3]).read_text().split()
skew = sys.argv[4] if len(sys.argv) > 4 else ""
(target / "fakedep").mkdir(parents=True)
(target / "fakedep" / "__init__.py").write_text("")
(target / "bin").mkdir()
(target / "bin" / "script").write_text("#!/somewhere/python")
shutil.copyfile(requirements, target / "REQUESTED.txt")
# Like an installer honouring the constraints: each requested SDK name at its pinned version
# (the newest index version, 9.9.9, when unpinned or when skewing that name).
pins = dict(c.split("==") for c in constraints if "==" in c)
for line in requirements.read_text().split():
    name = re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower()
    if name not in {"boto3", "botocore"}:
        continue
    version = "9.9.9" if name == skew else pins.get(name, "9.9.9")
    (target / name).mkdir()
    (target / name / "__init__.py").write_text(f"__version__ = {version!r}\\n")
    info = target / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
"""


def test_synthesis_bundles_functions_and_layer_without_docker(tmp_path, monkeypatch):
    """The real bundling path through CDK (jsii local bundlers), with a stub installer."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "shared" / "bide", source / "shared" / "bide")
    shutil.copyfile(ROOT / "pyproject.toml", source / "pyproject.toml")
    examples = source / "examples"
    examples.mkdir()
    (examples / "agent_app.py").write_text("app = None\n")

    def stub_install(target: Path, requirements: Path, constraints: Path):
        args = [str(target), str(requirements), str(constraints)]
        return [sys.executable, "-c", _STUB_INSTALLER, *args], {}

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
    assert "boto3" in requested
    seen = set()
    for fn in (service.worker, service.signal_function, service.api_function):
        code = asset_dir(fn, "Code")
        seen.add(code)
        assert (code / "handler.py").read_text() == bundling.entry_module(fn.node.id)
        assert (code / "bide" / "handlers" / f"{fn.node.id}.py").is_file()
        assert (code / "bide" / "constants.py").is_file()
        assert not (code / "bide" / "cdk").exists()
        assert (code / "examples" / "agent_app.py").is_file()
        assert not (code / "python").exists()  # dependencies live in the layer only
    assert len(seen) == 3
    # Lambda's view of a bundle: its root on sys.path, no PYTHONPATH, no repository (-I);
    # only the third-party packages (the layer's, here this venv's) come from elsewhere.
    probe = "import sys, handler, bide; print(handler.handler.__module__, bide.__file__)"
    code = asset_dir(service.worker, "Code")
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(code)!r}); {probe}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module, bide_file = done.stdout.split()
    assert module == "bide.handlers.worker"
    assert Path(bide_file).is_relative_to(code)


def test_the_construct_example_of_the_deploy_docs_synthesizes(tmp_path):
    """docs/deploy.md's own-tools example, as written (bundling skipped)."""
    docs = (ROOT / "docs" / "deploy.md").read_text()
    section = docs[docs.index("## Your own tools") :]
    example = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    assert "from bide.cdk import FEATURE_FLAGS, BideService" in example
    (tmp_path / "my_tools").mkdir()
    (tmp_path / "my_tools" / "app.py").write_text("app = None\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "shared"),
        "CDK_OUTDIR": str(tmp_path / "out"),
        SKIP_BUNDLING_ENV: "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    template = json.loads((tmp_path / "out" / "MyAgents.template.json").read_text())
    variables = [
        r["Properties"]["Environment"]["Variables"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    assert len(variables) == 3
    assert all(v["BIDE_APP"] == "my_tools.app:app" and v["MODEL_ID"] for v in variables)
