"""Every stored value reads back: the limits of :mod:`bide.engine.limits` on every path into
the store.

A value nested :data:`MAX_JSON_DEPTH` levels is stored and its session loads back from a
fresh connection; one level more is refused on every path (in-process ``signal``, a host
commit's ``tx.signal``, ``deliver_signal``, ``bide.testing.deliver_webhook``, a promise's
resolution, a task's result, memo or checkpoint, the HTTP signal and webhook routes) with
nothing stored. A value over :data:`MAX_VALUE_BYTES` is refused (413 over HTTP). A task
holding values under many keys or stream slots hits its budget with a clear refusal, and
its session still loads. The depth and budget cases run on DynamoDB (moto) too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aws_fixtures import moto_bench, unique
from limits_fixtures import (
    BLOB,
    HOLDER,
    RAISER,
    STORER,
    HttpSession,
    bind_webhook,
    http,
    limits_app,
    loads_back,
    nested,
    post_json,
)

from bide import (
    ManualClock,
    SequentialIds,
    SQLiteStore,
    Store,
    constants,
    deliver_signal,
)
from bide.engine.harness import Harness
from bide.engine.host import host_commit
from bide.engine.limits import (
    ENVELOPE_DEPTH,
    MAX_JSON_DEPTH,
    MAX_TASK_PENDING_SIGNALS,
    MAX_TASK_SIGNAL_BYTES,
    MAX_VALUE_BYTES,
    MAX_WRITTEN_ONCE_BYTES,
    TaskBudgetExceeded,
    ValueRefused,
    ValueTooDeep,
    ValueTooLarge,
    value_bytes,
)
from bide.engine.store.base import Store as StorePort
from bide.promises import (
    create_promise,
    promise_task_kinds,
    read_promise,
    resolve_promise,
)
from bide.testing import deliver_webhook

DEEP_OK, TOO_DEEP = MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1


def run(coro: Awaitable[Any]) -> Any:
    import asyncio

    async def main() -> Any:
        return await coro

    return asyncio.run(main())


class Session:
    """A harness on ``store`` with a holder task parked, and a simulated clock."""

    def __init__(self, store: StorePort, session_id: str = "s1") -> None:
        self.store = store
        self.app = limits_app()
        self.clock = ManualClock()
        self.h = Harness(
            store,
            session_id,
            [HOLDER, STORER, RAISER, *promise_task_kinds()],
            clock=self.clock,
            ids=SequentialIds(),
        )
        run(self.h.open())
        self.task = run(self.h.create_task(HOLDER))
        run(self.h.run_until_parked())
        self.bound_at: int | None = None

    def since(self, before: int) -> int:
        """The head a refused delivery must leave: ``before``, or after a webhook binding."""
        return self.bound_at if self.bound_at is not None else before

    @property
    def sid(self) -> str:
        return self.h.session_id

    def head(self) -> int:
        return self.store.head(self.sid)


# --- every path, at the limit and one past it ---------------------------------------------------

Deliver = Callable[[Session, str, Any], None]


def by_harness(s: Session, key: str, value: Any) -> None:
    run(s.h.signal(s.task, BLOB, key, value))


def by_host_commit(s: Session, key: str, value: Any) -> None:
    host_commit(s.h, lambda tx: tx.signal(s.task, BLOB, key, value))


def by_deliver_signal(s: Session, key: str, value: Any) -> None:
    deliver_signal(s.store, s.sid, s.task, BLOB, key, value, s.clock)


def by_testing_webhook(s: Session, key: str, value: Any) -> None:
    token = bind_webhook(s.h, s.task, key)
    s.bound_at = s.head()  # writing the binding is set-up, not the delivery
    run(deliver_webhook(s.h, s.app, f"http://x/hooks/{token}", value))


PATHS: dict[str, Deliver] = {
    "Harness.signal": by_harness,
    "host tx.signal": by_host_commit,
    "deliver_signal": by_deliver_signal,
    "bide.testing.deliver_webhook": by_testing_webhook,
}


@pytest.fixture
def session() -> Iterator[Session]:
    store = SQLiteStore()
    yield Session(store)
    store.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_signal_at_the_depth_limit_is_stored_and_loads_back(session: Session, path: str) -> None:
    PATHS[path](session, "k", nested(DEEP_OK))
    held = loads_back(session.store, session.sid)
    assert held[BLOB.key("k").slot] == nested(DEEP_OK)


@pytest.mark.parametrize("path", PATHS)
def test_a_signal_one_level_past_the_limit_is_refused_and_nothing_stored(
    session: Session, path: str
) -> None:
    before = session.head()
    with pytest.raises(ValueTooDeep) as refused:
        PATHS[path](session, "k", nested(TOO_DEEP))
    after = session.since(before)
    assert session.head() == after, "a refused value wrote to the session"
    message = str(refused.value)
    assert f"nests {TOO_DEEP} levels; the limit is {MAX_JSON_DEPTH}" in message
    assert "'test.blob' key 'k'" in message and "nothing was stored" in message
    assert refused.value.status == 400 and refused.value.limit == MAX_JSON_DEPTH
    assert loads_back(session.store, session.sid) == {}


@pytest.mark.parametrize("path", PATHS)
def test_a_signal_over_the_size_limit_is_refused_with_413(session: Session, path: str) -> None:
    before = session.head()
    big = "x" * (MAX_VALUE_BYTES - 1)  # two quotes make it one byte over
    with pytest.raises(ValueTooLarge) as refused:
        PATHS[path](session, "k", big)
    assert session.head() == session.since(before)
    assert refused.value.status == 413
    assert f"is {MAX_VALUE_BYTES + 1} bytes of JSON; the limit is {MAX_VALUE_BYTES}" in str(
        refused.value
    )
    PATHS[path](session, "k2", "x" * (MAX_VALUE_BYTES - 2))  # exactly at the limit
    assert len(loads_back(session.store, session.sid)[BLOB.key("k2").slot]) == MAX_VALUE_BYTES - 2


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("-inf"), 10**5000, "\ud800", {"\udfff": 1}],
    ids=["nan", "inf", "huge int", "lone surrogate", "lone surrogate key"],
)
def test_a_value_json_cannot_hold_is_refused(session: Session, value: Any) -> None:
    before = session.head()
    with pytest.raises(ValueRefused) as refused:
        by_deliver_signal(session, "k", [value])
    assert "is not JSON" in str(refused.value) and refused.value.status == 400
    assert session.head() == before


@pytest.mark.parametrize("where", ["result", "memo", "checkpoint"])
def test_a_task_storing_a_value_at_the_limit_stores_it(session: Session, where: str) -> None:
    task = run(session.h.create_task(STORER, {"depth": DEEP_OK, "where": where}))
    run(session.h.run_until_parked())
    record = session.store.get_task(session.sid, task)
    assert record is not None
    record = type(record).from_json(record.to_json())
    if where == "result":
        assert record.state.outcome.result == nested(DEEP_OK)  # type: ignore[union-attr]
    elif where == "checkpoint":
        assert record.state.checkpoint["value"] == nested(DEEP_OK - 1)  # type: ignore[union-attr]
    else:
        assert record.state.outcome.result == "memo stored"  # type: ignore[union-attr]
    loads_back(session.store, session.sid)


@pytest.mark.parametrize(
    ("where", "field"),
    [("result", "the result"), ("memo", "memo 'big'"), ("checkpoint", "the checkpoint")],
)
def test_a_task_storing_a_value_past_the_limit_faults_naming_it(
    session: Session, where: str, field: str
) -> None:
    for depth in (TOO_DEEP, 300):  # 300: past what pydantic itself can write or read back
        task = run(session.h.create_task(STORER, {"depth": depth, "where": where}))
        run(session.h.run_until_parked())
        record = session.store.get_task(session.sid, task)
        assert record is not None and record.state.status == "terminal"
        outcome = record.state.outcome  # type: ignore[union-attr]
        assert outcome.status == "faulted", outcome
        assert "ValueTooDeep" in outcome.error
        assert f"{field} of task {task!r} nests {depth} levels; the limit is 64" in outcome.error
        assert record.memos == {} and "value" not in json.dumps(record.state.to_dict())
    loads_back(session.store, session.sid)


def test_a_task_result_over_the_size_limit_faults(session: Session) -> None:
    storing = {"depth": 0, "where": "result", "pad": MAX_WRITTEN_ONCE_BYTES}
    task = run(session.h.create_task(STORER, storing))
    run(session.h.run_until_parked())
    record = session.store.get_task(session.sid, task)
    assert record is not None
    outcome = record.state.outcome  # type: ignore[union-attr]
    assert outcome.status == "faulted" and "ValueTooLarge" in outcome.error, outcome
    assert f"the limit is {MAX_WRITTEN_ONCE_BYTES}" in outcome.error


def test_a_fault_with_a_long_message_still_ends_the_task(session: Session) -> None:
    """The engine's own fault is never refused: the task would otherwise never end."""
    task = run(session.h.create_task(RAISER, {"chars": 2 * MAX_VALUE_BYTES}))
    run(session.h.run_until_parked())
    outcome = session.h.outcome(task)
    assert outcome is not None and outcome.status == "faulted"
    loads_back(session.store, session.sid)


