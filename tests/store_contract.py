"""The Store contract: one suite that every :class:`bide.engine.store.Store` must pass.

Use it by subclassing in a test module and providing a ``store`` fixture::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self): ...

Optionally override ``other_store``: a second handle on the *same* storage (another
connection, another client: what a second process or Lambda would hold). The racing tests
spread their threads over both. It defaults to ``store`` itself.

Every test uses fresh session ids, so a store may be shared between tests.

Long because: the contract is one list of what the engine relies on from any store, in one
class a store's test module subclasses; split, a new store could pass half of it.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from store_contract_absent import AbsentDocsContract
from store_contract_at_head import AtHeadContract

from bide.engine.errors import CommitTooLarge, ConflictError
from bide.engine.records import SignalSlot, TaskRecord
from bide.engine.signals import SignalKey
from bide.engine.state import (
    Aborted,
    Completed,
    Completing,
    Failed,
    Pending,
    Running,
    Sleeping,
    Terminal,
    Waiting,
    WakeSignal,
)
from bide.engine.store.base import (
    MAX_COMMIT_ITEMS,
    SESSION_ENDED_KEY,
    Doc,
    SessionSnapshot,
    Store,
)


def new_session() -> str:
    """A session id no other test uses."""
    return f"s-{uuid.uuid4().hex[:12]}"


def task(
    task_id: str,
    session_id: str,
    *,
    phase: str = "a",
    ended: bool = False,
    **fields: Any,
) -> TaskRecord:
    """A small record: pending at ``phase``, or terminal (completed) when ``ended``."""
    state = (
        Terminal(outcome=Completed(result={"phase": phase}))
        if ended
        else Pending(checkpoint={"phase": phase})
    )
    return TaskRecord(
        id=task_id,
        session_id=session_id,
        kind="k",
        version=1,
        state=state,
        created_at=0.0,
        **fields,
    )


def everything(store: Store, session_id: str, task_ids: Iterable[str]) -> tuple[Any, ...]:
    """All a reader can observe of a session: head, snapshot and every named task."""
    return (
        store.head(session_id),
        store.load(session_id),
        {t: store.get_task(session_id, t) for t in task_ids},
    )


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target in its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # reported in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    if errors:
        raise errors[0]


class StoreContract(AbsentDocsContract, AtHeadContract):
    """The behaviour the engine relies on, for any store (with the part on documents a commit
    requires absent, :mod:`store_contract_absent`)."""

    @pytest.fixture
    def other_store(self, store: Store) -> Store:
        """A second handle on the same storage; override where one exists."""
        return store

    # --- basics -----------------------------------------------------------------------------

    def test_a_session_never_written_is_empty(self, store: Store) -> None:
        sid = new_session()
        assert store.load(sid) == SessionSnapshot(sid, 0, {})
        assert store.head(sid) == 0
        assert store.get_task(sid, "nope") is None

    def test_commit_then_load(self, store: Store) -> None:
        sid = new_session()
        a, b = task("a", sid), task("b", sid, phase="b")
        assert store.commit(sid, 0, [a, b]) == 1
        snap = store.load(sid)
        assert snap == SessionSnapshot(sid, 1, {"a": a, "b": b})
        assert store.head(sid) == 1

    def test_commit_advances_seq_by_exactly_one(self, store: Store) -> None:
        sid = new_session()
        for expected in range(5):
            writes = [] if expected == 2 else [task("a", sid, memos={"n": expected})]
            assert store.commit(sid, expected, writes) == expected + 1
            assert store.head(sid) == expected + 1
            assert store.load(sid).seq == expected + 1
        assert store.get_task(sid, "a").memos == {"n": 4}  # type: ignore[union-attr]

    def test_get_task_finds_live_and_ended_tasks_and_none_for_missing(self, store: Store) -> None:
        sid = new_session()
        live, ended = task("live", sid), task("ended", sid, ended=True)
        store.commit(sid, 0, [live, ended])
        assert store.get_task(sid, "live") == live
        assert store.get_task(sid, "ended") == ended
        assert store.get_task(sid, "missing") is None
        assert store.get_task(new_session(), "live") is None

    def test_task_at_head_reads_the_seq_and_one_task_together(self, store: Store) -> None:
        sid = new_session()
        assert store.task_at_head(sid, "live") == (0, None)
        live, ended = task("live", sid), task("ended", sid, ended=True)
        store.commit(sid, 0, [live, ended])
        store.commit(sid, 1, [])
        assert store.task_at_head(sid, "live") == (2, live)
        assert store.task_at_head(sid, "ended") == (2, ended)
        assert store.task_at_head(sid, "missing") == (2, None)

    def test_task_at_head_never_pairs_a_seq_with_another_commits_task(
        self, store: Store, other_store: Store
    ) -> None:
        # Each commit n (seq n -> n + 1) writes the task with memo n: whatever interleaving,
        # a read at seq s must see memo s - 1, never an older or newer version.
        sid = new_session()
        store.commit(sid, 0, [task("a", sid, memos={"n": 0})])
        commits = 12
        seen: list[tuple[int, Any]] = []

        def writer() -> None:
            for n in range(1, commits + 1):
                store.commit(sid, n, [task("a", sid, memos={"n": n})])

        def reader() -> None:
            for _ in range(3 * commits):
                seq, record = other_store.task_at_head(sid, "a")
                seen.append((seq, None if record is None else record.memos["n"]))

        run_threads([writer, reader])
        assert seen and all(n == seq - 1 for seq, n in seen), seen

    def test_ended_tasks_leave_load_but_stay_readable(self, store: Store) -> None:
        sid = new_session()
        store.commit(sid, 0, [task("a", sid), task("b", sid), task("c", sid)])
        done = task("b", sid, ended=True, rev=1)
        store.commit(sid, 1, [done])
        snap = store.load(sid)
        assert set(snap.tasks) == {"a", "c"}
        assert store.get_task(sid, "b") == done
        assert not store.get_task(sid, "b").live  # type: ignore[union-attr]

    def test_the_latest_write_decides_live_or_ended(self, store: Store) -> None:
        # The engine never revives a terminal task, but the store's rule is plain: insert or
        # replace by id, and load() shows whichever records are live *now*.
        sid = new_session()
        store.commit(sid, 0, [task("a", sid, ended=True)])
        store.commit(sid, 1, [task("a", sid, phase="again")])
        assert store.load(sid).tasks["a"].state == Pending(checkpoint={"phase": "again"})

    def test_replacing_a_record_replaces_it(self, store: Store) -> None:
        sid = new_session()
        first = task("a", sid, memos={"keep": 1, "drop": 2}, input={"x": [1, 2]}, owner="p")
        store.commit(sid, 0, [first])
        second = task("a", sid, phase="b", memos={"keep": 3}, rev=1)
        store.commit(sid, 1, [second])
        assert store.get_task(sid, "a") == second  # nothing of the first version merged in
        assert store.load(sid).tasks == {"a": second}

    def test_the_last_write_of_an_id_in_one_commit_wins(self, store: Store) -> None:
        sid = new_session()
        store.commit(sid, 0, [task("a", sid, phase="one"), task("a", sid, phase="two")])
        assert store.load(sid).tasks["a"].state == Pending(checkpoint={"phase": "two"})

    def test_a_record_of_another_session_is_refused(self, store: Store) -> None:
        sid = new_session()
        with pytest.raises(ValueError):
            store.commit(sid, 0, [task("a", sid), task("b", new_session())])
        assert everything(store, sid, ["a", "b"]) == (
            0,
            SessionSnapshot(sid, 0, {}),
            {
                "a": None,
                "b": None,
            },
        )

    # --- the guard --------------------------------------------------------------------------

    @pytest.mark.parametrize("stale", [0, 1, 2, 4, 9])
    def test_a_stale_commit_conflicts_and_writes_nothing(self, store: Store, stale: int) -> None:
        sid = new_session()
        ids = ["a", "b", "c", "new"]
        store.commit(sid, 0, [task("a", sid), task("b", sid)])
        store.commit(sid, 1, [task("c", sid), task("b", sid, ended=True)])
        store.commit(sid, 2, [task("a", sid, phase="z")])
        before = everything(store, sid, ids)  # seq 3: both behind and ahead of it are stale
        writes = [task("a", sid, ended=True), task("b", sid), task("new", sid)]
        with pytest.raises(ConflictError) as caught:
            store.commit(sid, stale, writes)
        assert (caught.value.expected_seq, caught.value.actual_seq) == (stale, 3)
        assert caught.value.retryable
        assert everything(store, sid, ids) == before

    @pytest.mark.parametrize("expected", [1, 5])
    def test_a_session_never_written_conflicts_unless_expected_is_zero(
        self, store: Store, expected: int
    ) -> None:
        sid = new_session()
        with pytest.raises(ConflictError) as caught:
            store.commit(sid, expected, [task("a", sid)])
        assert caught.value.actual_seq == 0
        assert everything(store, sid, ["a"]) == (0, SessionSnapshot(sid, 0, {}), {"a": None})

    def test_two_writers_racing_one_wins_nothing_merged(
        self, store: Store, other_store: Store
    ) -> None:
        for _ in range(5):
            self._race_two_writers(store, other_store)

    def _race_two_writers(self, store: Store, other_store: Store) -> None:
        sid = new_session()
        store.commit(sid, 0, [task("shared", sid), task("other", sid)])
        barrier = threading.Barrier(2)
        outcomes: dict[str, tuple[int, list[TaskRecord]] | ConflictError] = {}

        def writer(name: str, handle: Store) -> None:
            snap = handle.load(sid)
            writes = [
                task("shared", sid, phase=name, memos={"by": name}),
                task(f"only-{name}", sid, phase=name),
                task("other", sid, ended=True, memos={"by": name}),
            ]
            barrier.wait()  # both loaded seq 1; now both commit on it at once
            try:
                outcomes[name] = (handle.commit(sid, snap.seq, writes), writes)
            except ConflictError as exc:
                outcomes[name] = exc

        run_threads([lambda: writer("x", store), lambda: writer("y", other_store)])
        wins = {n: o for n, o in outcomes.items() if not isinstance(o, ConflictError)}
        losses = {n: o for n, o in outcomes.items() if isinstance(o, ConflictError)}
        assert len(wins) == 1 and len(losses) == 1, outcomes
        (winner, (seq, writes)), (loser, error) = *wins.items(), *losses.items()
        assert seq == 2
        assert (error.expected_seq, error.actual_seq) == (1, 2)  # type: ignore[union-attr]
        expected = {r.id: r for r in writes}
        assert store.head(sid) == 2
        assert store.get_task(sid, f"only-{loser}") is None
        for task_id, written in expected.items():
            assert store.get_task(sid, task_id) == written
        assert store.load(sid).tasks == {
            "shared": expected["shared"],
            f"only-{winner}": expected[f"only-{winner}"],
        }

    def test_many_writers_racing_count_exactly_once(self, store: Store, other_store: Store) -> None:
        threads, rounds = 8, 20
        sid = new_session()
        store.commit(sid, 0, [task("counter", sid, memos={"count": 0})])
        barrier = threading.Barrier(threads)
        won: list[int] = []
        conflicts: list[int] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            handle = store if n % 2 == 0 else other_store
            rng = random.Random(n)
            barrier.wait()
            for _ in range(rounds):
                while True:
                    snap = handle.load(sid)
                    counter = snap.tasks["counter"]
                    bumped = counter.replace(
                        memos={"count": counter.memos["count"] + 1}, rev=counter.rev + 1
                    )
                    try:
                        seq = handle.commit(sid, snap.seq, [bumped])
                    except ConflictError:
                        with lock:
                            conflicts.append(n)
                        time.sleep(rng.random() * 0.002)
                        continue
                    with lock:
                        won.append(seq)
                    break

        run_threads([lambda n=n: worker(n) for n in range(threads)])
        final = store.load(sid)
        assert len(won) == threads * rounds
        assert sorted(won) == list(range(2, 2 + threads * rounds)), "each seq won exactly once"
        assert final.tasks["counter"].memos["count"] == threads * rounds
        assert final.seq == 1 + threads * rounds == store.head(sid)
        assert final.tasks["counter"].rev == threads * rounds

    def test_load_is_a_consistent_snapshot_while_commits_land(
        self, store: Store, other_store: Store
    ) -> None:
        # Each commit rewrites every task tagged with its own seq and moves a third of them
        # between live and ended; any snapshot mixing two commits is caught.
        sid = new_session()
        width, commits = 6, 30

        def generation(seq: int) -> list[TaskRecord]:
            return [
                task(f"t{i}", sid, ended=(seq + i) % 3 == 0, input={"seq": seq})
                for i in range(width)
            ]

        store.commit(sid, 0, generation(1))
        done, reading = threading.Event(), threading.Event()
        seen: list[int] = []

        def writer() -> None:
            try:
                reading.wait(timeout=30)
                for seq in range(1, commits):
                    store.commit(sid, seq, generation(seq + 1))
            finally:
                done.set()

        def reader() -> None:
            while not done.is_set():
                snap = other_store.load(sid)
                live = {r.id: r for r in generation(snap.seq) if r.live}
                assert snap.tasks == live, f"snapshot at seq {snap.seq} mixes commits"
                seen.append(snap.seq)
                reading.set()

        run_threads([writer, reader])
        assert store.load(sid).tasks == {r.id: r for r in generation(commits) if r.live}
        assert seen, "the reader never ran"

    # --- isolation and fidelity -------------------------------------------------------------

    def test_sessions_are_isolated(self, store: Store) -> None:
        s1, s2 = new_session(), new_session()
        store.commit(s1, 0, [task("a", s1, phase="one")])
        store.commit(s1, 1, [task("b", s1, ended=True)])
        store.commit(s2, 0, [task("a", s2, phase="two")])
        assert (store.head(s1), store.head(s2)) == (2, 1)
        assert store.load(s1).tasks == {"a": task("a", s1, phase="one")}
        assert store.load(s2).tasks == {"a": task("a", s2, phase="two")}
        assert store.get_task(s2, "b") is None
        with pytest.raises(ConflictError):
            store.commit(s2, 2, [])  # s1's seq means nothing to s2
        assert store.head(s2) == 1

    def test_records_round_trip_exactly(self, store: Store) -> None:
        sid = new_session()
        nested = {
            "text": 'ünïcødé ✓ 日本語 🚀 \u0000 "quoted" \\ back\nslash\ttab',
            "numbers": [0, -1, 2**62, 1.5, -2.25e-7, 1e300],
            "nested": {"list": [None, True, False, [], {}, [[{"deep": ["x"]}]]], "": "empty key"},
        }
        records = [
            TaskRecord(
                id="täsk/1 #ü",
                session_id=sid,
                kind="kïnd.v2",
                version=7,
                input=nested,
                owner="parent",
                background=True,
                key="creation/ключ",
                abort_marked=True,
                abort_reason="stop — now",
                memos={"m/1": nested, "m2": None, "m3": [1, "two"]},
                signals={
                    "approve/k1": SignalSlot(
                        version=2, value={"ok": True, "by": "Zoë"}, has_value=True, consumed=True
                    ),
                    "approve/k2": SignalSlot(expired=True),
                },
                state=Sleeping(
                    checkpoint={"phase": "wait", "data": nested},
                    until=1_767_225_600.125,
                    signals=(SignalKey("approve", "k1"), SignalKey("approve", "k2")),
                ),
                created_at=1_767_225_600.123456,
                restarts=2,
                rev=41,
            ),
            task("w", sid).replace(
                state=Waiting(checkpoint={"phase": "p"}, on=("a", "b"), policy="any")
            ),
            task("r", sid).replace(
                state=Running(
                    checkpoint={"phase": "p"},
                    wake=WakeSignal(signal="approve", key="k1"),
                    invocation="inv-1",
                )
            ),
            task("c", sid).replace(state=Completing(outcome=Failed(error={"why": nested}))),
            task("t", sid).replace(state=Terminal(outcome=Aborted(reason="user said ✋"))),
        ]
        store.commit(sid, 0, records)
        snap = store.load(sid)
        for original in records:
            stored = store.get_task(sid, original.id)
            assert stored == original
            assert stored.to_json() == original.to_json()  # type: ignore[union-attr]
            if original.live:
                assert snap.tasks[original.id].to_json() == original.to_json()
        assert set(snap.tasks) == {r.id for r in records if r.live}

    def test_a_large_record_round_trips(self, store: Store) -> None:
        sid = new_session()
        big = task(
            "big",
            sid,
            input={"blob": "x" * 900_000, "text": "ü✓" * 20_000, "list": list(range(5_000))},
            memos={"m": "y" * 10_000},
        )
        assert len(big.to_json().encode()) > 1_000_000
        store.commit(sid, 0, [big, task("small", sid)])
        assert store.get_task(sid, "big") == big
        assert store.load(sid).tasks == {"big": big, "small": task("small", sid)}
        ended = big.replace(state=Terminal(outcome=Completed(result=None)))
        store.commit(sid, 1, [ended])
        assert store.get_task(sid, "big") == ended
        assert set(store.load(sid).tasks) == {"small"}

    # --- documents ---------------------------------------------------------------------------

    def test_documents_round_trip_and_replace(self, store: Store) -> None:
        s = new_session()
        body = {"text": "héllo ✓", "n": [1, 2.5, None, True], "nested": {"a": {"b": "c"}}}
        store.commit(s, 0, [], [Doc("conv/c1", body)])
        assert store.get_doc(s, "conv/c1") == Doc("conv/c1", body)
        assert store.get_doc(s, "conv/none") is None
        store.commit(s, 1, [], [Doc("conv/c1", {"replaced": True})])
        assert store.get_doc(s, "conv/c1") == Doc("conv/c1", {"replaced": True})
        assert store.load(s).tasks == {}  # documents never load with the snapshot

    def test_documents_list_by_prefix_in_key_order(self, store: Store) -> None:
        s = new_session()
        keys = [f"conv/c1/e/{i:08d}" for i in (3, 1, 2, 10)] + ["conv/c10/e/00000001", "conv/c2"]
        store.commit(s, 0, [], [Doc(k, {"k": k}) for k in keys])
        listed = store.list_docs(s, "conv/c1/e/")
        assert [d.key for d in listed] == [f"conv/c1/e/{i:08d}" for i in (1, 2, 3, 10)]
        after = store.list_docs(s, "conv/c1/e/", start_after="conv/c1/e/00000002")
        assert [d.key for d in after] == ["conv/c1/e/00000003", "conv/c1/e/00000010"]
        limited = store.list_docs(s, "conv/c1/e/", limit=2)
        assert [d.key for d in limited] == ["conv/c1/e/00000001", "conv/c1/e/00000002"]
        assert store.list_docs(s, "nothing/") == []
        assert store.list_docs(new_session(), "conv/") == []  # sessions are isolated

    def test_documents_commit_atomically_with_tasks(self, store: Store) -> None:
        s = new_session()
        store.commit(s, 0, [task("t1", s)], [Doc("d/1", 1)])
        with pytest.raises(ConflictError):
            store.commit(s, 0, [task("t2", s)], [Doc("d/2", 2), Doc("d/1", "changed")])
        assert store.get_doc(s, "d/2") is None
        assert store.get_doc(s, "d/1") == Doc("d/1", 1)
        assert store.get_task(s, "t2") is None

    def test_a_commit_over_the_item_limit_is_refused_whole(self, store: Store) -> None:
        s = new_session()
        tasks = [task(f"t{i}", s) for i in range(50)]
        docs = [Doc(f"d/{i:03d}", i) for i in range(MAX_COMMIT_ITEMS - 50 + 1)]
        with pytest.raises(CommitTooLarge):
            store.commit(s, 0, tasks, docs)
        assert store.head(s) == 0 and store.list_docs(s, "d/") == []
        store.commit(s, 0, tasks, docs[:-1])  # exactly at the limit is fine
        assert len(store.list_docs(s, "d/")) == MAX_COMMIT_ITEMS - 50

    def test_an_ended_session_stays_readable_and_writable(self, store: Store) -> None:
        # What every store promises of the end (Store contract, "Ending a session"): the
        # commit writing SESSION_ENDED_KEY is an ordinary commit, and until the store's own
        # retention (if any) runs out the session reads and takes commits as before.
        sid = new_session()
        seq = store.commit(sid, 0, [task("a", sid)], [Doc("d/1", {"n": 1})])
        seq = store.commit(sid, seq, [task("b", sid)], [Doc(SESSION_ENDED_KEY, {"at": 1.5})])
        seq = store.commit(sid, seq, [task("c", sid, ended=True)], [Doc("d/2", {"n": 2})])
        assert store.head(sid) == seq == 3
        assert set(store.load(sid).tasks) == {"a", "b"}
        assert store.get_task(sid, "c") is not None
        assert store.get_doc(sid, SESSION_ENDED_KEY) == Doc(SESSION_ENDED_KEY, {"at": 1.5})
        assert [d.key for d in store.list_docs(sid, "d/")] == ["d/1", "d/2"]

    def test_document_limits(self, store: Store) -> None:
        s = new_session()
        store.commit(s, 0, [], [Doc("d/1", 1), Doc("d/2", 2)])
        assert store.list_docs(s, "d/", limit=0) == []
        with pytest.raises(ValueError):
            store.list_docs(s, "d/", limit=-1)
        with pytest.raises(ValueError):
            store.commit(s, 1, [], [Doc("d/" + "x" * 1100, 1)])
        assert store.head(s) == 1
