"""The installable distribution: the wheel this repository builds, installed where no checkout
is in sight.

* In a fresh venv (dependencies from the package index at the lock's versions, through uv's
  cache): the ``bide`` command, ``bide init``, and the generated project's own tests.
* Installed into a plain folder and synthesized with this venv's aws-cdk-lib: the functions
  are bundled from the installed package, the layer's requirements come from its metadata.

The build needs hatchling and the venv its dependencies from the package index (or uv's
cache): this module needs the network the first time, like ``make venv``. uv comes with the
development venv (``make venv``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bide.cdk import bundling

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 900


def uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    assert found, "uv is needed to build and install the wheel: `make venv` installs it"
    return found


def clean_env() -> dict[str, str]:
    """No PYTHONPATH (this checkout must not be importable), no venv of ours, fake AWS."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "BIDE_", "AWS_ENDPOINT_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        {
            "UV_PYTHON_DOWNLOADS": "never",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }
    )
    return env


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}:\n"
        f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(uv(), "build", "--wheel", "--quiet", "--out-dir", out, ROOT, cwd=out)
    (built,) = out.glob("bide-*.whl")
    return built


def test_the_wheel_holds_the_package_its_data_and_the_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert "bide = bide.cli:main" in archive.read(entry_points).decode()
        requires = archive.read(metadata).decode()
    templates = {
        p.relative_to(ROOT / "shared").as_posix()
        for p in (ROOT / "shared" / "bide").rglob("*.tmpl")
    }
    for name in (
        "bide/cdk/service.py",
        "bide/cdk/placeholder/handler.py",
        "bide/testing/__init__.py",
        "bide/testing/aws/__init__.py",
        "bide/testing/aws/sqs.py",
    ):
        assert name in names
    for name in ("worker", "signal", "api"):
        assert f"bide/handlers/{name}.py" in names
    assert templates and templates <= names  # bide init's templates: data files, not modules
    assert not any("__pycache__" in n or n.startswith(("functions/", "infra/")) for n in names)
    assert "Provides-Extra: cdk" in requires
    assert re.search(r"Requires-Dist: aws-cdk-lib.*extra == .cdk.", requires)


def lock_pins(folder: Path) -> Path:
    """The lock's versions as constraints (no hashes), so the venv gets what the tests use."""
    pins = bundling.lock_constraints(ROOT)
    path = folder / "constraints.txt"
    path.write_text("\n".join(pins) + "\n")
    return path


def test_a_fresh_venv_runs_bide_and_a_new_projects_tests(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    constraints = lock_pins(tmp_path)
    install = ["pip", "install", "--quiet", "--python", python, "-c", constraints]
    run(uv(), *install, wheel, "pytest", cwd=tmp_path)

    where = run(python, "-c", "import bide; print(bide.__file__)", cwd=tmp_path).strip()
    assert Path(where).is_relative_to(venv), where
    assert "init" in run(venv / "bin" / "bide", "--help", cwd=tmp_path)
    run(python, "-c", "import bide.testing.aws", cwd=tmp_path)  # the AWS twin ships too
    # Without the extra, bide.cdk says what to install.
    missing = subprocess.run(
        [python, "-c", "import bide.cdk"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0 and "pip install 'bide[cdk]'" in missing.stderr

    project = tmp_path / "my-agent"
    run(venv / "bin" / "bide", "init", project, cwd=tmp_path)
    report = run(python, "-m", "pytest", "-p", "no:cacheprovider", "-rs", cwd=project)
    passed = re.search(r"(\d+) passed", report)
    assert passed is not None and int(passed.group(1)) >= 6, report
    # The one test that needs aws-cdk-lib says why it did not run; nothing else is skipped.
    skips = [line for line in report.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 1 and "bide[cdk]" in skips[0], report


_SYNTH = """
import json, sys
from pathlib import Path
import aws_cdk as cdk
import bide
from bide.cdk import FEATURE_FLAGS, BideService, bundling

out, app_dir = Path(sys.argv[1]), Path(sys.argv[2])
STUB = (
    "import pathlib, shutil, sys; t = pathlib.Path(sys.argv[1]); "
    "t.mkdir(parents=True, exist_ok=True); "
    "shutil.copyfile(sys.argv[2], t / 'REQUESTED.txt'); "
    "shutil.copyfile(sys.argv[3], t / 'CONSTRAINTS.txt'); "
    # The SDK at its pinned version, as an installer honouring the constraints would.
    "pins = dict(c.split('==') for c in pathlib.Path(sys.argv[3]).read_text().split()); "
    "[(t / f'{n}-{pins[n]}.dist-info').mkdir() for n in ('boto3', 'botocore')]; "
    "[(t / f'{n}-{pins[n]}.dist-info' / 'METADATA').write_text("
    "f'Name: {n}\\\\nVersion: {pins[n]}\\\\n') for n in ('boto3', 'botocore')]"
)
bundling.install_command = lambda target, r, c: (
    [sys.executable, "-c", STUB, str(target), str(r), str(c)], {}
)
bundling._bytecode_python = lambda: None
app = cdk.App(outdir=str(out), context=dict(FEATURE_FLAGS))
stack = cdk.Stack(app, "Installed")
service = BideService(stack, "Bide", app_module="my_app.app:app", app_paths=[app_dir])
app.synth()
resources = json.loads((out / "Installed.template.json").read_text())["Resources"]

def asset(construct, key):
    logical_id = stack.get_logical_id(construct.node.default_child)
    return str(out / ("asset." + resources[logical_id]["Properties"][key]["S3Key"][:-4]))

print(json.dumps({
    "bide": bide.__file__,
    "checkout": str(bundling.checkout_root()),
    "worker": asset(service.worker, "Code"),
    "layer": asset(service.layer, "Content"),
}))
"""


def test_an_installed_bide_bundles_itself(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    run(uv(), "pip", "install", "--quiet", "--no-deps", "--target", site, wheel, cwd=tmp_path)
    app_dir = tmp_path / "my_app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text("app = None\n")
    # This venv's aws-cdk-lib and pydantic; bide only from the installed folder.
    env = {**clean_env(), "PYTHONPATH": str(site)}
    found = json.loads(
        run(sys.executable, "-c", _SYNTH, tmp_path / "cdk.out", app_dir, cwd=tmp_path, env=env)
    )
    assert Path(found["bide"]).is_relative_to(site)
    assert found["checkout"] == "None"
    code = Path(found["worker"])
    assert (code / "handler.py").read_text() == bundling.entry_module("worker")
    assert (code / "bide" / "handlers" / "worker.py").is_file()
    assert (code / "my_app" / "app.py").is_file()
    assert not (code / "bide" / "cdk").exists() and not (code / "bide" / "scaffold").exists()
    assert not list(code.glob("*.dist-info"))
    layer = Path(found["layer"]) / "python"
    requested = (layer / "REQUESTED.txt").read_text().split()
    assert {"pydantic>=2.7", "aws-lambda-powertools>=3.37"} <= set(requested)
    assert not any(r.startswith(("aws-cdk-lib", "cdk-nag")) for r in requested)
    # The SDK ships in the layer, pinned to the versions installed here.
    assert {"boto3>=1.35", "botocore"} <= set(requested)
    import botocore
    import pydantic

    pins = (layer / "CONSTRAINTS.txt").read_text().split()
    assert f"pydantic=={pydantic.VERSION}" in pins
    assert f"botocore=={botocore.__version__}" in pins
