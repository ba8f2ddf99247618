"""A plain ``App(tools=..., agent=...)`` runs workflow tools, task cancellation, promises,
delegation and bindings with no wiring call of its own, and wiring twice changes nothing."""

from __future__ import annotations

import json
from typing import Any

from kit import HOUR, run
from pydantic import BaseModel

from bide import (
    Completed,
    Harness,
    ManualClock,
    SequentialIds,
    SQLiteStore,
    Terminal,
    define_task,
)
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.bindings import BindingSet, Start, WorkflowBinding
from bide.delegation import Delegation
from bide.promises import DEADLINE_KEEPER, create_promise, promise_tools, read_promise
from bide.tools import ToolRegistry, ToolResult, define_tool
from bide.workflow import (
    WEBHOOK,
    background_tasks,
    define_workflow_tool,
    install,
    setup_app,
    task_cancel_tool,
)

PROFILE = "You are a researcher."


class Note(BaseModel):
    note: str


class Jobs(BaseModel):
    jobs: list[str]


async def nap(args: Note, ctx: Any, task: Any) -> str:
    await ctx.sleep(hours=1)
    return f"napped: {args.note}"


async def promise_later(args: Note, api: Any) -> ToolResult:
    # A promise nobody resolves: its keeper (a task kind) ends it at the hard deadline.
    deadline = api.now() + HOUR
    await api.write(lambda tx: create_promise(tx, f"p-{args.note}", deadline=deadline))
    return ToolResult.of_text(f"promise p-{args.note}")


async def _job(task: Any, rt: Any) -> None:
    await rt.commit(Terminal(outcome=Completed()))