def test_a_promise_value_at_the_limit_resolves_and_one_past_is_refused(session: Session) -> None:
    host_commit(session.h, lambda tx: create_promise(tx, "p1"))
    before = session.head()
    with pytest.raises(ValueTooDeep, match="the value of promise 'p1' nests 65 levels"):
        host_commit(session.h, lambda tx: resolve_promise(tx, "p1", "resolved", nested(TOO_DEEP)))
    assert session.head() == before
    host_commit(session.h, lambda tx: resolve_promise(tx, "p1", "resolved", nested(DEEP_OK)))
    doc = read_promise(session.h, "p1")
    assert doc is not None and doc.status == "resolved" and doc.value == nested(DEEP_OK)
    # The keeper holds the outcome (the value one level down in its envelope), and loads.
    held = loads_back(session.store, session.sid)
    assert any(v.get("value") == nested(DEEP_OK) for v in held.values() if isinstance(v, dict))


def test_documents_are_checked_with_room_for_what_bide_wraps(session: Session) -> None:
    deepest = MAX_JSON_DEPTH + ENVELOPE_DEPTH
    host_commit(session.h, lambda tx: tx.put_doc("app/deep", nested(deepest)))
    text = "\U0001f600" * 100_000  # the longest input the sessions API takes, 4 bytes a char
    host_commit(session.h, lambda tx: tx.put_doc("app/long", {"content": text}))
    before = session.head()
    with pytest.raises(ValueTooDeep, match="document 'app/deeper'"):
        host_commit(session.h, lambda tx: tx.put_doc("app/deeper", nested(deepest + 1)))
    with pytest.raises(ValueTooLarge, match=f"the limit is {MAX_WRITTEN_ONCE_BYTES}"):
        host_commit(session.h, lambda tx: tx.put_doc("app/big", "z" * MAX_WRITTEN_ONCE_BYTES))
    assert session.head() == before
    assert session.store.get_doc(session.sid, "app/deep").body == nested(deepest)  # type: ignore[union-attr]


