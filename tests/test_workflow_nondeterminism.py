"""Non-determinism a replay detects beyond a changed kind or name: changed arguments (a digest
recorded with each operation; older records without one are not checked), fewer operations
than the history holds, and lambda steps that no longer all share the name ``<lambda>``. An
operator sees it: in the tool result's details or the task index, in the workflow view, as a
log line and an EMF metric (through the service's sink)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json

import pytest
from handler_fixtures import http_event, response_json
from kit import HOUR, Kit, run
from pydantic import BaseModel
from test_workflow_support import Note, Session, Tools, deps_for

from bide.agent import Agent
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, last_tool_result, reply
from bide.app import App
from bide.engine.errors import DefinitionError
from bide.service import observability as obs
from bide.service.http import handle_api
from bide.service.sessions import create_session, submit
from bide.service.worker import run_session
from bide.tools import ToolRegistry
from bide.workflow import background_tasks, define_workflow_tool, setup_app, view_in
from bide.workflow.ops import Op
from bide.workflow.requests import answer_in


def _parked_then_changed(body, version):
    """Run ``body`` to its first park with version 1, switch to 2, wake it: the result."""

    async def go():
        t = await Tools(define_workflow_tool("wf", "", Note, body)).start()
        call = await t.call("wf", {})
        await t.h.run_until_parked()
        version["v"] = 2
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        return t, t.result(call)

    return run(go())


def test_changed_arguments_are_non_determinism():
    version = {"v": 1}

    async def body(args, ctx):
        await ctx.sleep(hours=1 if version["v"] == 1 else 2)  # same kind, same name
        return "done"

    _t, result = _parked_then_changed(body, version)
    assert result.is_error
    assert "non-determinism at operation 1" in result.text
    assert "recorded sleep 'sleep' with other arguments" in result.text
    details = result.details["nondeterminism"]
    assert (details["position"], details["reason"]) == (1, "arguments")


def test_a_changed_question_is_non_determinism_but_the_same_one_replays():
    version = {"v": 1}

    async def body(args, ctx):
        prompt = "Deploy?" if version["v"] == 1 else "Deploy to prod?"
        answer = await ctx.ask(prompt, options=[{"id": "yes", "label": "Yes"}])
        return answer.option_id

    async def go(change: bool):
        version["v"] = 1
        t = await Tools(define_workflow_tool("q", "", Note, body)).start()
        call = await t.call("q", {})
        await t.h.run_until_parked()
        await t.reopen()
        version["v"] = 2 if change else 1
        [ask] = [d.body for d in t.h.list_docs("ask/")]
        answer_in(t.h, ask["id"], option_id="yes")
        await t.h.run_until_parked()
        return t.result(call)

    assert run(go(change=False)).text == "yes"
    changed = run(go(change=True))
    assert changed.is_error and changed.details["nondeterminism"]["reason"] == "arguments"


def test_a_record_from_before_digests_is_not_checked(monkeypatch):
    version = {"v": 1}

    async def body(args, ctx):
        await ctx.sleep(hours=1 if version["v"] == 1 else 2)
        return "done"

    recorded_by_new_code = Op.record

    def old_record(self):  # what versions before argument digests recorded
        record = recorded_by_new_code(self)
        record.pop("args")
        return record

    monkeypatch.setattr(Op, "record", old_record)

    async def go():
        t = await Tools(define_workflow_tool("wf", "", Note, body)).start()
        call = await t.call("wf", {})
        await t.h.run_until_parked()
        assert "args" not in t.memos(call)["wf.1"]
        monkeypatch.setattr(Op, "record", recorded_by_new_code)  # the new version deploys
        version["v"] = 2
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        return t.result(call)

    assert run(go()).text == "done"


def test_ending_with_fewer_operations_than_the_history_is_non_determinism():
    version = {"v": 1}

    async def body(args, ctx):
        await ctx.sleep(hours=1)
        if version["v"] == 1:
            await ctx.sleep(hours=1, name="second")
        return "done"

    async def go():
        t = await Tools(define_workflow_tool("wf", "", Note, body)).start()
        call = await t.call("wf", {})
        await t.h.run_until_parked()
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()  # parked at the second sleep
        version["v"] = 2  # the deploy removed it
        t.kit.clock.advance(HOUR)
        await t.h.run_until_parked()
        return t.result(call)

    result = run(go())
    assert result.is_error
    assert "the body ended after 1 operation(s), but the history holds sleep 'second'" in (
        result.text
    )
    assert result.details["nondeterminism"]["reason"] == "count"


def test_lambda_steps_are_named_apart_and_old_lambda_names_still_replay():
    names: list[str] = []
    version = {"v": 1}

    async def body(args, ctx):
        if version["v"] == 1:  # what a version before these names recorded
            a = await ctx.step(lambda: 1, name="<lambda>")
            b = await ctx.step(lambda: 2, name="<lambda>")
        else:
            first, second = ctx.step(lambda: 1), ctx.step(lambda: 2)
            names.extend([first.name, second.name])
            a, b = await first, await second
        await ctx.sleep(hours=1)
        return a + b

    _t, result = _parked_then_changed(body, version)
    assert result.text == "3"
    assert names == ["body.<lambda>#1", "body.<lambda>#2"]


def test_a_partial_step_is_named_after_its_function_and_its_old_name_replays():
    version = {"v": 1}

    def add(step, n):
        return n + 1

    async def body(args, ctx):
        op = ctx.step(functools.partial(add, n=1), name="step" if version["v"] == 1 else None)
        value = await op
        await ctx.sleep(hours=1)
        return f"{op.name}={value}"

    _t, result = _parked_then_changed(body, version)
    assert result.text == "add=2"


def test_a_lambda_step_replaced_by_another_lambda_later_in_the_body_is_detected():
    version = {"v": 1}

    async def body(args, ctx):
        if version["v"] == 1:
            await ctx.step(lambda: 1)
            await ctx.sleep(hours=1)
        else:  # a new lambda step before the old one: the names shift
            await ctx.step(lambda: 0)
            await ctx.step(lambda: 1)
            await ctx.sleep(hours=1)
        return "ok"

    _t, result = _parked_then_changed(body, version)
    assert result.is_error
    assert "operation 2" in result.text and "'body.<lambda>#2'" in result.text


def test_a_background_task_index_and_the_view_show_non_determinism():
    version = {"v": 1}

    async def body(args, ctx, task):
        await ctx.sleep(hours=1, name="nap" if version["v"] == 1 else "doze")
        return "done"

    def script(request):
        last = request.messages[-1]
        if last.role == "user":
            return call_tool("bg", {}, id="b1")
        return reply("ok")

    async def go():
        s = Session(script, define_workflow_tool("bg", "", Note, body, lifetime="task"))
        await s.start()
        await s.say("go", "r1")
        await s.h.run_until_parked()
        version["v"] = 2
        s.kit.clock.advance(HOUR)
        await s.h.run_until_parked()
        [info] = background_tasks(s.h)
        assert info.status == "failed" and "non-determinism at operation 1" in str(info.error)
        assert info.nondeterminism is not None
        assert info.nondeterminism["requested"] == {"op": "sleep", "name": "doze"}
        [shown] = view_in(s.h)["nondeterminism"]
        assert shown["task_id"] == info.id and shown["tool"] == "bg"
        assert shown["reason"] == "operation" and shown["detected_at"] == s.kit.clock.now()

    run(go())


class Deploy(BaseModel):
    service: str


def test_an_operator_sees_it_in_the_route_a_log_line_and_a_metric(capsys, caplog):
    version = {"v": 1}

    async def body(args: Deploy, ctx):
        prompt = "Deploy?" if version["v"] == 1 else f"Deploy {args.service}?"
        answer = await ctx.ask(prompt, options=[{"id": "yes", "label": "Deploy"}])
        return answer.option_id

    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tool("deploy", {"service": "api"}, id="d1")
        return reply(last_tool_result(request))

    tools = ToolRegistry([define_workflow_tool("deploy", "Deploy", Deploy, body)])
    app = setup_app(App(agent=Agent(ScriptedProvider(script), tools)))
    kit = Kit(*app.task_kinds())
    deps = deps_for(kit, app)

    def api(method, path, payload=None):
        response = asyncio.run(handle_api(deps, http_event(method, path, body=payload), None))
        return response["statusCode"], response_json(response)

    sid = asyncio.run(create_session(deps, "s-nd"))
    asyncio.run(submit(deps, sid, "ship it", request_id="r1"))
    asyncio.run(run_session(deps, sid))
    [ask] = api("GET", f"/sessions/{sid}/workflow")[1]["asks"]
    assert api("GET", f"/sessions/{sid}/workflow")[1]["nondeterminism"] == []
    version["v"] = 2  # a deploy changed the question while the run was parked
    api("POST", f"/sessions/{sid}/asks/{ask['id']}/answer", {"option_id": "yes"})
    capsys.readouterr()
    caplog.clear()
    asyncio.run(run_session(deps, sid))
    obs.flush()
    out = capsys.readouterr().out
    status, view = api("GET", f"/sessions/{sid}/workflow")
    [shown] = view["nondeterminism"]
    assert status == 200 and shown["tool"] == "deploy" and shown["reason"] == "arguments"
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    # The log line (the JSON handler holds the stdout of import time: read the record).
    [logged] = [r for r in caplog.records if r.getMessage() == "workflow non-determinism"]
    assert logged.levelname == "ERROR" and logged.nondeterminism["task_id"] == shown["task_id"]
    counted = [
        line
        for line in lines
        if "_aws" in line
        and any(
            m["Name"] == obs.WORKFLOW_NONDETERMINISM
            for d in line["_aws"]["CloudWatchMetrics"]
            for m in d["Metrics"]
        )
    ]
    assert [line[obs.WORKFLOW_NONDETERMINISM] for line in counted] == [[1.0]]


# --- bodies of the wrong shape are refused at definition --------------------------------------


def _sync_body(args, ctx):
    return "never awaited"


async def _async_generator(args, ctx):
    yield {"status": "working"}


def _generator(args, ctx):
    yield 1


class _AsyncCallable:
    async def __call__(self, args, ctx):
        return "ok"


async def _real(args, ctx, suffix):
    return "ok" + suffix


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_sync_body, "not an `async def`"),
        (lambda args, ctx: _real(args, ctx, "!"), "is a lambda"),
        (_generator, "a generator function"),
        (_async_generator, "an async generator"),
    ],
)
def test_a_body_of_the_wrong_shape_is_refused_with_the_fix(body, says):
    with pytest.raises(DefinitionError, match=says) as refused:
        define_workflow_tool("bad", "", Note, body)
    message = str(refused.value)
    assert "tool 'bad'" in message
    if "generator" in says and "async" in says:
        assert "ctx.progress(value)" in message and "task.post_message" in message
    else:
        assert "async def body(args, ctx)" in message


def test_async_callables_and_partials_are_bodies():
    define_workflow_tool("obj", "", Note, _AsyncCallable())
    define_workflow_tool("part", "", Note, functools.partial(_real, suffix="?"))


def test_a_body_that_returns_no_awaitable_fails_with_the_fix_at_run_time():
    defined = define_workflow_tool("late", "", Note, _AsyncCallable())
    tool = dataclasses.replace(defined, body=_sync_body)  # slipped past the definition check

    async def go():
        t = await Tools(tool).start()
        call = await t.call("late", {})
        await t.h.run_until_parked()
        return t.result(call)

    result = run(go())
    assert result.is_error and "returned str, not an awaitable" in result.text
    assert "async def body(args, ctx)" in result.text
