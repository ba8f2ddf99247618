"""Helpers the workflow tests share (and a check that they work)."""

from __future__ import annotations

from typing import Any

from kit import Kit, run
from pydantic import BaseModel

from bide.agent import Agent, Conversations
from bide.agent.providers.scripted import ScriptedProvider
from bide.engine.memo_pages import every_memo
from bide.service.deps import Deps
from bide.tools import ToolRegistry, result_of
from bide.workflow import InMemoryAuthProviders, install


class Progress:
    """A ``workflow_progress`` sink: every value per call, and the last one."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def __call__(self, task_id: str, value: Any) -> None:
        self.seen.append((task_id, value))

    def last(self, task_id: str) -> Any:
        return [v for t, v in self.seen if t == task_id][-1]


class Note(BaseModel):
    note: str = ""


class Tools:
    """A registry and a harness running its tool tasks (no agent, no conversation)."""

    def __init__(self, *tools, services=None, store=None):
        from bide.workflow import workflow_kinds

        self.registry = ToolRegistry(tools)
        self.kit = Kit(self.registry.task, *workflow_kinds(self.registry), store=store)
        self.h = self.kit.h
        self.progress = Progress()
        self.auth = InMemoryAuthProviders()
        self.h.services.update(
            {"workflow_progress": self.progress, "auth_providers": self.auth, **(services or {})}
        )

    async def start(self):
        await self.h.open()
        return self

    async def call(self, name, arguments, key=None):
        return await self.h.create_task(
            self.registry.task, self.registry.call(name, arguments), key=key
        )

    def result(self, task_id):
        return result_of(self.h.outcome(task_id))

    def status(self, task_id):
        return self.h.task(task_id).state.status

    def memos(self, task_id):
        """Every memo of the task, those in sealed pages too (bide.engine.memo_pages)."""
        return every_memo(self.h.get_doc, self.h.task(task_id))

    async def reopen(self):
        services = dict(self.h.services)
        self.h = await self.kit.reopen()
        self.h.services.update(services)
        return self.h


class Session:
    """An agent with workflow tools in one conversation ``main``."""

    def __init__(self, script, *tools, services=None):
        self.registry = ToolRegistry(tools)
        self.provider = ScriptedProvider(script)
        self.agent = Agent(self.provider, self.registry)
        install(self.agent)
        self.kit = Kit(*self.agent.task_kinds())
        self.h = self.kit.h
        self.conv = Conversations(self.h, self.agent)
        self.progress = Progress()
        self.auth = InMemoryAuthProviders()
        self.h.services.update(
            {"workflow_progress": self.progress, "auth_providers": self.auth, **(services or {})}
        )

    async def start(self):
        await self.h.open()
        await self.conv.create("main")
        return self

    async def say(self, text, request_id):
        return await self.conv.submit("main", text, request_id=request_id)

    def entries(self):
        return [(e["type"], e.get("text"), e.get("source")) for e in self.conv.entries("main")]

    def submissions(self):
        return [d.body for d in self.h.list_docs("conv/main/s/")]


class Queue:
    def __init__(self) -> None:
        self.wakes: list[tuple[str, str]] = []

    def wake(self, session_id: str, reason: str, **_focus: str | None) -> None:
        self.wakes.append((session_id, reason))


class Alarms:
    def arm(self, session_id: str, at: float) -> None:
        pass

    def disarm(self, session_id: str) -> None:
        pass


def deps_for(kit: Kit, app: Any, services: dict[str, Any] | None = None) -> Deps:
    """Service dependencies over a test kit's store, clock and ids."""
    return Deps(
        store=kit.store,
        alarms=Alarms(),
        queue=Queue(),
        app=app,
        clock=kit.clock,
        ids=kit.ids,
        services=dict(services or {}),
    )


def test_the_support_runs_a_plain_tool():
    from bide.tools import define_tool

    async def echo(args, api):
        return args.note

    async def go():
        t = await Tools(define_tool("echo", "", Note, echo)).start()
        task = await t.call("echo", {"note": "hi"})
        await t.h.run_until_parked()
        assert t.result(task).text == "hi"

    run(go())
