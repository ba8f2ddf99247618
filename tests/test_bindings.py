"""Workflow-tool bindings (design 002): admission rules, trusted destinations, joined calls,
keyed promises from a started execution, correlated replies, per-key cancellation."""

from __future__ import annotations

import pytest
from kit import HOUR, Kit, run
from pydantic import BaseModel

from bide import Sleeping, define_task
from bide.bindings import (
    BindingRule,
    BindingSet,
    InvalidBinding,
    Pull,
    Push,
    Receiver,
    ReplyRejected,
    Start,
    WorkflowBinding,
    binding_violations,
    pull_invocations,
    read_invocation,
    task_receiver,
)
from bide.promises import PROMISE_CANCELLED, Promises, promise_tools, read_promise
from bide.tools import ToolRegistry, result_of


class Question(BaseModel):
    question: str


class Answer(BaseModel):
    text: str


class Jobs(BaseModel):
    jobs: list[str]


def _desk_handler(tx, envelope):
    log = tx.get_doc("desk/log") or []
    tx.put_doc("desk/log", [*log, envelope])
    if envelope["type"] == "request" and envelope["arguments"].get("question") == "echo":
        # The receiver answers from its own state, in its own commit: it is the producer.
        ref = envelope["keys"]["result"]
        BINDINGS.reply_in(
            tx,
            envelope["invocation"],
            "result",
            correlation=ref["correlation"],
            value={"text": "echo!"},
        )


DESK = task_receiver("desk", _desk_handler)
ARCHIVE = Receiver("archive")


async def _run_jobs(task, rt):
    keys = list(task.input["keys"])
    cancelled = [k for k in keys if await rt.read_signal(PROMISE_CANCELLED, k) is not None]

    def build(tx):
        tx.put_doc(f"jobs/{task.id}", {"cancelled": cancelled})
        waiting = tuple(PROMISE_CANCELLED.key(k) for k in keys if k not in cancelled)
        return Sleeping(
            checkpoint={"phase": "run", "seen": len(cancelled)},
            signals=waiting,
            until=rt.now() + 100 * HOUR,
        )

    await rt.commit(build)


JOBS = define_task("test.jobs", 1, lambda _: "run", {"run": _run_jobs})

ASK = WorkflowBinding(
    "ask_desk",
    "Ask the desk a question",
    Question,
    Push(DESK),
    "joined",
    hard_deadline=HOUR,
    reply_schema=Answer,
)
TELL = WorkflowBinding("tell_desk", "Tell the desk", Question, Push(DESK), "accepted")
FILE = WorkflowBinding("file_report", "File a report", Question, Pull(ARCHIVE), "accepted")
RUN = WorkflowBinding(
    "run_jobs",
    "Run compute jobs",
    Jobs,
    Start(JOBS),
    "promises",
    hard_deadline=2 * HOUR,
    keys=lambda args: args.jobs,
)
BINDINGS = BindingSet([ASK, TELL, FILE, RUN])


def session():
    registry = ToolRegistry([*BINDINGS.tools, *promise_tools()])
    k = Kit(registry.task, *BINDINGS.task_kinds())
    return k, registry


async def call(k, registry, name, arguments):
    return await k.h.create_task(registry.task, registry.call(name, arguments))


def desk_log(k):
    return k.h.get_doc("desk/log") or []


# --- admission -------------------------------------------------------------------------------

INVALID = [
    (
        "pull",
        "joined",
        HOUR,
        {BindingRule.PULL_ACCEPTED_ONLY, BindingRule.JOINED_NEEDS_PUSH_OR_START},
    ),
    ("pull", "promises", None, {BindingRule.PULL_ACCEPTED_ONLY}),
    ("push", "joined", None, {BindingRule.JOINED_NEEDS_HARD_DEADLINE}),
    ("push", "joined", 0, {BindingRule.JOINED_NEEDS_HARD_DEADLINE}),
    ("start", "joined", None, {BindingRule.JOINED_NEEDS_HARD_DEADLINE}),
    ("start", "accepted", None, {BindingRule.START_NEEDS_PROMISE_COMPLETION}),
    ("push", "promises", -5, {BindingRule.DEADLINE_POSITIVE}),
    ("push", "accepted", HOUR, {BindingRule.ACCEPTED_HAS_NO_RESULT}),
]


def destination(kind):
    return {"push": Push(DESK), "pull": Pull(ARCHIVE), "start": Start(JOBS)}[kind]


@pytest.mark.parametrize(("kind", "completion", "deadline", "rules"), INVALID)
def test_each_invalid_combination_is_rejected_naming_its_rule(kind, completion, deadline, rules):
    assert set(binding_violations(kind, completion, deadline)) == rules
    with pytest.raises(InvalidBinding) as caught:
        WorkflowBinding("t", "", Question, destination(kind), completion, hard_deadline=deadline)
    assert set(caught.value.rules) == rules
    message = str(caught.value)
    for rule in rules:
        assert rule.value in message
    assert "is not admitted" in message


