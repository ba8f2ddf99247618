"""Each Lambda function imports its own path only (docs/performance.md, section d).

Cold start is import time, and timing it in a test would be flaky; what it is made of is not.
Each check runs a fresh interpreter with a function's folder and ``shared/`` on the path, as
the function's bundle has them, imports the entry module (and, where said, does the first
call's setup) and lists ``sys.modules``: a heavy import that comes back fails here by name.
"""

from __future__ import annotations

import ast
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
    "botocore",
    "aws_xray_sdk",
    # Not even its package root (some 40 modules): logs and metrics are bide.service.logs
    # and bide.service.emf; the HTTP functions' resolver (its event handler) comes on the
    # first call, the webhook key's SecretsProvider on the first read of the key.
    "aws_lambda_powertools",
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
    "cryptography",  # sealing provider tokens: on the first token only
    "bide.testing",
    "bide.cdk",
    "bide.scaffold",
    "aws_cdk",
    "constructs",
    "hypothesis",
    "pytest",
    # The engine's records and states, the settings and the webhook bindings are plain
    # classes; pydantic comes with the app's tools and signals, on the first call.
    "pydantic",
    "pydantic_core",
)
# What each function's import leaves out besides: the other functions' routes and loop.
NOT_ON_PATH = {
    "worker": (
        "bide.service.routes_api",
        "bide.service.routes_signal",
        "bide.service.api_models",
        # The HTTP functions' router, body checks and webhook tokens (bide.service.http,
        # transport, json_body, webhooks): the worker takes none of their routes.
        "bide.service.http",
        "bide.service.transport",
        "bide.service.json_body",
        "bide.service.webhooks",
        "bide.tools.webhooks",
    ),
    "signal": (
        "bide.service.routes_api",
        "bide.service.api_models",
        "bide.service.worker",
        "bide.engine.harness",
    ),
    "api": ("bide.service.routes_signal", "bide.service.worker_batch"),
}

# argv: the folders to put first on sys.path, the modules to import (JSON lists), then the
# function whose first call's setup to do after (its configuration, with the app, and an HTTP
# function's resolver), or "". Prints the modules loaded and the dataclasses built on the way
# (``dataclasses._process_class`` builds every one: a private name, read by this probe only).
PROBE = """
import dataclasses, importlib, json, sys
built = []
_build = dataclasses._process_class
def _counted(cls, *args, **kwargs):
    built.append(cls.__module__ + "." + cls.__qualname__)
    return _build(cls, *args, **kwargs)
dataclasses._process_class = _counted
sys.path[:0] = json.loads(sys.argv[1])
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
function = sys.argv[3]
if function:
    deps = importlib.import_module("bide.handlers." + function).configured()
    if function != "worker":
        from bide.service import http
        http._resolver_for(deps, http.SIGNAL if function == "signal" else http.API)
print(json.dumps({"modules": sorted(sys.modules), "dataclasses": built}))
"""
# A function's configuration for the setup (nothing is called: clients are made on first use).
SETTINGS = {
    "BIDE_APP": "cold_app:app",
    "BIDE_TABLE": "sessions",
    "BIDE_BUCKET": "values",
    "BIDE_WAKE_QUEUE_URL": "http://127.0.0.1:9/000000000000/wakes.fifo",
    "BIDE_WAKE_QUEUE_ARN": "arn:aws:sqs:us-east-1:000000000000:wakes.fifo",
    "BIDE_SCHEDULE_GROUP": "alarms",
    "BIDE_SCHEDULER_ROLE_ARN": "arn:aws:iam::000000000000:role/scheduler",
}


