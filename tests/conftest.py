"""Shared test setup: fake AWS credentials (nothing may reach a real endpoint) and engine kits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every shared helper module beside the tests (kits, fixtures) gets pytest's assert rewriting,
# registered once here before any test module imports one: registered in each test file, a
# helper already imported by an earlier file could not be rewritten (and pytest warned).
pytest.register_assert_rewrite(
    *sorted(
        p.stem
        for p in Path(__file__).parent.glob("*.py")
        if not p.stem.startswith("test_") and p.stem != "conftest"
    )
)

# Tests only ever talk to moto or to services on 127.0.0.1.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[_name] = _value
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)


# `make test` sets BIDE_FORBID_SKIPS=1: every test can run on a machine with python3, java and
# npm, plus Debian's chromium for the console's browser test (make test installs and starts
# what they need), so a skip there hides a test that did not run.
FORBID_SKIPS = "BIDE_FORBID_SKIPS"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(FORBID_SKIPS) != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if not skipped:
        return
    reasons = sorted({str(getattr(r, "longrepr", ""))[:200] for r in skipped})
    print(f"\n{len(skipped)} test(s) skipped with {FORBID_SKIPS}=1; that is a failure:")
    for reason in reasons:
        print(f"  {reason}")
    if session.exitstatus == 0:
        session.exitstatus = 1
