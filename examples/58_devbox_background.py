"""58: Devbox as a background durable tool (design 000 §3.3), against a fake Devbox service.

One run owns a whole Devbox task. The body mints one webhook before the task exists and keeps
it for its whole life (``async for request in events``); every state change arrives there.
Creating the task needs the person's Devbox token: the step asks the provider port, and the
first time the run parks on a sign-in request until the OAuth callback stores a token; then
the step is retried. ``attention-required`` is not terminal: the run asks the person
(``ctx.ask``) and prompts Devbox with the answer from the same run. When the review is
complete the run asks whether to apply the findings, and goes on in the same run. Duplicate
or out-of-order webhooks are harmless (the body skips events it has seen). Cancelling the
task (``task_cancel``) stops the sandbox from the body's ``finally``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide import MINUTE
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.tools import ToolRegistry
from bide.workflow import (
    FatalError,
    InMemoryAuthProviders,
    answer_in,
    background_tasks,
    complete_authorization_in,
    define_workflow_tool,
    install,
    pending_asks,
    pending_authorizations,
    post_webhook,
    task_cancel_tool,
)

APPLY = "Apply the review findings and open a PR."


class DevboxArgs(BaseModel):
    repos: list[str]
    prompt: str
    title: str
    pr: bool = True


class Unauthorized(Exception):
    pass


class FakeDevbox:
    """api-devbox: tasks idempotent by key, a bearer token required, state changes sent to
    the task's webhook (each event once; the scenario acknowledges deliveries)."""

    TOKEN = "devbox-token-7f3a"

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.outbox: dict[tuple[str, int, int], dict[str, Any]] = {}
        self.delivered: set[tuple[str, int, int]] = set()
        self.stopped: list[str] = []

    def create_task(self, token: str, key: str, args: DevboxArgs, webhook: str) -> dict[str, str]:
        if token != self.TOKEN:
            raise Unauthorized("bad token")
        n = len(self.tasks) + 1
        task = self.tasks.setdefault(
            key,
            {
                "task_id": f"dt-{n}",
                "devbox_id": f"box-{n}",
                "title": args.title,
                "task_url": f"https://devbox.example/tasks/dt-{n}",
                "webhook": webhook,
                "prompts": [],
            },
        )
        return {k: task[k] for k in ("task_id", "devbox_id", "title", "task_url")}

    def task(self, task_id: str) -> dict[str, Any]:
        return next(t for t in self.tasks.values() if t["task_id"] == task_id)

    def prompt(self, task_id: str, text: str, key: str) -> None:
        prompts = self.task(task_id)["prompts"]
        if all(k != key for k, _ in prompts):
            prompts.append((key, text))

    def prompted(self, task_id: str) -> list[str]:
        return [text for _, text in self.task(task_id)["prompts"]]

    def read(self, task_id: str) -> dict[str, Any]:
        applied = APPLY in self.prompted(task_id)
        prs = ["https://git.example/api/pull/42"] if applied else []
        return {"summary": "2 findings: a race in the retry loop; a missing timeout", "prs": prs}

    def stop(self, devbox_id: str) -> str:
        if devbox_id not in self.stopped:
            self.stopped.append(devbox_id)
        return devbox_id

    def emit(self, task_id: str, n: int, state: str, *, copy: int = 0) -> None:
        """Send event ``n`` (once per copy: ``copy=1`` sends it again, as a retry would)."""
        event = {"task_id": task_id, "event": n, "state": state}
        self.outbox.setdefault((task_id, n, copy), event)

    def flush(self, h: Any) -> list[str]:
        """POST every event not delivered yet to its task's webhook."""
        results = []
        for key, event in sorted(self.outbox.items()):
            if key not in self.delivered:
                results.append(str(post_webhook(h, self.task(key[0])["webhook"], event)))
                self.delivered.add(key)
        return results


