"""The mutation run of ``make proof``: plant one-line bugs where a mistake would break Bide's
promises, and check that the proof suites catch every one of them.

Each mutant is a literal edit of one source file (the text to find must occur exactly once, so
a refactoring that moves the line fails this run loudly instead of silently testing nothing).
The edit is made in a scratch copy of the working tree (tracked and untracked files, nothing
ignored), never in the tree itself, and the mutant's tests run there. A mutant is *killed* when
pytest reports failing tests (exit status 1); it *survives* when they pass, and an *error*
(collection error, no tests, a crash of pytest itself) counts as neither and fails the run.

    python scripts/mutation_run.py            # every mutant
    python scripts/mutation_run.py NAME ...   # only these (names as listed)

Exits 0 only when every mutant was killed. The list is docs/reliability.md's "Mutation run".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    """One planted bug: in ``path``, ``find`` (exactly once) becomes ``replace``."""

    name: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    what: str


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="commit-condition-dynamodb",
        path="shared/bide/aws/head.py",
        find='_HEAD_AT_EXPECTED_SEQ: Final = "#seq = :expected AND attribute_not_',
        replace='_HEAD_AT_EXPECTED_SEQ: Final = "#seq >= :expected AND attribute_not_',
        tests=("tests/test_proof_races.py",),
        what="a DynamoDB commit lands over a newer head (lost update)",
    ),
    Mutant(
        name="live-digest-unchecked",
        path="shared/bide/aws/dynamodb.py",
        find="consistent = digest.digest_of(found) == summary",
        replace="consistent = True",
        tests=("tests/test_dynamodb_digest.py",),
        what="a DynamoDB load returns a torn Query as a snapshot",
    ),
    Mutant(
        name="live-digest-old-term-kept",
        path="shared/bide/aws/digest.py",
        find="n, dsum = n - 1, dsum - term(r.id, old)",
        replace="n, dsum = n - 1, dsum",
        tests=("tests/test_dynamodb_digest.py",),
        what="a commit's digest change keeps a rewritten task's old version",
    ),
    Mutant(
        name="commit-condition-sqlite",
        path="shared/bide/engine/store/sqlite.py",
        find="if actual != expected_seq:",
        replace="if actual < expected_seq:",
        tests=("tests/test_store_sqlite.py",),
        what="a SQLite commit lands over a newer head (lost update)",
    ),
    Mutant(
        name="deadline-race-signal",
        path="shared/bide/engine/rules.py",
        find="return deadline is not None and deadline <= now",
        replace="return deadline is not None and deadline < now",
        tests=("tests/test_signals.py",),
        what="a value arriving exactly at the deadline is accepted instead of closed",
    ),
    Mutant(
        name="deadline-race-wake",
        path="shared/bide/engine/rules.py",
        find="if deadline is None or deadline > now:",
        replace="if deadline is None or deadline >= now:",
        tests=("tests/test_signals.py",),
        what="a sleep whose deadline is exactly now is not woken by time",
    ),
    Mutant(
        name="heartbeat-beat-ignored",
        path="shared/bide/engine/heartbeats.py",
        find="beat_by=now + state.heartbeat)",
        replace="beat_by=state.beat_by)",
        tests=("tests/test_heartbeats.py",),
        what="a beat is answered delivered but does not move the sleep's beat_by",
    ),
    Mutant(
        name="heartbeat-alarm-at-until",
        path="shared/bide/engine/state.py",
        find="until, beat_by = self.until, self.beat_by",
        replace="until, beat_by = self.until, None",
        tests=("tests/test_heartbeats.py",),
        what="a sleep's deadline ignores beat_by (alarm at until, a missed beat noticed late)",
    ),
    Mutant(
        name="race-expires-losers",
        path="shared/bide/workflow/ops/race.py",
        find="deadline, expire=own)",
        replace="deadline, expire=True)",
        tests=("tests/test_workflow_race.py",),
        what="a race's deadline expires its wait_for members' keys (a lost wait_for is unusable)",
    ),
    Mutant(
        name="wake-path-still-active",
        path="shared/bide/service/worker.py",
        find=(
            '        deps.queue.wake(session_id, "still-active")\n'
            '        return "requeued", False\n'
        ),
        replace='        return "requeued", False\n',
        tests=("tests/test_handlers_worker.py",),
        what="a run stopped with work left does not queue its next run",
    ),
    Mutant(
        name="wake-path-signal",
        path="shared/bide/service/signals.py",
        find=(
            "        deps.queue.wake(\n"
            "            session_id, _WAKE_REASON[decision.result], task=task_id, owner=owner, "
            "pages=pages\n"
            "        )\n"
        ),
        replace="        pass\n",
        tests=("tests/test_proof_aws_crashes.py",),
        what="a delivered signal queues no wake for its session",
    ),
    Mutant(
        name="targeted-pass-owner-ignored",
        path="shared/bide/engine/partial.py",
        find="    return not cascade_pending(record, {owner.id: owner})\n",
        replace="    return True\n",
        tests=("tests/test_targeted_pass.py",),
        what="a signal's task runs alone although an abort mark is on its way from its owner",
    ),
    Mutant(
        name="targeted-pass-acts-on-alarm",
        path="shared/bide/service/worker.py",
        find="        if done.partial:\n",
        replace="        if False:\n",
        tests=("tests/test_targeted_pass.py",),
        what="the alarm is armed from a targeted pass's wake, which speaks for one task only",
    ),
    Mutant(
        name="targeted-pass-first-run",
        path="shared/bide/service/worker.py",
        find=(
            "        focus = None  # this process's first run of the session: whole (gates rerun)\n"
        ),
        replace="        pass\n",
        tests=("tests/test_targeted_first_run.py",),
        what="a worker's first run of a session is a targeted one: other calls' gates never rerun",
    ),
    Mutant(
        name="held-reservation-not-restaged",
        path="shared/bide/engine/deferred.py",
        find="    old = before.state\n",
        replace="    return None\n",
        tests=("tests/test_deferred_reservation.py",),
        what="a held reservation is dropped at a conflict: the phase that ran is run again",
    ),
    Mutant(
        name="held-reservation-over-the-commit",
        path="shared/bide/engine/deferred.py",
        find="    out.writes = {**held.writes, **draft.writes}\n",
        replace="    out.writes = {**draft.writes, **held.writes}\n",
        tests=("tests/test_deferred_reservation.py",),
        what="the held reservation replaces the phase's own record in the commit that carries it",
    ),
    Mutant(
        name="wake-path-stale-alarm",
        path="shared/bide/service/worker.py",
        find="    if undoes and deps.store.head(session_id) != done.seq:",
        replace="    if False:",
        tests=("tests/test_proof_races.py",),
        what="a stalled worker's older alarm replaces a newer one",
    ),
    Mutant(
        name="alarm-expression-rounds-down",
        path="shared/bide/aws/scheduler.py",
        find="return float(math.ceil(at / step) * step)",
        replace="return float(math.floor(at / step) * step)",
        tests=("tests/test_twin_scheduler.py", "tests/test_twin_worker.py"),
        what="the Scheduler expression names a moment before the deadline",
    ),
    Mutant(
        name="local-alarm-deleted-before-wake",
        path="shared/bide/local/alarms.py",
        find=(
            "            for _ in range(self._copies(alarm)):\n"
            "                # No deduplication id, as Scheduler sends:"
            " the queue deduplicates by content.\n"
            "                self.queue.send(session_id, body)\n"
            "            with self.db.transaction() as db:\n"
            "                db.execute(\n"
            '                    "DELETE FROM local_alarms WHERE session_id = ? AND at = ?",'
            " (session_id, at)\n"
            "                )\n"
        ),
        replace=(
            "            with self.db.transaction() as db:\n"
            "                db.execute(\n"
            '                    "DELETE FROM local_alarms WHERE session_id = ? AND at = ?",'
            " (session_id, at)\n"
            "                )\n"
            "            for _ in range(self._copies(alarm)):\n"
            "                self.queue.send(session_id, body)\n"
        ),
        tests=("tests/test_local_alarm_order.py",),
        what="a crash between deleting a local alarm and queueing its wake loses the wake",
    ),
    Mutant(
        name="alarm-arming-id-constant",
        path="shared/bide/aws/scheduler.py",
        find='"Input": alarm_body(session_id, at, self.ids.new_id("arm-")),',
        replace='"Input": alarm_body(session_id, at, "arm-0"),',
        tests=("tests/test_wake_path.py",),
        what="re-arming the same deadline sends the same body, which FIFO deduplication drops",
    ),
    Mutant(
        name="batch-failure-blocks-other-sessions",
        path="shared/bide/service/worker_batch.py",
        find=(
            "            if group in failed_groups:\n"
            "                _redeliver_in(deps, record, failed_groups[group])\n"
        ),
        replace=(
            "            if failed_groups:\n"
            "                _redeliver_in(deps, record, max(failed_groups.values()))\n"
        ),
        tests=("tests/test_wake_path.py",),
        what="one session's failed wake fails the later wakes of every other session",
    ),
    Mutant(
        name="final-slots-stay",
        path="shared/bide/engine/scheduler.py",
        find="kept, moved = split_final(signals, max(0, room))",
        replace="kept, moved = split_final(signals, 0)",
        tests=("tests/test_flat_history.py",),
        what="consumed and expired keys stay on the record (it grows with every wait)",
    ),
    Mutant(
        name="moved-key-not-read",
        path="shared/bide/engine/rules.py",
        find=(
            "    if slot is not None or sleeping_on(record, name):\n"
            "        return slot\n"
            "    return moved(name)\n"
        ),
        replace="    return slot\n",
        tests=("tests/test_flat_history.py",),
        what="a second value for a consumed key that left the record is delivered again",
    ),
    Mutant(
        name="moved-key-sleep-allowed",
        path="shared/bide/engine/rules.py",
        find="slot = record.signals.get(key.slot) or moved(key.slot)",
        replace="slot = record.signals.get(key.slot)",
        tests=("tests/test_flat_history.py",),
        what="a sleep on a consumed key that left the record is accepted",
    ),
    Mutant(
        name="sleep-absent-condition-dropped",
        path="shared/bide/engine/kernel.py",
        find="            self.absent.add(key)\n            return None\n",
        replace="            return None\n",
        tests=("tests/test_sleep_absent.py",),
        what="a sleep's key that is not on the record is neither read nor required absent",
    ),
    Mutant(
        name="sleep-absent-check-dynamodb",
        path="shared/bide/aws/dynamodb.py",
        find="actions += [absent_check(self.table_name, session_id, k, now) for k in checked]",
        replace="actions += []",
        tests=("tests/test_sleep_absent.py",),
        what="a DynamoDB commit drops its ConditionChecks: a consumed key serves a second wait",
    ),
    Mutant(
        name="sleep-absent-check-sqlite",
        path="shared/bide/engine/store/sqlite.py",
        find=(
            "                if found:\n"
            "                    raise DocumentExists(session_id, found)\n"
        ),
        replace="",
        tests=("tests/test_store_sqlite.py",),
        what="a SQLite commit ignores the documents it requires absent",
    ),
    Mutant(
        name="pending-record-not-read",
        path="shared/bide/aws/dynamodb.py",
        find="pending.overlay(head, tasks, None)",
        replace="None",
        tests=("tests/test_pending_head.py",),
        what="a DynamoDB load ignores the record pending on the head (a delivered signal unseen)",
    ),
    Mutant(
        name="pending-record-not-folded",
        path="shared/bide/aws/pending.py",
        find='return ["#pt", "#pr", "#ptk"] if self.fold is not None else []',
        replace="return []",
        tests=("tests/test_pending_head.py",),
        what="a commit that writes the pending task leaves its older record on the head",
    ),
)


def tree_files() -> list[str]:
    """The working tree's files as git sees them: tracked and untracked, nothing ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def scratch_copy(files: list[str], into: Path) -> None:
    """Copy ``files`` from the working tree into ``into`` (same relative paths)."""
    for rel in files:
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def plant(tree: Path, mutant: Mutant) -> None:
    """Apply ``mutant`` in ``tree``; refuse when its text is not there exactly once."""
    source = tree / mutant.path
    text = source.read_text()
    found = text.count(mutant.find)
    if found != 1:
        raise SystemExit(
            f"mutant {mutant.name}: the text to mutate occurs {found} times in {mutant.path} "
            "(expected once): update scripts/mutation_run.py to the code as it is now"
        )
    source.write_text(text.replace(mutant.find, mutant.replace))


