"""The compiled shape of every cell (design 000 §2, §5): data computed once, in the manifest,
the task argument iff lifetime is task, and all four cells working."""

from __future__ import annotations

import json

import pytest
from kit import run
from test_workflow_support import Note, Session, Tools

from bide.agent.providers.scripted import call_tools, reply
from bide.engine.errors import DefinitionError
from bide.tools import Sleep, ToolRegistry, define_tool, wrap_tool
from bide.workflow import ToolShape, define_workflow_tool


async def plain(args, api):
    return f"plain {args.note}"


async def plain_task(args, api, task):
    await task.post_message(f"working on {args.note}")
    return f"plain task {args.note}"


async def body(args, ctx):
    return f"workflow {await ctx.step(lambda: args.note, name='echo')}"


async def body_task(args, ctx, task):
    await task.post_message(f"working on {args.note}")
    return f"workflow task {await ctx.step(lambda: args.note, name='echo')}"


CELLS = {
    "plain": (define_tool("plain", "", Note, plain), ("step", "none")),
    "plain_task": (
        define_tool("plain_task", "", Note, plain_task, lifetime="task"),
        ("task", "none"),
    ),
    "flow": (define_workflow_tool("flow", "", Note, body), ("step", "workflow")),
    "flow_task": (
        define_workflow_tool("flow_task", "", Note, body_task, lifetime="task"),
        ("task", "workflow"),
    ),
}


def test_every_cell_compiles_to_its_shape_and_the_manifest_shows_it():
    registry = ToolRegistry([tool for tool, _ in CELLS.values()])
    manifest = {m["name"]: m["shape"] for m in registry.manifest()}
    for name, (tool, (lifetime, suspend)) in CELLS.items():
        assert tool.shape == ToolShape(lifetime, suspend)
        assert manifest[name] == {"lifetime": lifetime, "suspend": suspend}
    assert define_tool("x", "", Note, plain).shape == ToolShape()  # the default cell


def test_the_task_argument_exists_iff_lifetime_is_task():
    async def two(args, ctx):
        return None

    async def three(args, ctx, task):
        return None

    with pytest.raises(DefinitionError, match="task argument exists if and only if"):
        define_workflow_tool("w", "", Note, three)
    with pytest.raises(DefinitionError, match=r"\(args, ctx, task\)"):
        define_workflow_tool("w", "", Note, two, lifetime="task")
    with pytest.raises(DefinitionError, match=r"\(args, api, task\)"):
        define_tool("w", "", Note, two, lifetime="task")
    with pytest.raises(DefinitionError, match="lifetime"):
        define_workflow_tool("w", "", Note, two, lifetime="forever")  # type: ignore[arg-type]


def test_wrapping_keeps_the_shape():
    async def wrapper(args, api, base):
        return await base(args, api)

    wrapped = wrap_tool(CELLS["flow"][0], wrapper, name="flow2")
    assert wrapped.shape == ToolShape("step", "workflow") and wrapped.name == "flow2"


def test_all_four_cells_work_in_a_conversation():
    calls = [("plain", "a"), ("plain_task", "b"), ("flow", "c"), ("flow_task", "d")]

    def script(request):
        last = request.messages[-1]
        if last.role == "user" and last.text == "go":
            return call_tools([(n, {"note": note}, f"k{i}") for i, (n, note) in enumerate(calls)])
        return reply(f"seen: {last.text}")

    async def go():
        s = await Session(script, *(tool for tool, _ in CELLS.values())).start()
        await s.say("go", "r1")
        await s.h.run_until_parked()
        results = {
            e["call_id"]: e["text"] for e in s.conv.entries("main") if e["type"] == "tool_result"
        }
        assert results["k0"] == "plain a"
        assert results["k2"] == "workflow c"
        for key in ("k1", "k3"):  # the task column: a receipt, then notifications
            assert json.loads(results[key])["status"] == "working"
        texts = [text for kind, text, _source in s.entries() if kind == "user"]
        assert any(t.endswith("working on b") for t in texts)
        assert any(t.endswith("working on d") for t in texts)
        assert any(t.endswith("finished: plain task b") for t in texts)
        assert any(t.endswith("finished: workflow task d") for t in texts)
        assert s.h.live_tasks == {}

    run(go())


def test_a_plain_background_tool_may_park_like_any_tool():
    from kit import ANSWER

    from bide import SignalValue
    from bide.workflow import background_tasks

    async def waits(args, api, task):
        state = await api.read_signal(ANSWER, "answer")
        if isinstance(state, SignalValue):
            return f"got {state.value.text}"
        return Sleep(signals=[ANSWER.key("answer")])

    async def go():
        t = await Tools(define_tool("waits", "", Note, waits, lifetime="task")).start()
        call = await t.call("waits", {})
        await t.h.run_until_parked()
        receipt = t.result(call).details
        assert receipt["status"] == "working" and t.status(receipt["task_id"]) == "sleeping"
        await t.h.signal(receipt["task_id"], ANSWER, "answer", {"text": "yes"})
        await t.h.run_until_parked()
        [info] = background_tasks(t.h)
        assert (info.status, info.result) == ("completed", "got yes")

    run(go())


def test_a_background_tool_defined_in_bide_tools_says_it_needs_the_workflow_installed():
    from kit import Kit

    from bide.tools import result_of

    async def go():
        tool = define_tool("plain_task", "", Note, plain_task, lifetime="task")
        registry = ToolRegistry([tool])
        assert registry.background is None  # no workflow kinds for it yet
        h = Kit(registry.task).h
        await h.open()
        call = await h.create_task(registry.task, registry.call("plain_task", {"note": "x"}))
        await h.run_until_parked()
        result = result_of(h.outcome(call))
        assert result.is_error and "bide.workflow.install" in result.text

    run(go())
