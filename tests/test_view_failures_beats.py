"""The session view (GET /sessions/{id}, its tasks page and ``bide show``) shows a sleep's
``heartbeat`` and ``beat_by`` (so an operator sees when a missed beat will be noticed) and a
key holding a failure as a failure, never as a value."""

from __future__ import annotations

from stack_kit import bide, manual_session, wait_for
from test_local_beats import BEAT, DONE, render_app
from test_local_stack import db, parked_tool, view

from bide.local.render import task_line, when
from bide.local.watch import changes, read_snapshot

__all__ = ["db"]  # the fixture, imported for pytest to find


def test_the_view_shows_beat_by_and_a_failure_as_a_failure(db: str, capsys) -> None:
    with manual_session(render_app(), db, "render j-1") as (_, stack, client, clock, sid):
        start = clock.now()
        tool = wait_for(lambda: parked_tool(client, sid), "render to park")
        assert (tool["heartbeat"], tool["beat_by"]) == (BEAT, start + BEAT)
        assert tool["slots"] is None  # nothing held yet

        clock.advance(BEAT / 2)  # a beat moves beat_by; the view (and bide watch) say so
        before = read_snapshot(client, sid)
        slot = [sid, tool["id"], DONE.name]
        assert bide(capsys, stack.url, "beat", *slot, "done")[0] == 0
        moved = parked_tool(client, sid)
        assert moved is not None and moved["beat_by"] == clock.now() + BEAT
        watched = changes(before, read_snapshot(client, sid, before), clock.now())
        assert [line for line in watched if line.startswith(f"~ task {tool['id']}")] == [
            f"~ task {task_line(moved, clock.now())}"
        ]
        assert "beat by " in watched[-1]

        # A failure on a key the sleep does not list stays held: shown as a failure.
        fail = ["fail", *slot, "side", "--type", "BuildFailed", "--message", "3 tests failed"]
        assert bide(capsys, stack.url, *fail, "--data", '{"failed": 3}')[0] == 0
        # And a value on another: shown as holding a value (the value stays out of the view).
        signal = ["signal", *slot, "other", '{"ok": true}']
        assert bide(capsys, stack.url, *signal)[0] == 0
        held = parked_tool(client, sid)
        assert held is not None and held["slots"] == [
            {
                "signal": DONE.name,
                "key": "other",
                "holds": "value",
                "failure": None,
            },
            {
                "signal": DONE.name,
                "key": "side",
                "holds": "failure",
                "failure": {"type": "BuildFailed", "message": "3 tests failed"},
            },
        ]
        page = client.request("GET", f"/sessions/{sid}/tasks").body["items"]
        assert next(t for t in page if t["id"] == tool["id"])["slots"] == held["slots"]

        code, out, _ = bide(capsys, stack.url, "show", sid)
        assert code == 0
        due = when(moved["beat_by"], moved["beat_by"]).removesuffix(" (now)")
        assert f"beat by {due} (" in out and f"(every {BEAT}s)" in out
        assert f"holds failure on {DONE.name}/side: BuildFailed: 3 tests failed" in out
        assert f"holds value on {DONE.name}/other" in out
        assert view(client, sid)["session_id"] == sid