def test_the_error_says_the_rule_in_words():
    with pytest.raises(InvalidBinding, match="pull dispatch supports accepted completion only"):
        WorkflowBinding("t", "", Question, Pull(ARCHIVE), "promises")
    with pytest.raises(InvalidBinding, match="joined completion needs a nonzero hard deadline"):
        WorkflowBinding("t", "", Question, Push(DESK), "joined")
    with pytest.raises(InvalidBinding, match="needs promise-bearing completion"):
        WorkflowBinding("t", "", Question, Start(JOBS), "accepted")
    with pytest.raises(InvalidBinding, match="push-needs-receiver-task"):
        WorkflowBinding("t", "", Question, Push(ARCHIVE), "accepted")
    with pytest.raises(InvalidBinding, match="keys-need-promises-completion"):
        WorkflowBinding("t", "", Question, Push(DESK), "joined", hard_deadline=1, keys=lambda a: [])
    with pytest.raises(InvalidBinding, match="known-completion"):
        WorkflowBinding("t", "", Question, Push(DESK), "eventually")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "completion", "deadline"),
    [
        ("push", "accepted", None),
        ("push", "joined", HOUR),
        ("push", "promises", None),
        ("pull", "accepted", None),
        ("start", "joined", HOUR),
        ("start", "promises", None),
        ("start", "promises", HOUR),
    ],
)
def test_valid_combinations_are_admitted(kind, completion, deadline):
    assert binding_violations(kind, completion, deadline) == []
    WorkflowBinding("t", "", Question, destination(kind), completion, hard_deadline=deadline)


# --- joined push -----------------------------------------------------------------------------


def test_a_joined_call_parks_until_the_receiver_replies():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "ask_desk", {"question": "may we ship?"})
        await k.h.run_until_parked()
        assert k.h.task(t).status == "sleeping"
        [envelope] = desk_log(k)
        invocation = read_invocation(k.h, envelope["invocation"])
        assert invocation.destination == "push" and invocation.call_task == t
        receiver_task = invocation.producer
        assert k.h.task(receiver_task).kind == "bide.receiver.desk"
        ref = envelope["keys"]["result"]
        result = await BINDINGS.reply(
            k.h,
            invocation.id,
            "result",
            producer=receiver_task,
            correlation=ref["correlation"],
            value={"text": "yes"},
        )
        assert result == "settled"
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(t)).text == '{"text": "yes"}'
        assert k.h.task(receiver_task).status == "sleeping"  # a shared receiver lives on

    run(go())


def test_a_receiver_can_reply_from_its_own_commit():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "ask_desk", {"question": "echo"})
        await k.h.run_until_parked()
        assert result_of(k.h.outcome(t)).text == '{"text": "echo!"}'

    run(go())


def test_mismatched_replies_are_rejected_and_change_nothing():
    async def go():
        k, registry = session()
        await k.h.open()
        await call(k, registry, "ask_desk", {"question": "?"})
        await k.h.run_until_parked()
        [envelope] = desk_log(k)
        inv = read_invocation(k.h, envelope["invocation"])
        good = envelope["keys"]["result"]["correlation"]
        seq = k.h.seq
        cases = [
            ("correlation-mismatch", dict(producer=inv.producer, correlation="corr-forged")),
            ("producer-mismatch", dict(producer="t-someone-else", correlation=good)),
        ]
        for rule, routing in cases:
            with pytest.raises(ReplyRejected) as caught:
                await BINDINGS.reply(k.h, inv.id, "result", value={"text": "x"}, **routing)
            assert caught.value.rule == rule and "nothing was changed" in str(caught.value)
        with pytest.raises(ReplyRejected, match=r"reply-schema.*text: Field required"):
            await BINDINGS.reply(
                k.h, inv.id, "result", producer=inv.producer, correlation=good, value={"t": 1}
            )
        with pytest.raises(ReplyRejected, match="unknown-key"):
            await BINDINGS.reply(k.h, inv.id, "other", producer=inv.producer, correlation=good)
        with pytest.raises(ReplyRejected, match="unknown-invocation"):
            await BINDINGS.reply(k.h, "inv-nope", "result", producer=inv.producer, correlation=good)
        assert k.h.seq == seq and k.h.store.head("s1") == seq  # nothing was written
        assert read_promise(k.h, inv.keys["result"].promise).status == "open"

    run(go())


def test_model_arguments_cannot_redirect_the_destination():
    async def go():
        k, registry = session()
        await k.h.open()
        forged = {"question": "hi", "receiver": "evil", "workflow_id": "wf-1", "task_queue": "q"}
        t = await call(k, registry, "tell_desk", forged)
        await k.h.run_until_parked()
        assert "accepted as invocation" in result_of(k.h.outcome(t)).text
        [envelope] = desk_log(k)
        assert envelope["arguments"] == {"question": "hi"}
        invocation = read_invocation(k.h, envelope["invocation"])
        assert invocation.receiver == "desk" and invocation.arguments == {"question": "hi"}

    run(go())


