"""Retention of ended sessions in the DynamoDB store (bide.aws.retention): the end commit
records the end and expiry, every item of the session ends up carrying DynamoDB's TTL
attribute (also for a session far longer than one commit, and after a crash between items),
offloaded values are tagged for the bucket's lifecycle rule, and readers treat an expired
session as gone. DynamoDB TTL deletes expired items only eventually (typically within a few
days) and they still show in reads until then:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html. Run on moto and on
DynamoDB Local (skipped with the reason unless $BIDE_DYNAMODB_LOCAL_ENDPOINT is set)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from aws_fixtures import (
    AwsBench,
    FaultyClient,
    aws_bench,
    client_error,
    expiries,
    partition_items,
)
from store_contract import new_session, task

from bide.aws.dynamodb import DynamoDBStore
from bide.aws.retention import ENDED_TAG_KEY, ENDED_TAG_VALUE, EXPIRES_AT
from bide.engine.errors import StoreUnavailable
from bide.engine.store.base import MAX_COMMIT_ITEMS, SESSION_ENDED_KEY, Doc

__all__ = ["aws_bench"]

DAY = 86_400.0
ENDED = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class Clock:
    def __init__(self, now: float = ENDED) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def retaining(bench: AwsBench, clock: Clock, days: float | None = 30, **kw: Any) -> DynamoDBStore:
    store = bench.store(**kw)
    store.set_retention(None if days is None else days * DAY, clock=clock)
    return store


def end_doc(at: float = ENDED) -> Doc:
    return Doc(SESSION_ENDED_KEY, {"at": at})


def long_session(store: DynamoDBStore, sid: str, tasks: int, docs: int) -> int:
    """Write ``tasks`` task records and ``docs`` documents in full commits; the seq."""
    seq = 0
    writes: list[Any] = [task(f"t{n:04d}", sid, ended=n % 2 == 0) for n in range(tasks)]
    writes += [Doc(f"d/{n:05d}", {"n": n}) for n in range(docs)]
    for start in range(0, len(writes), MAX_COMMIT_ITEMS):
        chunk = writes[start : start + MAX_COMMIT_ITEMS]
        records = [w for w in chunk if not isinstance(w, Doc)]
        seq = store.commit(sid, seq, records, [w for w in chunk if isinstance(w, Doc)])
    return seq


def test_the_end_commit_records_the_end_and_stamps_what_it_and_later_commits_write(
    aws_bench: AwsBench,
) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock)
    sid = new_session()
    seq = store.commit(sid, 0, [task("before", sid)], [Doc("d/before", 1)])
    seq = store.commit(sid, seq, [task("at-end", sid)], [end_doc()])
    expiry = math.ceil(ENDED + 30 * DAY)
    head = aws_bench.ddb.get_item(
        TableName=aws_bench.table, Key={"pk": {"S": sid}, "sk": {"S": "HEAD"}}
    )["Item"]
    assert float(head["ended_at"]["N"]) == ENDED
    assert int(head[EXPIRES_AT]["N"]) == expiry
    seq = store.commit(sid, seq, [task("after", sid)], [Doc("d/after", 2)])
    found = expiries(aws_bench, sid)
    assert found["T#before"] is None and found["D#d/before"] is None  # stamped later
    assert found["T#at-end"] == found["D#" + SESSION_ENDED_KEY] == expiry
    assert found["T#after"] == found["D#d/after"] == expiry
    # A second "end" changes nothing: the first end stands.
    store.commit(sid, seq, [], [end_doc(ENDED + 5 * DAY)])
    assert expiries(aws_bench, sid)["D#" + SESSION_ENDED_KEY] == expiry

    assert store.stamp_ended(sid) == 2  # the two items written before the end
    assert set(expiries(aws_bench, sid).values()) == {expiry}
    assert store.stamp_ended(sid) == 0  # finished: nothing to do again


def test_a_store_that_never_saw_the_end_still_stamps_its_writes(aws_bench: AwsBench) -> None:
    clock = Clock()
    ender, stale = retaining(aws_bench, clock), retaining(aws_bench, clock)
    sid = new_session()
    seq = stale.commit(sid, 0, [task("a", sid)])
    seq = ender.commit(sid, seq, [], [end_doc()])
    # `stale` last saw seq 1 (not ended) and is told the current seq by someone else.
    stale.commit(sid, seq, [task("late", sid)], [Doc("d/late", 1)])
    found = expiries(aws_bench, sid)
    assert found["T#late"] == found["D#d/late"] == math.ceil(ENDED + 30 * DAY)


def test_a_long_session_is_stamped_whole_even_after_a_crash_midway(aws_bench: AwsBench) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock)
    sid = new_session()
    seq = long_session(store, sid, tasks=130, docs=250)  # 380 items: four commits' worth
    store.commit(sid, seq, [], [end_doc()])
    # The stamping process dies after 150 items (a non-retryable error stops it).
    faults = {"update_item": [None] * 150 + [lambda call: (_ for _ in ()).throw(RuntimeError)]}
    crashing = FaultyClient(aws_bench.ddb, plan=faults)  # type: ignore[arg-type]
    crashing_store = retaining(aws_bench, clock, client=crashing)
    with pytest.raises(RuntimeError):
        crashing_store.stamp_ended(sid)
    unstamped = [k for k, v in expiries(aws_bench, sid).items() if v is None]
    assert len(unstamped) == 380 - 150
    # The next attempt finishes exactly what is left, then nothing remains.
    counting = FaultyClient(aws_bench.ddb)
    assert retaining(aws_bench, clock, client=counting).stamp_ended(sid) == len(unstamped)
    assert counting.count("update_item") == len(unstamped) + 1  # and the head's mark
    assert set(expiries(aws_bench, sid).values()) == {math.ceil(ENDED + 30 * DAY)}
    assert len(expiries(aws_bench, sid)) == 130 + 250 + 2  # tasks, docs, end doc, head


def test_offloaded_values_are_tagged_for_the_lifecycle_rule(aws_bench: AwsBench) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock, offload_threshold=100)
    sid = new_session()
    big = {"text": "x" * 500}
    seq = store.commit(sid, 0, [], [Doc("d/before", big)])
    seq = store.commit(sid, seq, [], [end_doc()])
    store.commit(sid, seq, [], [Doc("d/after", {**big, "n": 2})])

    def tags() -> dict[str, dict[str, str]]:
        found = {}
        for item in partition_items(aws_bench, sid):
            if "s3_key" in item:
                out = aws_bench.s3.get_object_tagging(
                    Bucket=item["s3_bucket"]["S"], Key=item["s3_key"]["S"]
                )
                found[item["sk"]["S"]] = {t["Key"]: t["Value"] for t in out["TagSet"]}
        return found

    assert tags() == {"D#d/before": {}, "D#d/after": {ENDED_TAG_KEY: ENDED_TAG_VALUE}}
    store.stamp_ended(sid)
    assert tags() == {
        "D#d/before": {ENDED_TAG_KEY: ENDED_TAG_VALUE},
        "D#d/after": {ENDED_TAG_KEY: ENDED_TAG_VALUE},
    }
    assert store.get_doc(sid, "d/before") == Doc("d/before", big)  # the copy kept the value


def test_an_expired_session_reads_as_gone_and_its_id_starts_afresh(aws_bench: AwsBench) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock)
    sid = new_session()
    seq = store.commit(sid, 0, [task("a", sid)], [Doc("d/1", 1)])
    seq = store.commit(sid, seq, [task("b", sid)], [end_doc()])
    store.stamp_ended(sid)
    clock.now = ENDED + 30 * DAY - 1
    assert store.head(sid) == seq and store.get_doc(sid, "d/1") == Doc("d/1", 1)
    assert store.task_and_doc_at_head(sid, "a", "d/1")[::2] == (seq, Doc("d/1", 1))
    clock.now = ENDED + 30 * DAY + 1  # past the expiry; TTL has not deleted anything yet
    assert len(partition_items(aws_bench, sid)) == 5
    assert store.head(sid) == 0
    assert store.load(sid).seq == 0 and store.load(sid).tasks == {}
    assert store.get_task(sid, "a") is None and store.get_doc(sid, "d/1") is None
    assert store.task_and_doc_at_head(sid, "a", "d/1") == (0, None, None)
    assert store.list_docs(sid, "") == []
    # A first commit of the id succeeds over the expired head and sees nothing of the old.
    assert store.commit(sid, 0, [task("c", sid)], [Doc("d/2", 2)]) == 1
    assert set(store.load(sid).tasks) == {"c"}
    assert [d.key for d in store.list_docs(sid, "d/")] == ["d/2"]
    assert store.head(sid) == 1


def test_without_retention_the_end_is_recorded_and_nothing_expires(aws_bench: AwsBench) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock, days=None)
    sid = new_session()
    seq = store.commit(sid, 0, [task("a", sid)])
    store.commit(sid, seq, [], [end_doc()])
    head = aws_bench.ddb.get_item(
        TableName=aws_bench.table, Key={"pk": {"S": sid}, "sk": {"S": "HEAD"}}
    )["Item"]
    assert float(head["ended_at"]["N"]) == ENDED and EXPIRES_AT not in head
    assert store.stamp_ended(sid) == 0
    assert set(expiries(aws_bench, sid).values()) == {None}


def test_linked_documents_of_other_partitions_expire_with_the_session(
    aws_bench: AwsBench,
) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock)
    sid, index = new_session(), "#owner/" + new_session()
    store.commit(index, 0, [], [Doc("s/1", {"session_id": sid}), Doc("s/2", {"other": 1})])
    seq = store.commit(sid, 0, [task("a", sid)])
    store.commit(sid, seq, [], [end_doc()])
    store.stamp_ended(sid, linked=[(index, "s/1")])
    assert expiries(aws_bench, index) == {
        "HEAD": None,
        "D#s/1": math.ceil(ENDED + 30 * DAY),
        "D#s/2": None,
    }
    clock.now = ENDED + 31 * DAY
    assert [d.key for d in store.list_docs(index, "s/")] == ["s/2"]


def test_stamping_retries_throttling_and_gives_up_clearly(aws_bench: AwsBench) -> None:
    clock = Clock()
    store = retaining(aws_bench, clock)
    sid = new_session()
    seq = store.commit(sid, 0, [task("a", sid)])
    store.commit(sid, seq, [], [end_doc()])
    throttle = client_error("ThrottlingException", "UpdateItem")

    def throttled(call: Any) -> Any:
        raise throttle

    flaky = FaultyClient(aws_bench.ddb, plan={"update_item": [throttled, throttled]})
    assert retaining(aws_bench, clock, client=flaky).stamp_ended(sid) == 1  # task "a"
    assert flaky.count("update_item") == 4  # two throttled, the item, the head's mark
    always = FaultyClient(aws_bench.ddb, always={"update_item": throttled})
    sid2 = new_session()
    seq = store.commit(sid2, 0, [task("a", sid2)])
    store.commit(sid2, seq, [], [end_doc()])
    with pytest.raises(StoreUnavailable, match="stamp expiry"):
        retaining(aws_bench, clock, client=always, max_attempts=3).stamp_ended(sid2)
