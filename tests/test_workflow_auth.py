"""Provider authorization inside steps (design 000 §3.2, §10): get_token in a step of a
background run resolves, a sign-in parks the run and the callback resumes it (the step is
retried), tokens never enter the history, and both methods raise in the body itself."""

from __future__ import annotations

import json

from kit import run
from test_workflow_support import Note, Tools, deps_for

from bide.app import App
from bide.service import workflow as wf_service
from bide.workflow import (
    StepFailed,
    WorkflowError,
    background_tasks,
    complete_authorization_in,
    define_workflow_tool,
    pending_authorizations,
)

TOKEN = "tok-SECRET-1234"


class FakeApi:
    """A provider API that wants a bearer token, and records what it did."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.reject_next = False

    def create(self, token: str, name: str) -> dict:
        self.calls.append(("create", token))
        return {"id": f"box-{name}"}


def everything_in(t: Tools, task_id: str) -> str:
    """Every memo of the task and every document of the session, as text."""
    docs = t.kit.store.list_docs("s1", "")
    return json.dumps([t.memos(task_id), [d.body for d in docs]])


def test_get_token_in_a_step_of_a_background_run_resolves():
    api = FakeApi()

    async def body(args, ctx, task):
        async def create(step):
            return api.create(await step.get_token("devbox"), args.note)

        return await ctx.step(create, name="create")

    async def go():
        t = await Tools(define_workflow_tool("box", "", Note, body, lifetime="task")).start()
        t.auth.store_token("s1", "devbox", TOKEN)
        await t.call("box", {"note": "a"})
        await t.h.run_until_parked()
        [info] = background_tasks(t.h)
        assert (info.status, info.result) == ("completed", {"id": "box-a"})
        assert api.calls == [("create", TOKEN)]

    run(go())


def test_an_authorization_requirement_parks_and_the_callback_resumes_the_step():
    api = FakeApi()
    runs = {"plan": 0, "create": 0}

    async def body(args, ctx, task):
        def plan():
            runs["plan"] += 1
            return "plan-1"

        planned = await ctx.step(plan, name="plan")

        async def create(step):
            runs["create"] += 1
            token = await ctx.get_token("devbox")  # the body's ctx works inside its step
            return api.create(token, planned)

        created = await ctx.step(create, name="create")
        await ctx.sleep(hours=1)  # park again: inspect what the history holds
        return created

    async def go():
        t = await Tools(define_workflow_tool("box", "", Note, body, lifetime="task")).start()
        call = await t.call("box", {})
        await t.h.run_until_parked()
        task_id = t.result(call).details["task_id"]
        assert t.status(task_id) == "sleeping"
        [request] = pending_authorizations(t.h)
        assert (request.provider, request.step, request.task_id) == ("devbox", "create", task_id)
        assert api.calls == [] and runs == {"plan": 1, "create": 1}
        assert await complete_authorization_in(t.h, request.id, TOKEN) == "delivered"
        assert await complete_authorization_in(t.h, request.id, "other") == "duplicate"
        await t.h.run_until_parked()
        assert runs == {"plan": 1, "create": 2}  # the interrupted step retried, not the plan
        assert api.calls == [("create", TOKEN)]
        assert pending_authorizations(t.h) == []
        assert TOKEN not in everything_in(t, task_id)  # never in the history or any document
        t.kit.clock.advance(3600)
        await t.h.run_until_parked()
        assert background_tasks(t.h)[0].result == {"id": "box-plan-1"}

    run(go())


def test_get_token_and_require_auth_raise_in_the_body_itself():
    async def body(args, ctx):
        errors = []
        for call in (lambda: ctx.get_token("devbox"), lambda: ctx.require_auth("devbox")):
            try:
                await call()
            except WorkflowError as exc:
                errors.append(str(exc))
        return errors

    async def go():
        t = await Tools(define_workflow_tool("body", "", Note, body)).start()
        t.auth.store_token("s1", "devbox", TOKEN)  # a token exists: still refused in the body
        call = await t.call("body", {})
        await t.h.run_until_parked()
        first, second = t.result(call).details
        assert "get_token('devbox') works only inside a step" in first
        assert "require_auth('devbox') works only inside a step" in second

    run(go())


def test_a_step_that_returns_its_token_fails_instead_of_recording_it():
    async def body(args, ctx):
        async def leak(step):
            return {"token": await step.get_token("devbox")}

        try:
            await ctx.step(leak, name="leak")
        except StepFailed as exc:
            return exc.message

    async def go():
        t = await Tools(define_workflow_tool("leak", "", Note, body)).start()
        t.auth.store_token("s1", "devbox", TOKEN)
        call = await t.call("leak", {})
        await t.h.run_until_parked()
        assert (
            t.result(call).text
            == "step 'leak' returned a provider token; tokens never enter the history"
        )

    run(go())


def test_a_token_rejected_right_after_sign_in_fails_the_step():
    attempts: list[int] = []

    async def body(args, ctx):
        async def call(step):
            attempts.append(step.attempt)
            await step.get_token("devbox")
            await step.require_auth("devbox")  # the provider keeps refusing the token

        try:
            await ctx.step(call, name="call")
        except StepFailed as exc:
            return f"{exc.error_type}: {exc.message}"

    async def go():
        t = await Tools(define_workflow_tool("loop", "", Note, body)).start()
        t.auth.store_token("s1", "devbox", "stale")
        call = await t.call("loop", {})
        await t.h.run_until_parked()
        [request] = pending_authorizations(t.h)  # rejected: sign in again
        await complete_authorization_in(t.h, request.id, TOKEN)
        await t.h.run_until_parked()
        assert (
            t.result(call).text
            == "AuthorizationFailed: devbox rejected the token right after sign-in"
        )
        assert attempts == [1, 2]

    run(go())


def test_the_authorization_service_stores_the_token_in_the_port_and_resumes():
    async def body(args, ctx):
        async def use(step):
            return len(await step.get_token("crm"))

        return await ctx.step(use, name="use")

    async def go():
        t = await Tools(define_workflow_tool("crm", "", Note, body)).start()
        deps = deps_for(
            t.kit, App(tools=t.registry, tasks=list(t.kit.kinds)), {"auth_providers": t.auth}
        )
        call = await t.call("crm", {})
        await t.h.run_until_parked()
        [request] = pending_authorizations(t.kit.store, "s1")
        result = await wf_service.complete_authorization(deps, "s1", request.id, TOKEN)
        assert result == "delivered" and t.auth.tokens[("s1", "crm")] == TOKEN
        assert await wf_service.complete_authorization(deps, "s1", "auth-x", TOKEN) == "not_found"
        await t.reopen()
        await t.h.run_until_parked()
        assert t.result(call).text == str(len(TOKEN))

    run(go())
