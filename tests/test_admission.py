"""Tool admission and batches (design 002): identities vs presentations, parallel windows."""

from __future__ import annotations

import pytest
from kit import ANSWER, Kit, run
from pydantic import BaseModel

from bide import DefinitionError, SignalValue, SQLiteStore
from bide.admission import Admission, Operation, Presentation
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tools, reply
from bide.testing import Crash, FaultyStore
from bide.tools import Sleep, ToolRegistry, define_tool


class Proc(BaseModel):
    pid: int
    action: str = "output"


class ProcClaude(BaseModel):
    shell_id: int


def continue_process():
    log: list[dict] = []

    async def execute(args: Proc, api):
        log.append(args.model_dump())
        return f"{args.action} of {args.pid}"

    tool = define_tool("env.continue_process", "Continue a process", Proc, execute)
    operation = Operation(
        "env.continue_process",
        tool,
        (
            Presentation("continue_process", "Read or stop a process", Proc),
            Presentation(
                "BashOutput",
                "Read a shell's output",
                ProcClaude,
                families=frozenset({"anthropic"}),
                variant="output",
                adapt_arguments=lambda a: {"pid": a["shell_id"], "action": "output"},
                render_result=lambda text, err: f"<output>{text}</output>",
            ),
            Presentation(
                "KillShell",
                "Stop a shell",
                ProcClaude,
                families=frozenset({"anthropic"}),
                variant="kill",
                adapt_arguments=lambda a: {"pid": a["shell_id"], "action": "kill"},
            ),
        ),
    )
    return operation, log


def test_catalog_is_built_for_the_effective_model_family():
    operation, _ = continue_process()
    admission = Admission([operation])
    anthropic = admission.catalog("anthropic")
    assert [s["name"] for s in anthropic.specs] == ["BashOutput", "KillShell"]
    assert anthropic.resolve("KillShell").identity == "env.continue_process"
    assert anthropic.resolve("KillShell").variant == "kill"
    generic = admission.catalog("openai")
    assert [s["name"] for s in generic.specs] == ["continue_process"]
    with pytest.raises(LookupError):
        generic.resolve("BashOutput")  # not advertised to this family


def test_exposed_names_must_be_unique():
    operation, _ = continue_process()

    async def noop(args, api):
        return "x"

    clash = Operation(
        "env.other",
        define_tool("env.other", "", Proc, noop),
        (Presentation("BashOutput", "", Proc, families=frozenset({"anthropic"})),),
    )
    admission = Admission([operation, clash])
    with pytest.raises(DefinitionError, match="unique"):
        admission.catalog("anthropic")
    with pytest.raises(DefinitionError, match="must be named"):
        Admission([Operation("env.x", define_tool("other", "", Proc, noop), (clash.presentations))])


def test_calls_route_by_the_request_catalog_and_the_transcript_keeps_exposed_names():
    async def go():
        operation, log = continue_process()
        seen: list[ModelRequest] = []

        def script(request: ModelRequest):
            seen.append(request)
            if request.messages[-1].role == "user":
                return call_tools(
                    [("BashOutput", {"shell_id": 7}, "c1"), ("continue_process", {"pid": 1}, "c2")]
                )
            return reply("done")

        agent = Agent(
            ScriptedProvider(script), admission=Admission([operation]), model_family="anthropic"
        )
        k = Kit(*agent.task_kinds())
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        await conv.submit("c", "check the shell", request_id="r1")
        await k.h.run_until_parked()
        assert log == [{"pid": 7, "action": "output"}]  # adapted; the unadvertised call never ran
        entries = conv.entries("c")
        assistant = entries[1]
        assert [c["name"] for c in assistant["tool_calls"]] == ["BashOutput", "continue_process"]
        results = {e["call_id"]: e for e in entries if e["type"] == "tool_result"}
        assert results["c1"]["name"] == "BashOutput" and results["c1"]["identity"] == (
            "env.continue_process"
        )
        assert results["c2"]["is_error"] and "not offered" in results["c2"]["text"]
        # the renderer of the presentation the model saw
        tool_messages = {m.call_id: m for m in seen[-1].messages if m.role == "tool"}
        assert tool_messages["c1"].text == "<output>output of 7</output>"
        assert [t.name for t in seen[0].tools] == ["BashOutput", "KillShell"]

    run(go())


class Path(BaseModel):
    path: str


def batch_agent(n_reads: int, *, with_edit: bool = False):
    """reads are parallel-safe and park on a signal; the edit is exclusive."""
    events: list[str] = []
    executions: dict[str, int] = {}

    async def read(args: Path, api):
        executions[args.path] = executions.get(args.path, 0) + 1
        state = await api.read_signal(ANSWER, "data")
        if isinstance(state, SignalValue):
            events.append(f"read {args.path} done")
            return state.value.text
        events.append(f"read {args.path} started")
        return Sleep(signals=[ANSWER.key("data")])

    async def edit(args: Path, api):
        events.append(f"edit {args.path}")
        return "edited"

    tools = ToolRegistry(
        [
            define_tool("read", "", Path, read, concurrency="parallel_safe", replay="safe"),
            define_tool("edit", "", Path, edit),
        ]
    )
    calls = [("read", {"path": f"f{i}"}, f"r{i}") for i in range(n_reads)]
    if with_edit:
        calls = [calls[0], ("edit", {"path": "notes"}, "e1"), *calls[1:]]

    def script(request: ModelRequest):
        if request.messages[-1].role == "user":
            return call_tools(calls)
        return reply("all done")

    return Agent(ScriptedProvider(script), tools), events, executions