def test_the_hard_deadline_ends_a_joined_call_and_the_receiver_is_told():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "ask_desk", {"question": "slow"})
        wake = await k.h.run_until_parked()
        assert wake.at == k.clock.now() + HOUR
        k.clock.advance(HOUR)
        await k.h.run_until_parked()
        r = result_of(k.h.outcome(t))
        assert r.is_error and r.text == "ask_desk ended expired: the hard deadline was reached"
        request, notice = desk_log(k)
        assert notice["type"] == "cancel" and notice["status"] == "expired"
        assert notice["correlation"] == request["keys"]["result"]["correlation"]

    run(go())


def test_stopping_a_joined_call_cancels_its_promise_and_a_late_reply_is_ignored():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "ask_desk", {"question": "stop me"})
        await k.h.run_until_parked()
        await k.h.abort(t, "Stop")
        await k.h.run_until_parked()
        assert k.h.outcome(t).status == "aborted"
        request, notice = desk_log(k)
        assert (notice["type"], notice["status"], notice["key"]) == (
            "cancel",
            "cancelled",
            "result",
        )
        inv = read_invocation(k.h, request["invocation"])
        late = await BINDINGS.reply(
            k.h,
            inv.id,
            "result",
            producer=inv.producer,
            correlation=request["keys"]["result"]["correlation"],
            value={"text": "too late"},
        )
        assert late == "ignored"
        assert read_promise(k.h, inv.keys["result"].promise).status == "cancelled"

    run(go())


def test_a_parked_joined_call_survives_a_crash():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "ask_desk", {"question": "durable?"})
        await k.h.run_until_parked()
        h = await k.reopen()
        [envelope] = desk_log(k)
        inv = read_invocation(h, envelope["invocation"])
        await BINDINGS.reply(
            h,
            inv.id,
            "result",
            producer=inv.producer,
            correlation=envelope["keys"]["result"]["correlation"],
            value={"text": "yes, durable"},
        )
        await h.run_until_parked()
        assert result_of(h.outcome(t)).text == '{"text": "yes, durable"}'
        assert len(desk_log(k)) == 1  # the rerun emitted nothing again

    run(go())


# --- pull ------------------------------------------------------------------------------------


def test_a_pull_receiver_reads_accepted_invocations_and_nothing_is_sent():
    async def go():
        k, registry = session()
        await k.h.open()
        a = await call(k, registry, "file_report", {"question": "q1"})
        b = await call(k, registry, "file_report", {"question": "q2"})
        await k.h.run_until_parked()
        assert all("accepted" in result_of(k.h.outcome(t)).text for t in (a, b))
        pulled = pull_invocations(k.h, "archive")
        assert [p["arguments"]["question"] for p in pulled] == ["q1", "q2"]
        assert [p["arguments"]["question"] for p in pull_invocations(k.h, "archive", 1)] == ["q2"]
        assert k.h.live_tasks == {}  # no receiver task, no promise
        assert Promises(k.h).all() == []

    run(go())


# --- started executions with keyed promises --------------------------------------------------


def test_a_started_execution_gets_keyed_promises_per_key_notices_and_is_cancelled_at_the_end():
    async def go():
        k, registry = session()
        await k.h.open()
        t = await call(k, registry, "run_jobs", {"jobs": ["a", "b", "c"]})
        await k.h.run_until_parked()
        handles = result_of(k.h.outcome(t)).details["promises"]
        assert sorted(handles) == ["a", "b", "c"]
        inv = read_invocation(k.h, result_of(k.h.outcome(t)).details["invocation"])
        execution = inv.producer
        assert k.h.task(execution).kind == "test.jobs"
        assert k.h.task(execution).key == f"binding:{inv.id}"  # a derived, stable identity
        assert k.h.task(execution).input["keys"]["a"]["promise"] == handles["a"]

        await BINDINGS.reply(
            k.h, inv.id, "a", producer=execution, correlation=inv.keys["a"].correlation, value=1
        )
        await Promises(k.h).cancel(handles["b"], "job b is not needed")
        await k.h.run_until_parked()
        assert k.h.get_doc(f"jobs/{execution}") == {"cancelled": ["b"]}  # a per-key notice
        assert k.h.task(execution).live  # c is still open: its siblings keep running

        await BINDINGS.reply(
            k.h,
            inv.id,
            "c",
            producer=execution,
            correlation=inv.keys["c"].correlation,
            status="rejected",
            error="out of memory",
        )
        await k.h.run_until_parked()
        assert k.h.outcome(execution).status == "aborted"  # all keyed promises are terminal
        assert BINDINGS.status(k.h, inv.id) == {"a": "resolved", "b": "cancelled", "c": "rejected"}

    run(go())


def test_an_ended_receiver_makes_the_invocation_undeliverable():
    async def go():
        k, registry = session()
        await k.h.open()
        first = await call(k, registry, "tell_desk", {"question": "start it"})
        await k.h.run_until_parked()
        receiver = read_invocation(k.h, result_of(k.h.outcome(first)).details["invocation"])
        await k.h.abort(receiver.producer, "retired")
        await k.h.run_until_parked()
        t = await call(k, registry, "ask_desk", {"question": "anyone?"})
        await k.h.run_until_parked()
        r = result_of(k.h.outcome(t))
        assert r.is_error and "is not running (closed)" in r.text

    run(go())