def devbox_tool(box: FakeDevbox) -> Any:
    async def devbox(args: DevboxArgs, ctx: Any, task: Any) -> dict[str, Any]:
        events = await ctx.webhook()  # registered before the Devbox task exists

        async def create(step: Any) -> dict[str, str]:
            token = await step.get_token("devbox")  # parks the run on sign-in the first time
            return box.create_task(token, step.idempotency_key, args, events.url)

        dev = await ctx.step(create, name="create_devbox_task")
        seen = 0
        try:
            async for request in events:
                if request.get("task_id") != dev["task_id"] or request["event"] <= seen:
                    continue  # another task's post, or a repeat: harmless
                seen = request["event"]
                state = request["state"]
                if state in ("pending", "running"):
                    ctx.progress({"devbox": state})
                    continue
                if state == "attention-required":
                    answer = await ctx.ask(
                        f'Devbox needs your input to continue "{dev["title"]}".\n'
                        f"Open {dev['task_url']} to see what it is asking, then reply here.",
                        display="text",
                        allow_freeform=True,
                    )
                    await ctx.step(
                        lambda s, a=answer: box.prompt(
                            dev["task_id"], a.text or "", s.idempotency_key
                        ),
                        name="prompt_devbox",
                    )
                    continue
                if state == "complete":
                    result = await ctx.step(
                        lambda: box.read(dev["task_id"]), name="read_devbox_task"
                    )
                    if not args.pr:
                        follow = await ctx.ask(
                            f"Review finished:\n\n{result['summary']}\n\nApply these findings?",
                            display="confirmation",
                            options=[
                                {"id": "apply", "label": "Apply the findings", "style": "primary"},
                                {"id": "done", "label": "Done"},
                            ],
                        )
                        if follow.option_id == "apply":
                            await ctx.step(
                                lambda s: box.prompt(dev["task_id"], APPLY, s.idempotency_key),
                                name="prompt_devbox",
                            )
                            continue
                    return {
                        "summary": result["summary"],
                        "prs": result["prs"],
                        "task_url": dev["task_url"],
                    }
                if state == "errored":
                    raise FatalError(f"Devbox task {dev['task_id']} errored")
            raise FatalError("the webhook closed before a terminal state")
        finally:
            if ctx.cancelled:
                await ctx.step(lambda: box.stop(dev["devbox_id"]), name="stop_devbox")

    return define_workflow_tool(
        "devbox",
        "Start repository work in api-devbox and see it through. Use once per task.",
        DevboxArgs,
        devbox,
        lifetime="task",
    )