# --- the per-task budget -------------------------------------------------------------------------

PIECE = "y" * (MAX_VALUE_BYTES - 1024)  # about a quarter of the bytes budget


def fill_bytes_budget(s: Session, deliver: Deliver) -> int:
    """Deliver ``PIECE`` under new keys until one more would pass the budget; how many."""
    fits = MAX_TASK_SIGNAL_BYTES // value_bytes(PIECE, "piece")
    for n in range(fits):
        deliver(s, f"k{n}", PIECE)
    return fits


@pytest.mark.parametrize("path", ["Harness.signal", "deliver_signal"])
def test_values_under_many_keys_hit_the_task_bytes_budget(session: Session, path: str) -> None:
    fits = fill_bytes_budget(session, PATHS[path])
    before = session.head()
    with pytest.raises(TaskBudgetExceeded) as refused:
        PATHS[path](session, "one-more", PIECE)
    assert session.head() == before
    message = str(refused.value)
    assert f"the limit is {MAX_TASK_SIGNAL_BYTES}" in message and session.task in message
    assert refused.value.status == 413
    held = loads_back(session.store, session.sid)
    assert len(held) == fits and all(v == PIECE for v in held.values())
    # A small value still fits, and the task still wakes and ends.
    PATHS[path](session, "wait", "go")
    run(session.h.run_until_parked())
    assert session.h.outcome(session.task) is not None


def test_a_stream_nobody_reads_hits_the_pending_budget(session: Session) -> None:
    for n in range(MAX_TASK_PENDING_SIGNALS):
        by_deliver_signal(session, "events.*", {"n": n})
    before = session.head()
    with pytest.raises(TaskBudgetExceeded) as refused:
        by_deliver_signal(session, "events.*", {"n": "one more"})
    assert session.head() == before
    assert f"the limit is {MAX_TASK_PENDING_SIGNALS}" in str(refused.value)
    assert "once the task has consumed some" in str(refused.value)
    held = loads_back(session.store, session.sid)
    assert held[BLOB.key(f"events.{MAX_TASK_PENDING_SIGNALS - 1}").slot] == {
        "n": MAX_TASK_PENDING_SIGNALS - 1
    }
    assert BLOB.key(f"events.{MAX_TASK_PENDING_SIGNALS}").slot not in held


def test_the_limits_agree_with_the_http_limits() -> None:
    assert constants.MAX_JSON_DEPTH == MAX_JSON_DEPTH
    assert constants.MAX_WEBHOOK_BODY_BYTES == MAX_VALUE_BYTES


# --- DynamoDB (moto): depth and budget ----------------------------------------------------------


@pytest.fixture(scope="module")
def dynamo() -> Iterator[Any]:
    with moto_bench() as bench:
        yield bench


def dynamo_session(bench: Any) -> Session:
    return Session(bench.store(), unique("s"))


