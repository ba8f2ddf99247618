"""The example agent app: an agent with a ``run_ci`` tool that waits hours for a CI webhook.

``bide dev`` serves it by default (``--app examples.agent_app:app``), ``make demo`` tells its
story, and a deployment points ``BIDE_APP`` at it (or at your own module built the same way).

``run_ci`` mints a capability webhook for its call, "triggers" a fake CI by putting a build
request holding the webhook URL into the session's ``ci/inbox/`` documents (a real tool would
send it to the CI's API), and parks on the ``app.ci-result`` signal with a 2-hour deadline.
Nothing runs while it waits. When the CI posts its result to the URL the call resumes and
returns the result to the model.

The model is configuration: ``BIDE_MODEL_PROVIDER=scripted`` (the default: a script that
answers from the conversation, no network) or ``bedrock`` with ``BIDE_MODEL_ID`` (Amazon
Bedrock's Converse API, with the usual AWS credentials and region).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field

from bide import HOUR, DefinitionError, SignalFailed, SignalValue, define_signal
from bide.agent import Agent
from bide.agent.providers import ModelProvider, ModelRequest, ModelResponse, ToolResultMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.service.smoke import SMOKE_SIGNAL, SMOKE_TOOL, smoke_reply
from bide.service.webhooks import mint_webhook
from bide.tools import Sleep, ToolRegistry, ToolResult, define_tool


class CiResult(BaseModel):
    """What the CI posts to the webhook."""

    status: Literal["passed", "failed"]
    log_url: str


class CiArgs(BaseModel):
    """run_ci's parameters, as the model sees them."""

    ref: str = Field(description="the git ref to build and test, e.g. 'main'")


CI_RESULT = define_signal("app.ci-result", 1, CiResult)
CI_DEADLINE_SECONDS = 2 * HOUR
CI_INBOX = "ci/inbox/"  # the fake CI's inbox: one document per requested build

SYSTEM = (
    "You are a coding agent. After changing code, verify it with the run_ci tool and report "
    "the CI result to the user."
)


async def run_ci(args: CiArgs, api: Any) -> ToolResult | Sleep:
    """Start a CI build and park until it reports (or two hours pass)."""
    state = await api.read_signal(CI_RESULT, "done")
    if isinstance(state, SignalValue):
        result: CiResult = state.value
        text = f"CI {result.status} on {args.ref}: {result.log_url}"
        return ToolResult.of_text(text, is_error=result.status != "passed")
    if isinstance(state, SignalFailed):  # the CI posted to <webhook>/failure: the call fails
        raise state.error()
    if state is not None:  # the key expired: the deadline came first
        return ToolResult.of_text(f"CI on {args.ref} did not report within 2 hours", is_error=True)
    # A rerun of this run (after a crash) finds the same webhook and build: both are memoized,
    # so the CI is asked once per call however often this code runs.
    hook = await mint_webhook(api, CI_RESULT, "done")
    build = await api.memo("ci.build", f"build-{api.task_id[-8:]}")
    request = {"build": build, "ref": args.ref, "webhook_url": hook.url, "requested_at": api.now()}
    await api.write(lambda tx: tx.put_doc(CI_INBOX + build, request))
    return Sleep(
        checkpoint={"build": build},
        signals=[CI_RESULT.key("done")],
        until=api.now() + CI_DEADLINE_SECONDS,
    )


RUN_CI = define_tool(
    "run_ci",
    "Run the CI pipeline on a git ref and wait for its result (up to 2 hours).",
    CiArgs,
    run_ci,
    replay="safe",
)


def scripted_model(request: ModelRequest) -> ModelResponse:
    """The default model: asks run_ci for "main", then reports what CI said.

    It answers from the conversation (not by position in a script), so it gives the same
    answer to a request sent again after a crash. A ``bide smoke`` prompt runs the smoke tool
    instead (:mod:`bide.service.smoke`).
    """
    smoke = smoke_reply(request)
    if smoke is not None:
        return smoke
    last = request.messages[-1] if request.messages else None
    if isinstance(last, ToolResultMessage):
        if last.is_error:
            return reply(f"CI did not pass: {last.text}. The fix needs more work.")
        return reply(f"Done: the flaky test is fixed and verified. {last.text}")
    turns = sum(1 for m in request.messages if m.role == "user")
    return call_tool(
        "run_ci",
        {"ref": "main"},
        id=f"call_run_ci_{turns}",  # unique per user turn: one conversation may ask twice
        text="I fixed the flaky test; running CI on main to verify it.",
    )


def model_provider() -> ModelProvider:
    """The provider ``BIDE_MODEL_PROVIDER`` names (``scripted`` by default)."""
    name = os.environ.get("BIDE_MODEL_PROVIDER", "scripted").strip().lower()
    if name == "scripted":
        return ScriptedProvider(scripted_model)
    if name == "bedrock":
        from bide.aws.bedrock import BedrockConverseProvider

        model_id = os.environ.get("BIDE_MODEL_ID", "").strip()
        if not model_id:
            raise DefinitionError("BIDE_MODEL_PROVIDER=bedrock needs BIDE_MODEL_ID (a model id)")
        return BedrockConverseProvider(model_id)
    raise DefinitionError(f"BIDE_MODEL_PROVIDER must be 'scripted' or 'bedrock', not {name!r}")


def build_app() -> App:
    """The app: the agent, its tools and the signals webhooks may deliver."""
    # bide_smoke: what `bide smoke --url ...` checks a deployment with (bide.service.smoke).
    tools = ToolRegistry([RUN_CI, SMOKE_TOOL])
    agent = Agent(model_provider(), tools, system=SYSTEM)
    return App(signals=[CI_RESULT, SMOKE_SIGNAL], tools=tools, agent=agent)


app = build_app()
