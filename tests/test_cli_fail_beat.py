"""``bide fail`` and ``bide beat`` against an in-process local stack on 127.0.0.1: each posts
to its own route of the signal (``.../failure``, ``.../heartbeat``), prints the answer as
``bide signal`` does and exits 1 when it was not ``delivered``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from stack_kit import bide, local_stack, started
from test_cli import parked_tool

from bide.cli import EXIT_REFUSED, EXIT_USAGE
from bide.local.client import ApiClient
from bide.local.thread import BackgroundStack
from examples.agent_app import build_app


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundStack]:
    with local_stack(build_app(), tmp_path_factory.mktemp("cli-fail")) as running:
        yield running


def test_fail_and_beat_go_through_their_routes(stack: BackgroundStack, capsys) -> None:
    sid, _ = started(stack, "Fix the flaky test and verify it")
    tool = parked_tool(stack.url, sid)
    slot = [sid, tool["id"], "app.ci-result"]
    # A beat where the sleep has no heartbeat moves nothing, but is taken.
    assert bide(capsys, stack.url, "beat", *slot, "done")[:2] == (0, "delivered (HTTP 202)\n")
    # Bad --data JSON is bad usage; nothing is sent.
    code, _, err = bide(
        capsys, stack.url, "fail", *slot, "x", "--type", "T", "--message", "m", "--data", "{oops"
    )
    assert code == EXIT_USAGE and "not valid JSON" in err
    # A malformed failure (empty type) is refused naming the field.
    code, out, err = bide(capsys, stack.url, "fail", *slot, "x", "--type", "", "--message", "m")
    assert code == EXIT_REFUSED and out.startswith("error (HTTP 400)") and "type" in err
    # A failure on a key nobody waits on is stored; a second one and a beat are duplicates.
    fail = ["fail", *slot, "early", "--type", "BuildFailed", "--message", "3 tests failed"]
    code, out, _ = bide(capsys, stack.url, *fail, "--data", '{"failed": 3}')
    assert (code, out) == (0, "delivered (HTTP 202)\n")
    code, out, err = bide(capsys, stack.url, *fail)
    assert (code, out.strip()) == (EXIT_REFUSED, "duplicate (HTTP 200)")
    assert "already holds a value or a failure" in err
    code, out, err = bide(capsys, stack.url, "beat", *slot, "early")
    assert (code, out.strip()) == (EXIT_REFUSED, "duplicate (HTTP 200)")
    assert "the wait is over" in err
    # On the awaited key the failure (not a value: the schema would refuse it) ends the call
    # failed, its result saying the failure's type and message.
    code, out, _ = bide(capsys, stack.url, *fail[:4], "done", *fail[5:])
    assert (code, out) == (0, "delivered (HTTP 202)\n")
    assert stack.settle(5)
    transcript = json.dumps(ApiClient(stack.url).request("GET", f"/sessions/{sid}").body)
    assert "BuildFailed: 3 tests failed" in transcript
    # The call has ended: a late beat is closed.
    code, out, _ = bide(capsys, stack.url, "beat", *slot, "done")
    assert code == EXIT_REFUSED and out.startswith("closed (HTTP 410)")