def run_tests(tree: Path, mutant: Mutant) -> tuple[str, float]:
    """Run the mutant's tests in ``tree``: ("killed" | "survived" | "error", seconds)."""
    env = dict(os.environ)
    env.pop("BIDE_FORBID_SKIPS", None)  # a mutant may make tests skip; only failures count
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if done.returncode == 1:
        return "killed", seconds
    if done.returncode == 0:
        return "survived", seconds
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
    print(f"--- {mutant.name}: pytest exited {done.returncode}\n{tail}", file=sys.stderr)
    return "error", seconds


def main(argv: list[str]) -> int:
    wanted = set(argv)
    unknown = wanted - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutants: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if not wanted or m.name in wanted]
    files = tree_files()
    results: list[tuple[Mutant, str, float]] = []
    for mutant in chosen:
        with tempfile.TemporaryDirectory(prefix="bide-mutant-") as scratch:
            tree = Path(scratch)
            scratch_copy(files, tree)
            plant(tree, mutant)
            verdict, seconds = run_tests(tree, mutant)
        results.append((mutant, verdict, seconds))
        print(f"{verdict:8} {seconds:6.1f}s  {mutant.name}: {mutant.what}", flush=True)
    killed = sum(1 for _, v, _ in results if v == "killed")
    print(f"mutation run: {killed} of {len(results)} mutants killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