def live_reads(h):
    return [r for r in h.live_tasks.values() if r.kind == "bide.tool" and r.input["name"] == "read"]


def test_parallel_window_never_exceeds_eight():
    async def go():
        agent, events, _ = batch_agent(12)
        k = Kit(*agent.task_kinds())
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        await conv.submit("c", "read everything", request_id="r1")
        peak = 0
        while True:
            await k.h.run_until_parked()
            reads = live_reads(k.h)
            peak = max(peak, len(reads))
            assert len(reads) <= 8
            if not reads:
                break
            await k.h.signal(
                reads[0].id, ANSWER, "data", {"text": reads[0].input["arguments"]["path"]}
            )
        assert peak == 8
        assert conv.submission("c", "r1").status == "done"
        assert sum(e.endswith("done") for e in events) == 12

    run(go())


def test_exclusive_call_runs_alone_in_batch_order():
    async def go():
        agent, events, _ = batch_agent(3, with_edit=True)
        k = Kit(*agent.task_kinds())
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        await conv.submit("c", "go", request_id="r1")
        await k.h.run_until_parked()
        # only the first read runs: the edit waits its turn, later reads wait for the edit
        assert events == ["read f0 started"]
        [first] = live_reads(k.h)
        await k.h.signal(first.id, ANSWER, "data", {"text": "zero"})
        await k.h.run_until_parked()
        assert events[1:3] == ["read f0 done", "edit notes"]
        assert sorted(events[3:]) == ["read f1 started", "read f2 started"]
        for read in live_reads(k.h):
            await k.h.signal(read.id, ANSWER, "data", {"text": "x"})
        await k.h.run_until_parked()
        assert conv.submission("c", "r1").status == "done"

    run(go())


def test_a_finished_result_is_not_rerun_when_a_sibling_is_retried():
    async def go():
        agent, _events, executions = batch_agent(2)
        store = FaultyStore(SQLiteStore())
        k = Kit(*agent.task_kinds(), store=store)
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        await conv.submit("c", "go", request_id="r1")
        await k.h.run_until_parked()
        first, second = sorted(live_reads(k.h), key=lambda r: r.input["arguments"]["path"])
        await k.h.signal(first.id, ANSWER, "data", {"text": "one"})
        await k.h.run_until_parked()  # f0 finished and committed its own result
        assert executions == {"f0": 2, "f1": 1}
        await k.h.signal(second.id, ANSWER, "data", {"text": "two"})
        # the process dies right after f1's woken run recorded its intent: f1 is retried
        store.match = lambda writes: any(
            r.id == second.id
            and r.state.status == "running"
            and r.state.checkpoint.get("phase") == "execute"
            for r in writes
        )
        store.when = "after"
        with pytest.raises(Crash):
            await k.h.run_until_parked()
        h = await k.reopen()
        Conversations(h, agent)
        await h.run_until_parked()
        # f1's cut-off run was recovered from its intent (replay-safe); f0 never ran again
        assert executions == {"f0": 2, "f1": 2}
        assert store.crashed
        results = [
            e["text"] for e in Conversations(h, agent).entries("c") if e["type"] == "tool_result"
        ]
        assert sorted(results) == ["one", "two"]

    run(go())


def two_family_output():
    """One variant name, ``output``, presented to two families with their own renderers;
    the anthropic presentation comes first."""

    async def execute(args: Proc, api):
        return f"output of {args.pid}"

    tool = define_tool("env.output", "Read output", Proc, execute)
    return Operation(
        "env.output",
        tool,
        (
            Presentation(
                "BashOutput",
                "Read a shell's output",
                ProcClaude,
                families=frozenset({"anthropic"}),
                variant="output",
                adapt_arguments=lambda a: {"pid": a["shell_id"]},
                render_result=lambda text, err: f"<output>{text}</output>",
            ),
            Presentation(
                "read_output",
                "Read a process's output",
                Proc,
                families=frozenset({"generic"}),
                variant="output",
                render_result=lambda text, err: f"[output] {text}",
            ),
        ),
    )


def test_a_result_is_rendered_by_the_requesting_familys_presentation():
    admission = Admission([two_family_output()])
    assert admission.render("env.output", "output", "x", False, family="generic") == "[output] x"
    assert (
        admission.render("env.output", "output", "x", False, family="anthropic")
        == "<output>x</output>"
    )
    # A family with no presentation of that variant gets the plain text.
    assert admission.render("env.output", "output", "x", False, family="other") == "x"


def test_the_model_sees_its_own_familys_rendering_of_a_result():
    async def go():
        seen: list[ModelRequest] = []

        def script(request: ModelRequest):
            seen.append(request)
            if request.messages[-1].role == "user":
                return call_tools([("read_output", {"pid": 3}, "c1")])
            return reply("done")

        agent = Agent(
            ScriptedProvider(script),
            admission=Admission([two_family_output()]),
            model_family="generic",
        )
        k = Kit(*agent.task_kinds())
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        await conv.submit("c", "read it", request_id="r1")
        await k.h.run_until_parked()
        [tool_message] = [m for m in seen[-1].messages if m.role == "tool"]
        assert tool_message.text == "[output] output of 3"

    run(go())
