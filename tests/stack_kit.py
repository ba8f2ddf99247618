"""What the tests of the local stack over HTTP share (``test_cli``, ``test_host_cli``,
``test_console``, ``test_console_browser*``, ``test_local_stack``, ``test_proof_hostile_input``,
``test_local_beats``, ``test_view_failures_beats``): a stack started in-process on an app (or
on a manual clock), the CLI run against it, a session started on it, and a bounded wait. Plain
HTTP to it is ``limits_fixtures.http``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from bide import ManualClock
from bide.app import App
from bide.cli import main
from bide.local import LocalStack
from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack


@contextlib.contextmanager
def local_stack(app: App, folder: Path) -> Iterator[BackgroundStack]:
    """The local stack serving ``app`` on a free port of 127.0.0.1, its SQLite file in
    ``folder``, for the block. EMF metrics are off: the handlers would print their blobs to
    stdout, where the CLI's output is read."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        with BackgroundStack(LocalStack(app, str(folder / "dev.sqlite"), port=0)) as running:
            yield running


def bide(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """Run the ``bide`` CLI against the stack at ``url``: its exit code, stdout and stderr."""
    code = main(["--url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def started(stack: BackgroundStack, text: str) -> tuple[str, ApiClient]:
    """A new session on ``stack`` given the message ``text``, run until the stack settles;
    its id and a client of the stack."""
    client = ApiClient(stack.url)
    sid = new_session(client, text)
    assert stack.settle(10), "the stack did not settle within 10 s"
    return sid, client


def new_session(client: ApiClient, text: str) -> str:
    """A new session given the message ``text`` (not waited for): its id."""
    sid = client.request("POST", "/sessions", {}).body["session_id"]
    body = {"content": text, "request_id": "r1"}
    answer = client.request("POST", f"/sessions/{sid}/inputs", body)
    assert answer.status == 202, (answer.status, answer.body)
    return str(sid)


class ManualRun(NamedTuple):
    """A local stack on a manual clock and the one session :func:`manual_session` started."""

    local: LocalStack
    stack: BackgroundStack
    client: ApiClient
    clock: ManualClock
    sid: str


@contextlib.contextmanager
def manual_session(app: App, db: str, text: str) -> Iterator[ManualRun]:
    """The local stack serving ``app`` on a :class:`ManualClock` with exact alarms (each fires
    at its deadline once the clock reaches it), its SQLite file at ``db``, and a new session
    given the message ``text``, for the block."""
    clock = ManualClock()
    local = LocalStack(app, db, port=0, clock=clock, exact=True)
    with BackgroundStack(local) as stack:
        client = ApiClient(stack.url)
        yield ManualRun(local, stack, client, clock, new_session(client, text))


def wait_for(probe: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Poll ``probe()`` until it returns something truthy, and return that; fail after
    ``timeout`` seconds, naming ``what`` was awaited and the last answer seen."""
    give_up = time.monotonic() + timeout
    last = None
    while time.monotonic() < give_up:
        last = probe()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last saw {last!r}")