def script(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    n = len(request.messages)
    if last.role == "tool":
        if last.text.startswith("{"):
            return reply(f"Started Devbox task {json.loads(last.text)['task_id']}.")
        return reply(last.text)
    if last.text.startswith("Review"):
        args = {"repos": ["api"], "prompt": last.text, "title": "Flaky test review", "pr": False}
        return call_tool("devbox", args, id=f"devbox-{n}")
    if last.text.startswith("Fix"):
        args = {"repos": ["web"], "prompt": last.text, "title": "Fix the login page"}
        return call_tool("devbox", args, id=f"devbox-{n}")
    if last.text.startswith("Cancel"):
        return call_tool("task_cancel", {"task_id": last.text.split()[-1]}, id=f"cancel-{n}")
    return reply(f"Devbox: {last.text.split('] ', 1)[-1]}")


def build(box: FakeDevbox) -> Agent:
    agent = Agent(ScriptedProvider(script), ToolRegistry([devbox_tool(box), task_cancel_tool()]))
    install(agent)
    return agent


def answer_open(h: Any, prefix: str, **answer: Any) -> list[str]:
    return [
        str(answer_in(h, a.id, **answer)) for a in pending_asks(h) if a.prompt.startswith(prefix)
    ]


async def scenario(world: World) -> dict[str, Any]:
    box = world.services.setdefault("devbox", FakeDevbox())
    agent = world.services.setdefault("agent", build(box))
    auth = world.services.setdefault("auth", InMemoryAuthProviders())
    h = await world.process(agent.task_kinds())
    h.services.update({"auth_providers": auth, "webhook_base_url": "https://bide.example"})
    conv = Conversations(h, agent)
    cid = await conv.create("main")
    say = world.say

    say("1. The user asks for a review; the model starts the devbox tool and gets a receipt.")
    await conv.submit(cid, "Review the flaky-test fix in api", request_id="r1")
    await h.run_until_parked()
    say(f"   agent: {conv.entries(cid)[-1]['text']}")
    for request in pending_authorizations(h):
        say(f"2. The run needs a Devbox sign-in: {request.provider} (step {request.step})")
        result = await complete_authorization_in(h, request.id, FakeDevbox.TOKEN)
        say(f"   the OAuth callback stores the token -> {result}; the step is retried")
    await h.run_until_parked()
    [dev] = [t for t in box.tasks.values() if t["title"] == "Flaky test review"]
    say(f"   Devbox task {dev['task_id']} created; its webhook: {dev['webhook'][:30]}...")

    world.at(5 * MINUTE)
    box.emit(dev["task_id"], 1, "running")
    box.emit(dev["task_id"], 2, "attention-required")
    say(f"3. Devbox posts running, attention-required -> {box.flush(h)}")
    await h.run_until_parked()
    for ask in pending_asks(h):
        say(f"   the person is asked: {ask.prompt.splitlines()[0]!r}")
    world.at(9 * MINUTE)
    say(f"   they reply -> {answer_open(h, 'Devbox needs', text='Use the staging database')}")
    await h.run_until_parked()
    say(f"   Devbox was prompted: {box.prompted(dev['task_id'])}")

    world.at(30 * MINUTE)
    box.emit(dev["task_id"], 3, "complete")
    box.emit(dev["task_id"], 2, "attention-required", copy=1)  # a retried old post
    say(f"4. Devbox repeats an old post and posts complete -> {box.flush(h)}")
    await h.run_until_parked()
    choice = "done" if APPLY in box.prompted(dev["task_id"]) else "apply"
    picked = answer_open(h, "Review finished", option_id=choice)
    say(f"   'Apply these findings?' -> the person picks {choice}: {picked}")
    await h.run_until_parked()
    if APPLY in box.prompted(dev["task_id"]):
        box.emit(dev["task_id"], 4, "running")
        box.emit(dev["task_id"], 5, "complete")
        say(f"   Devbox applies them and opens a PR -> {box.flush(h)}")
    await h.run_until_parked()
    picked = answer_open(h, "Review finished", option_id="done")
    say(f"   'Apply these findings?' again -> done: {picked}")
    await h.run_until_parked()
    say(f"   agent: {conv.entries(cid)[-1]['text']}")

    say("5. A second task, then the user cancels it: the body's finally stops the sandbox.")
    await conv.submit(cid, "Fix the login page in web", request_id="r2")
    await h.run_until_parked()
    second = next(t for t in background_tasks(h) if t.arguments["title"] == "Fix the login page")
    await conv.submit(cid, f"Cancel {second.id}", request_id="r3")
    await h.run_until_parked()
    say(f"   agent: {conv.entries(cid)[-1]['text']}")
    say(f"   sandboxes stopped: {box.stopped}")
    tasks = {t.arguments["title"]: t for t in background_tasks(h)}
    for title, task in tasks.items():
        say(f"   task index: {title!r} {task.status}")
    first = tasks["Flaky test review"]
    return {
        "result": first.result,
        "prompts": box.prompted(dev["task_id"]),
        "devbox_tasks": len(box.tasks),
        "stopped": box.stopped,
        "statuses": sorted(t.status for t in tasks.values()),
        "asks": len(pending_asks(h)),
    }


def check(result: dict[str, Any], world: World) -> None:
    """One run saw the task through: one sign-in, one Devbox task, each prompt once."""
    assert result["result"] == {
        "summary": "2 findings: a race in the retry loop; a missing timeout",
        "prs": ["https://git.example/api/pull/42"],
        "task_url": "https://devbox.example/tasks/dt-1",
    }
    assert result["prompts"] == ["Use the staging database", APPLY]
    assert result["devbox_tasks"] == 2 and result["stopped"] == ["box-2"]
    assert result["statuses"] == ["cancelled", "completed"] and result["asks"] == 0


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: one run, one webhook, a sign-in, two questions, a PR; cancel stopped the sandbox")
