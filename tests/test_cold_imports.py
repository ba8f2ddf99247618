"""Each Lambda function imports its own path only (docs/performance.md, section d).

Cold start is import time, and timing it in a test would be flaky; what it is made of is not.
Each check runs a fresh interpreter with a function's folder and ``shared/`` on the path, as
the function's bundle has them, imports the entry module (and, where said, does the first
call's setup) and lists ``sys.modules``: a heavy import that comes back fails here by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bide
import bide.tools

ROOT = Path(__file__).resolve().parent.parent

# Not for any function at import: clients are created on first use (boto3 and botocore come
# with them), the app (agents, workflow tools, delegation, bindings, promises) is loaded by
# the first call's configuration, X-Ray only when tracing is on, the resolver on first call;
# build-time and test-only packages never.
NEVER_AT_IMPORT = (
    "boto3",
    "botocore.session",  # Powertools imports the botocore package (to tag its user agent)
    "botocore.client",
    "aws_xray_sdk",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.parameters",
    "bide.app",
    "bide.agent",
    "bide.workflow",
    "bide.delegation",
    "bide.bindings",
    "bide.promises",
    "bide.admission",
    "bide.approvals",
    "bide.tools.task",
    "bide.tools.registry",
    "bide.tools.define",
    "bide.aws.bedrock",
    "bide.aws.dynamodb",
    "bide.aws.scheduler",
    "bide.engine.store.sqlite",
    "bide.local",
    "bide.testing",
    "bide.cdk",
    "bide.scaffold",
    "aws_cdk",
    "constructs",
    "hypothesis",
    "pytest",
)
# What each function neither imports nor needs for its resolver (the app it loads on its first
# call may import more: that is the app's choice).
NOT_ON_PATH = {
    "worker": ("bide.service.routes_api", "bide.service.routes_signal", "bide.service.api_models"),
    "signal": (
        "bide.service.routes_api",
        "bide.service.api_models",
        "bide.service.worker",
        "bide.engine.harness",
    ),
    "api": ("bide.service.routes_signal", "bide.service.worker_batch"),
}

PROBE = """
import json, sys
sys.path[:0] = sys.argv[1:3]
import handler
if sys.argv[3] == "setup":
    from bide.service import http
    http.resolver(http.SIGNAL if "signal" in sys.argv[1] else http.API)
print(json.dumps(sorted(sys.modules)))
"""


def loaded(function: str, *, setup: bool = False) -> list[str]:
    """The modules loaded in a fresh interpreter by importing ``function``'s entry module
    (then, with ``setup``, building its HTTP resolver as its first call does)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BIDE_TRACING")}
    folders = [str(ROOT / "functions" / function), str(ROOT / "shared")]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *folders, "setup" if setup else "import"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def matching(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


@pytest.mark.parametrize("function", ["worker", "signal", "api"])
def test_a_function_imports_its_path_only(function: str) -> None:
    modules = loaded(function)
    assert f"bide.handlers.{function}" in modules  # the probe imported the real thing
    assert matching(modules, NEVER_AT_IMPORT + NOT_ON_PATH[function]) == []


@pytest.mark.parametrize("function", ["signal", "api"])
def test_an_http_function_builds_its_own_routes_only(function: str) -> None:
    modules = loaded(function, setup=True)
    assert "aws_lambda_powertools.event_handler" in modules  # the resolver was built
    assert matching(modules, NOT_ON_PATH[function]) == []


def test_the_public_names_are_imported_on_first_use() -> None:
    # Every name of __all__ has a module to come from, and nothing else does.
    for package in (bide, bide.tools):
        assert set(package._EXPORTS) == set(package.__all__), package.__name__
        for name in package.__all__:
            assert getattr(package, name) is not None
