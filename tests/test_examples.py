"""Every runnable example exits 0 and prints the lines that tell its story.

Examples are found by glob (``examples/NN_*.py``), so a new example is run without touching
this file; list its key lines in ``KEY_LINES`` to check its output too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))

# Substrings each example must print (each on some line of its output).
KEY_LINES: dict[str, list[str]] = {
    "38_signals.py": [
        "CI_RESULT.key('done') -> SignalKey(signal='app.ci-result', key='done')",
        "-> invalid",
        "field 'status': Input should be 'passed' or 'failed'",
        "field 'log_url': Input should be a valid string",
        "signal(t-1, 'done', passed) -> delivered",
        "signal(t-1, 'done', failed) -> duplicate",
        "-> not_found",
        "signal(t-1, 'done', passed) -> closed   (the task has ended)",
        "-> closed   (deadline passed, not yet woken)",
        "woke: WakeExpired(reason='expired')",
        "is running (the build started, the task has not slept yet)",
        "-> delivered   (stored on the running task)",
        "'done', passed) -> delivered",
        "is running, signals={}",
        "-> closed   (abort-marked)",
        "ok: every signal() result shown",
    ],
    "39_ask_a_person.py": [
        "wake(): active=False, at=2026-01-01 04:00 UTC",
        "25 minutes later the person answers -> delivered",
        "result={'text': 'yes, go ahead', 'wake': 'signal'}",
        "result={'text': None, 'wake': 'expired'}",
        "a late answer after the task ended -> closed",
        "wake(): active=False, at=None   (no alarm at all)",
        "a new harness opens the same file: task",
        "the answer reaches the task -> delivered",
        "result={'text': 'merge it', 'wake': 'signal'}",
        "ok: answered once, expired once",
    ],
    "40_tool_waits_for_webhook.py": [
        "** the process died",
        "run_ci is sleeping; builds so far: ['build-7']",
        "wake(): active=False, at=+7200s",
        "the call resumed and returned: 'CI passed: https://ci.example/build-7'",
        "outcome: aborted; cancel cleaned up: ['build-8']",
        "its webhook arriving later -> closed",
        "ok: one build per call despite the crash; Stop ran cancel",
    ],
    "41_tool_polls.py": [
        "parked; wake().at is in 8 min",
        "result: 'intro.mp4 rendered after 4 waits' (5 polls)",
        "ok: backoff 1, 2, 4, 8 minutes",
    ],
    "42_parallel_children.py": [
        "research_both is waiting (policy any)",
        "research_both woke on the first child and parked again: waiting",
        "result: tides: twice a day | winds: westerlies",
        "ok: wait=False handles, policy any, both results",
    ],
    "44_approval_gate.py": [
        "23:30 a person approves -> delivered",
        "still waiting (quiet hours): sleeping; ran so far: []",
        "08:00 the gates pass; the command ran: ['rm -rf build']",
        "an unanswered approval expires: blocked: No approval within a day",
        "gate log: quiet-hours asked at 23.50h",
        "ok: approved at 23:30, ran at 08:00",
    ],
    "43_subagent_waits.py": [
        "subagent call: sleeping",
        "child's ask_person call: sleeping",
        "wake(): active=False, at=None  (no alarm: parked on signals)",
        "parent's answer: 'Done: The designer chose teal.' (done)",
    ],
    "45_review_on_yield.py": [
        "user: A reviewer found problems: add tests",
        "assistant: Here is the function, now with tests.",
        "user: Never mind, ship it",
        "ok: continue sent the agent back; a user message won over the reviewer",
    ],
    "47_parallel_reads.py": [
        "the model called: Read(",
        "result of Read (vfs.read): '- faster resumes'",
        "execution order: start read changes.md -> start read release-notes.md",
        "ok: two reads in parallel, then the exclusive edit",
    ],
    "46_after_tools_terminate.py": [
        "the supervisor says 'go on' -> delivered",
        "user: go on",
        "the run ended: done, answer 'Working on step 2'",
    ],
    "48_joined_workflow_tool.py": [
        "the call is sleeping; the desk got a request envelope",
        "wake(): active=False, at=+2h (the promise's hard deadline)",
        "reply rejected (correlation-mismatch): correlation 'corr-forged' does not match",
        "nothing was changed",
        "session unchanged: True",
        "reply -> settled",
        "the agent continued: 'Legal says:",
        '"approved": true, "note": "OFL fonts are fine; keep the licence file"',
        "ok: joined call parked on its promise; the forged reply was rejected",
    ],
    "49_keyed_promises.py": [
        "-> 3 promise handles",
        "promises: {'intro': 'resolved', 'outro': 'open', 'credits': 'open'}",
        "await outro: the call is sleeping",
        "is still open after waiting 60s (the await timed out; the promise is unaffected)",
        "outro's status: open",
        "5. At the hard deadline: outro expired (the hard deadline was reached)",
        "every keyed promise is terminal; the execution: aborted",
        "the execution cancelled the daemon jobs it still owned: ['outro']",
        "ok: keyed promises awaited later; a timeout left one open; the deadline ended it",
    ],
    "50_cancelled_promise.py": [
        "promise_await is sleeping",
        "cancelled: plan changed",
        "pricing's mailbox: [('request', None), ('cancel', 'cancelled')]",
        "reply -> ignored; the promise stays cancelled, value=None",
        "the rule, as a pure function: ignored (no document to write: True)",
        "ok: first terminal write wins; the cancelled promise ignored the late success",
    ],
    "51_delegation_limits.py": [
        "parent got: done: Summarize changes.md",
        "messages=['Summarize changes.md']  (its brief only)",
        "agent_run refused: depth limit: a child at depth 2 exceeds max_depth 1",
        "agent_spawn refused: open limit: 1 children are open (max_open 1)",
        "expired: the hard deadline was reached",
        "agent_run refused: descendant limit: the tree already started 4 of 4",
        "total=4 open=0 max_depth=1",
        "- spawn designer depth 1: expired",
        "ok: agent_run and agent_spawn under depth, total, open and deadline limits",
    ],
    "52_deploy_with_approval.py": [
        "the deploy call is sleeping; the turn waits for it",
        "wake(): active=False, at=None  (no alarm: a person decides)",
        "options: ['Deploy', 'Cancel'] (confirmation)",
        "Twenty minutes later the person approves -> delivered",
        "a second click on the same card -> duplicate",
        "plans made: 1, deploys: ['https://api.example/v2']",
        "ok: the turn waited for the person; planned once, deployed once",
    ],
    "53_approval_deadline_escalation.py": [
        "the call is sleeping; alarm at +14400s",
        "04:00 nobody answered: ['paged on-call about api']; still open: 1",
        "06:00 the person approves the same question -> delivered",
        'result: {"deployed": true, "url": "https://api.example/live"}',
        '30:00 result: {"deployed": false, "reason": "timed out"}',
        "the question is withdrawn; a late answer -> closed",
    ],
    "54_render_video_webhook.py": [
        "the call is sleeping; wake(): active=False, at=None",
        "25 minutes later the farm posts -> delivered",
        'result: {"url": "https://cdn.example/intro.mp4"}',
        "the farm retries its POST after the call ended -> closed",
        "result: tool_error: FatalError: Render job-2 failed: out of memory",
    ],
    "55_refund_order_background.py": [
        "the approval card waits in the session: 'Refund $40.00 on order A-17?'",
        "task index: refund_order working",
        "assistant: Your other order ships tomorrow.",
        'assistant: Update: finished: {"refunded": true, "receipt": "rf-A-17-40"}',
        "task index: refund_order completed",
    ],
    "56_remind_me_later.py": [
        "parked; wake(): active=False, at=+7200s",
        "an hour later a new process opens the session: active=False",
        """two hours later the agent says: 'Reminder: {"reminder": "call Bob"}'""",
    ],
    "57_remind_with_progress.py": [
        "{'status': 'preparing reminder'}",
        "assistant: (from the task) Reminder scheduled for 30 minutes from now.",
        'assistant: (from the task) finished: {"reminder": "stand-up"}',
        "ok: progress stayed on the stream; the message and the result woke the agent",
    ],
    "58_devbox_background.py": [
        "2. The run needs a Devbox sign-in: devbox (step create_devbox_task)",
        "the OAuth callback stores the token -> delivered; the step is retried",
        "Devbox was prompted: ['Use the staging database']",
        "Devbox repeats an old post and posts complete -> ['delivered', 'delivered']",
        "'Apply these findings?' -> the person picks apply: ['delivered']",
        "sandboxes stopped: ['box-2']",
        "task index: 'Fix the login page' cancelled",
    ],
    "60_steer_interrupts_parked_tool.py": [
        "** the process died",
        "cancel stopped ['build-7']; builds: ['build-7', 'build-8']",
        "the follow-up is queued",
        "tool_result: interrupted by a steer",
        "submissions: {'r1': 'done', 'r2': 'done', 'r3': 'done'}",
        "ok: the steer cancelled the parked call and was answered next; the follow-up waited",
    ],
    "61_ci_failure_caught.py": [
        "CI POST build-7 /failure {'type': 'FlakyTest', 'message': 'test_login timed out'} -> "
        "delivered",
        "outcome: completed, result {'build': 'build-8', 'status': 'passed', 'attempts': 2}",
        "outcome: failed: CompileError: main.c:3: syntax error",
        "ok: a typed failure was caught and retried; an uncaught one failed the call",
    ],
    "62_render_heartbeats.py": [
        "both calls sleep; wake(): at=+5 min",
        "+8 min: beats intro -> delivered, outro -> delivered; wake(): at=+13 min",
        "+13 min: beats none; wake(): at=+17 min",
        "outro missed its beat: FatalError: job-outro stopped beating",
        'intro: {"url": "https://cdn.example/intro.mp4"}',
        "outro's dead job reports after all -> closed",
        "ok: beats kept one job's wait open; the dead job was noticed 13 minutes in, not 6 hours",
    ],
    "59_testing_with_bide_testing.py": [
        "ok: ManualClock: the question expired after four hours",
        "ok: FaultyStore: the process died after the park; the answer still arrived",
    ],
}


def run_example(path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "shared"), env.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_examples_are_found():
    names = {p.name for p in EXAMPLES}
    assert set(KEY_LINES) <= names, f"examples listed in KEY_LINES are missing: {names}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path):
    proc = run_example(path)
    assert proc.returncode == 0, (
        f"{path.name} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
        f"--- stderr\n{proc.stderr}"
    )
    missing = [line for line in KEY_LINES.get(path.name, []) if line not in proc.stdout]
    assert not missing, f"{path.name} did not print {missing}\n--- stdout\n{proc.stdout}"


README_SOURCES = [p for p in EXAMPLES if "# --- README: begin" in p.read_text()]


def test_readme_blocks_have_their_examples():
    names = {p.name for p in README_SOURCES}
    assert {"39_ask_a_person.py", "59_testing_with_bide_testing.py"} <= names


@pytest.mark.parametrize("path", README_SOURCES, ids=[p.name for p in README_SOURCES])
def test_readme_block_matches_its_example(path: Path):
    """The README quotes the code between an example's README markers verbatim, and the
    example runs (test_example_runs), so the README's code runs too."""
    source = path.read_text()
    begin = source.index("# --- README: begin")
    end = source.index("# --- README: end")
    snippet = source[source.index("\n", begin) + 1 : end].strip()
    readme = (ROOT / "README.md").read_text()
    assert snippet in readme, f"README.md is out of sync with examples/{path.name}"
