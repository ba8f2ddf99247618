"""An app with something to look at in the dev console: a question, an approval, a webhook.

``python -m bide dev --app examples.console_app:app`` serves it; ``scripts/console_screenshots.py``
and ``tests/test_console_browser.py`` drive it in a browser. Its scripted model picks a tool
from the user's words:

* "deploy <service>": ``deploy``, a workflow tool that plans (a step), reports progress and
  asks a person to confirm (``ctx.ask``) before it deploys;
* "delete <branch>": ``delete_branch``, a tool wrapped in ``approval_required``: the call
  waits for an approval decided on the page (or ``POST .../approvals/{id}/decide``);
* anything else: ``run_ci`` of :mod:`examples.agent_app`, which mints a webhook and parks for
  up to two hours on the CI's result.

After the tool returns, the model reports its result. No network, no AWS.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from bide.agent import Agent
from bide.agent.providers import ModelRequest, ModelResponse, ToolResultMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.approvals import approval_required
from bide.tools import ToolRegistry, ToolResult, define_tool
from bide.workflow import define_workflow_tool, setup_app
from examples.agent_app import CI_RESULT, RUN_CI

DEPLOY_OPTIONS = [
    {"id": "approve", "label": "Deploy", "style": "primary"},
    {"id": "cancel", "label": "Cancel", "style": "danger"},
]


class DeployArgs(BaseModel):
    """deploy's parameters."""

    service: str = Field(description="the service to deploy, e.g. 'api'")


class BranchArgs(BaseModel):
    """delete_branch's parameters."""

    branch: str = Field(description="the git branch to delete")


async def deploy(args: DeployArgs, ctx: Any) -> dict[str, Any]:
    """Plan, ask, deploy: the ask parks the call until a person answers."""
    plan = await ctx.step(
        lambda s: {
            "service": args.service,
            "summary": "3 pods, 1 migration",
            "key": s.idempotency_key,
        },
        name="plan",
    )
    ctx.progress({"stage": "waiting for approval", "plan": plan["summary"]})
    answer = await ctx.ask(
        f"Deploy {args.service}? The plan: {plan['summary']}.",
        display="confirmation",
        options=DEPLOY_OPTIONS,
        allow_freeform=True,
    )
    if answer.option_id != "approve":
        return {"deployed": False, "answer": answer.option_id, "note": answer.text}
    url = await ctx.step(lambda s: f"https://{args.service}.example/v2", name="apply")
    return {"deployed": True, "url": url, "note": answer.text}


async def delete_branch(args: BranchArgs, api: Any) -> ToolResult:
    """Runs only once a person approved it."""
    return ToolResult.of_text(f"deleted branch {args.branch}")


DEPLOY = define_workflow_tool(
    "deploy", "Deploy a service after a person confirms the plan", DeployArgs, deploy
)
DELETE_BRANCH = approval_required(
    define_tool("delete_branch", "Delete a git branch", BranchArgs, delete_branch, replay="unsafe")
)


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return str(message.text)
    return ""


def scripted_model(request: ModelRequest) -> ModelResponse:
    """Calls the tool the user's words name, then reports its result (from the conversation,
    so a request sent again after a crash gets the same answer)."""
    last = request.messages[-1] if request.messages else None
    if isinstance(last, ToolResultMessage):
        return reply(f"{'Failed' if last.is_error else 'Done'}: {last.text}")
    text = _last_user_text(request)
    turns = sum(1 for m in request.messages if m.role == "user")
    words = re.findall(r"[\w.-]+", text.lower())
    if "deploy" in words:
        service = words[words.index("deploy") + 1] if words[-1] != "deploy" else "api"
        return call_tool(
            "deploy", {"service": service}, id=f"deploy_{turns}", text=f"Planning {service}."
        )
    if "delete" in words:
        branch = words[words.index("delete") + 1] if words[-1] != "delete" else "old"
        return call_tool(
            "delete_branch",
            {"branch": branch},
            id=f"delete_{turns}",
            text=f"Deleting {branch} needs your approval.",
        )
    return call_tool("run_ci", {"ref": "main"}, id=f"run_ci_{turns}", text="Running CI on main.")


def build_app() -> App:
    """The app: the agent, its three tools and the CI's signal."""
    tools = ToolRegistry([DEPLOY, DELETE_BRANCH, RUN_CI])
    agent = Agent(ScriptedProvider(scripted_model), tools)
    return setup_app(App(signals=[CI_RESULT], tools=tools, agent=agent))


app = build_app()