@pytest.mark.parametrize("path", ["Harness.signal", "deliver_signal"])
def test_dynamodb_depth_limit(dynamo: Any, path: str) -> None:
    s = dynamo_session(dynamo)
    PATHS[path](s, "k", nested(DEEP_OK))
    before = s.head()
    with pytest.raises(ValueTooDeep):
        PATHS[path](s, "k2", nested(TOO_DEEP))
    assert s.head() == before
    fresh: Store = dynamo.store()
    assert loads_back(fresh, s.sid) == {BLOB.key("k").slot: nested(DEEP_OK)}


def test_dynamodb_task_result_past_the_limit_faults(dynamo: Any) -> None:
    s = dynamo_session(dynamo)
    task = run(s.h.create_task(STORER, {"depth": 300, "where": "result"}))
    run(s.h.run_until_parked())
    record = dynamo.store().get_task(s.sid, task)
    assert record is not None
    outcome = record.state.outcome  # type: ignore[union-attr]
    assert outcome.status == "faulted" and "nests 300 levels; the limit is 64" in outcome.error
    loads_back(dynamo.store(), s.sid)


def test_dynamodb_bytes_budget(dynamo: Any) -> None:
    s = dynamo_session(dynamo)
    fits = fill_bytes_budget(s, by_deliver_signal)
    before = s.head()
    with pytest.raises(TaskBudgetExceeded):
        by_deliver_signal(s, "one-more", PIECE)
    assert s.head() == before
    assert len(loads_back(dynamo.store(), s.sid)) == fits


def test_json_dumps_of_the_budget_is_what_the_check_counts() -> None:
    """The byte measure is the stored form: compact UTF-8 JSON."""
    value = {"é": ["a", 1, None]}
    assert value_bytes(value, "v") == len(
        json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    )


# --- over HTTP, on the local stack ---------------------------------------------------------------

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from bide.local import LocalStack
    from bide.local.thread import BackgroundStack

    db = str(tmp_path_factory.mktemp("limits") / "dev.sqlite")
    with BackgroundStack(LocalStack(limits_app(), db, port=0)) as running:
        assert running.url.startswith("http://127.0.0.1:")
        yield running


@pytest.fixture
def web(stack: Any) -> Iterator[HttpSession]:
    s = HttpSession(stack, unique("s"))
    yield s
    s.close()


@pytest.mark.parametrize("route", ["signal", "hook", "stream"])
def test_http_depth_limit(web: HttpSession, route: str) -> None:
    url = {"signal": web.signal_url("k"), "hook": web.hook_url, "stream": web.stream_url}[route]
    before = web.head()
    status, answer = post_json(url, nested(TOO_DEEP))
    assert status == 400, answer
    # The body parser refuses it first (service/json_body.py); the value check stands behind.
    assert f"nests {TOO_DEEP} levels deep; the limit is {MAX_JSON_DEPTH}" in answer["error"]
    assert web.head() == before and web.held() == {}
    status, answer = post_json(url, nested(DEEP_OK))
    assert (status, answer["result"]) == (202, "delivered")
    assert list(web.held().values()) == [nested(DEEP_OK)]


def test_http_a_body_under_the_body_limit_stored_larger_is_a_413(web: HttpSession) -> None:
    """``1e9`` is 3 bytes in the body and ``1000000000.0`` (12) stored: a body the route
    accepts by size can make a value over the size limit, refused by the value check."""
    body = b"[" + b",".join([b"1e9"] * 40_000) + b"]"
    assert len(body) < constants.MAX_WEBHOOK_BODY_BYTES
    for url in (web.signal_url("k"), web.hook_url):
        status, answer = http("POST", url, body, JSON)
        assert status == 413, answer
        assert f"the limit is {MAX_VALUE_BYTES}" in answer["error"]
    assert web.held() == {}


def test_http_the_task_budget_is_a_413_and_the_session_still_loads(
    web: HttpSession, stack: Any
) -> None:
    fits = MAX_TASK_SIGNAL_BYTES // value_bytes(PIECE, "piece")
    for n in range(fits):
        assert post_json(web.signal_url(f"k{n}"), PIECE)[0] == 202
    before = web.head()
    for url in (web.signal_url("one-more"), web.hook_url, web.stream_url):
        status, answer = post_json(url, PIECE)
        assert status == 413, answer
        assert f"the limit is {MAX_TASK_SIGNAL_BYTES}" in answer["error"]
    assert web.head() == before
    assert len(web.held()) == fits
    assert post_json(web.signal_url("wait"), "go")[0] == 202
    assert stack.settle(10)
    record = web.store.get_task(web.sid, web.task)
    assert record is not None and record.state.status == "terminal"