def probe(
    folders: list[Path], imports: list[str], setup: str = "", app_dir: Path | None = None
) -> dict[str, list[str]]:
    """In a fresh interpreter with ``folders`` first on its path, import ``imports`` (then do
    the first call's setup of the function ``setup``, with the app of ``app_dir``): the
    ``modules`` loaded and the ``dataclasses`` built (``module.Class``, in order)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BIDE_TRACING")}
    if app_dir is not None:
        env.update(SETTINGS, PYTHONPATH=str(app_dir))
    paths, names = json.dumps([str(f) for f in folders]), json.dumps(imports)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, paths, names, setup],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def loaded(function: str, app_dir: Path | None = None) -> list[str]:
    """The modules loaded in a fresh interpreter by importing ``function``'s entry module
    (then, given the folder of the app to load, doing its first call's setup)."""
    folders = [ROOT / "functions" / function, ROOT / "shared"]
    setup = "" if app_dir is None else function
    return probe(folders, ["handler"], setup, app_dir)["modules"]


def matching(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def importing(modules: list[str], package: str) -> set[str]:
    """Which of ``modules`` (bide's) import ``package`` when they are imported: an import
    statement at module level (under ``if``/``try`` too, not under ``if TYPE_CHECKING``)."""

    def top_level(body: list[ast.stmt]) -> list[ast.stmt]:
        found: list[ast.stmt] = []
        for node in body:
            guarded = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            if isinstance(node, ast.If | ast.Try) and not guarded:
                found += top_level(node.body) + top_level(node.orelse)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
        return found

    importers = set()
    for module in matching(modules, ("bide",)):
        path = ROOT / "shared" / Path(*module.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in top_level(ast.parse(source.read_text()).body):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                names = [node.module or ""] if node.level == 0 else []
            if any(n == package or n.startswith(package + ".") for n in names):
                importers.add(module)
    return importers


@pytest.mark.parametrize("function", ["worker", "signal", "api"])
def test_a_function_imports_its_path_only(function: str) -> None:
    modules = loaded(function)
    assert f"bide.handlers.{function}" in modules  # the probe imported the real thing
    assert matching(modules, NEVER_AT_IMPORT + NOT_ON_PATH[function]) == []


@pytest.mark.parametrize("function", ["worker", "signal", "api"])
def test_the_settings_and_webhooks_on_a_functions_path_do_without_pydantic(function: str) -> None:
    modules = loaded(function)
    on_path = {"bide.service.config", "bide.service.settings"}
    if function != "worker":  # the HTTP functions check webhook tokens; the worker does not
        on_path.add("bide.tools.webhooks")
    assert on_path <= set(modules)  # on the path: the check below reads them
    importers = importing(modules, "pydantic")
    # The check sees an importer where there is one (the sessions API's models stay pydantic).
    assert importing(["bide.service.api_models", "bide.tools.webhooks"], "pydantic") == {
        "bide.service.api_models"
    }
    # None does (NEVER_AT_IMPORT says so too; this names the module that brings it back).
    assert importers == set(), sorted(importers)


@pytest.mark.parametrize("function", ["signal", "api"])
def test_an_http_function_sets_up_its_own_routes_only(function: str, tmp_path: Path) -> None:
    (tmp_path / "cold_app.py").write_text("from bide import App\n\napp = App()\n")
    modules = loaded(function, tmp_path)
    assert "aws_lambda_powertools.event_handler" in modules  # the resolver was built
    assert "bide.app" in modules  # and the app loaded
    # Its own routes only (the stack gives every function the Scheduler settings, so each
    # builds its alarms adapter; no client is made until one arms).
    not_wanted = ("bide.service.routes_api", "bide.service.api_models")
    if function == "api":
        not_wanted = ("bide.service.routes_signal",)
    assert matching(modules, (*not_wanted, "boto3")) == []


def test_the_public_names_are_imported_on_first_use() -> None:
    # Every name of __all__ has a module to come from, and nothing else does.
    for package in (bide, bide.tools):
        assert set(package._EXPORTS) == set(package.__all__), package.__name__
        for name in package.__all__:
            assert getattr(package, name) is not None


# The engine's modules on the handlers' path read and write records without pydantic (its
# import is a large part of a cold start; docs/performance.md, section d): records and states
# are plain classes, and a signal's or a task input's schema imports pydantic when it is
# first used. The modules are those the worker's import loads (the widest path).
def test_the_engine_on_the_path_imports_no_pydantic() -> None:
    engine = [m for m in loaded("worker") if m.startswith("bide.engine")]
    for required in ("bide.engine.records", "bide.engine.state", "bide.engine.signals"):
        assert required in engine  # the worker's path still holds what this test is about
    modules = probe([ROOT / "shared"], engine)["modules"]
    assert matching(modules, ("pydantic", "pydantic_core")) == []


# A ``@dataclass`` compiles its generated methods when its module is imported (about half a
# millisecond a class, docs/performance.md d): the values on the functions' path, the task
# record and its signal slot among them, are classes of bide.engine.values instead.
@pytest.mark.parametrize("function", ["worker", "signal", "api"])
def test_a_functions_import_builds_no_dataclass(function: str) -> None:
    found = probe([ROOT / "functions" / function, ROOT / "shared"], ["handler"])
    assert f"bide.handlers.{function}" in found["modules"]  # the probe imported the real thing
    assert found["dataclasses"] == []