def script(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if request.system == PROFILE:  # a delegated child
        return reply(f"child answer to {request.messages[0].text}")
    if last.role == "user" and last.text.startswith("call "):
        name, _, arguments = last.text[5:].partition(" ")
        return call_tool(name, json.loads(arguments or "{}"), id=f"c-{len(request.messages)}")
    if last.role == "tool":
        return reply(f"tool said {last.text}")
    return reply("noted")


def build(*, wire_features: bool = True) -> App:
    job = define_task("test.job", 1, lambda _input: "go", {"go": _job})
    jobs = WorkflowBinding(
        "run_jobs", "Run jobs", Jobs, Start(job), "promises", hard_deadline=HOUR,
        keys=lambda args: args.jobs,
    )  # fmt: skip
    registry = ToolRegistry(
        [
            define_workflow_tool("nap", "Nap in the background", Note, nap, lifetime="task"),
            define_tool("promise_later", "", Note, promise_later, replay="safe"),
            *promise_tools(),
            *Delegation({"researcher": PROFILE}).tools,
            *BindingSet([jobs]).tools,
        ]
    )
    agent = Agent(ScriptedProvider(script), registry)
    return App(tools=registry, agent=agent, wire_features=wire_features)


class Session:
    def __init__(self, app: App) -> None:
        self.clock = ManualClock()
        self.h = Harness(
            SQLiteStore(), "s1", app.task_kinds(), clock=self.clock, ids=SequentialIds()
        )
        self.conv = Conversations(self.h, app.agent)

    async def start(self) -> Session:
        await self.h.open()
        await self.conv.create("main")
        return self

    async def say(self, text: str, rid: str) -> str:
        await self.conv.submit("main", text, request_id=rid)
        await self.h.run_until_parked()
        return self.conv.entries("main")[-1].get("text") or ""


def test_a_plain_app_runs_workflow_tools_cancellation_promises_delegation_and_bindings():
    async def go():
        app = build()
        assert "task_cancel" in [t["name"] for t in app.tools.manifest()]
        assert WEBHOOK in app.signals  # workflow webhooks are deliverable by name
        s = await Session(app).start()

        # A background workflow tool, and the task_cancel the app added beside it.
        await s.say('call nap {"note": "a"}', "r1")
        await s.say('call nap {"note": "b"}', "r2")
        a, b = sorted(background_tasks(s.h), key=lambda t: t.arguments["note"])
        assert (a.status, b.status) == ("working", "working")
        said = await s.say(f'call task_cancel {{"task_id": "{b.id}"}}', "r3")
        assert said == f"tool said task {b.id} cancelled"

        # A promise whose keeper expires it at the hard deadline.
        await s.say('call promise_later {"note": "x"}', "r4")
        assert read_promise(s.h, "p-x").status == "open"

        # Delegation: joined (agent_run) and promised (agent_spawn, a supervisor task).
        said = await s.say('call agent_run {"brief": "sum it", "profile": "researcher"}', "r5")
        assert said == "tool said child answer to sum it"
        said = await s.say('call agent_spawn {"brief": "dig", "profile": "researcher"}', "r6")
        assert said.startswith("tool said spawned a researcher child; promise handle: ")

        # A binding that starts a task per key (its recipe kind).
        said = await s.say('call run_jobs {"jobs": ["j1"]}', "r7")
        assert said.startswith("tool said run_jobs: started invocation")

        s.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert read_promise(s.h, "p-x").status == "expired"
        statuses = {t.arguments["note"]: t.status for t in background_tasks(s.h)}
        assert statuses == {"a": "completed", "b": "cancelled"}

    run(go())


def test_without_wiring_the_same_app_lacks_each_piece():
    app = build(wire_features=False)
    kinds = app.task_kinds()
    assert DEADLINE_KEEPER not in kinds
    assert not any(k.name == "bide.delegation-child" for k in kinds)
    assert not any(k.name == "test.job" for k in kinds)
    assert app.tools.get("task_cancel") is None
    assert WEBHOOK not in app.signals
    wired = app.wire()
    assert wired is app and DEADLINE_KEEPER in app.task_kinds()
    assert app.tools.get("task_cancel") is not None


def test_wiring_is_idempotent_beside_explicit_calls():
    delegation = Delegation({"researcher": PROFILE})
    cancel = task_cancel_tool("cancel_background")  # cancellation under another name
    registry = ToolRegistry(
        [
            define_workflow_tool("nap", "", Note, nap, lifetime="task"),
            cancel,
            *delegation.tools,
        ]
    )
    agent = Agent(ScriptedProvider(script), registry)
    install(agent)  # what hosts called before App wired things itself
    delegation.bind(agent)
    app = App(tasks=[DEADLINE_KEEPER, *delegation.task_kinds()], tools=registry, agent=agent)
    tools, kinds = list(registry.tools), app.task_kinds()
    setup_app(app)
    app.wire()
    assert list(registry.tools) == tools, "no second cancel tool, nothing replaced"
    assert app.task_kinds() == kinds
    assert delegation.agent is agent
    Harness(SQLiteStore(), "s1", app.task_kinds())  # no kind listed twice


def test_a_delegation_already_bound_elsewhere_is_left_alone():
    delegation = Delegation({"researcher": PROFILE})
    other = Agent(ScriptedProvider(script), ToolRegistry())
    delegation.bind(other)
    registry = ToolRegistry(delegation.tools)
    App(tools=registry, agent=Agent(ScriptedProvider(script), registry))
    assert delegation.agent is other


def test_the_callers_task_list_is_not_changed():
    mine: list[Any] = []
    app = App(tasks=mine, tools=ToolRegistry())
    assert mine == [] and DEADLINE_KEEPER in app.tasks


def test_promises_alone_get_their_keeper():
    """No delegation or binding brings the keeper along here: the app lists it itself."""

    async def go():
        registry = ToolRegistry([define_tool("promise_later", "", Note, promise_later)])
        s = await Session(App(agent=Agent(ScriptedProvider(script), registry))).start()
        await s.say('call promise_later {"note": "y"}', "r1")
        s.clock.advance(HOUR)
        await s.h.run_until_parked()
        assert read_promise(s.h, "p-y").status == "expired"

    run(go())
