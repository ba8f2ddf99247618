"""Exposed tool names are checked against the provider's rules when the agent is defined
(Bedrock Converse: ``toolSpec.name`` is 1-64 characters of ``[a-zA-Z0-9_-]``,
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolSpecification.html),
so a name the provider refuses never reaches a request."""

from __future__ import annotations

import boto3
import pytest
from kit import Kit, run
from pydantic import BaseModel

from bide.admission import Admission, Operation, Presentation
from bide.agent import Agent, Conversations
from bide.agent.providers import ToolNameError
from bide.agent.providers.scripted import ScriptedProvider, reply
from bide.aws.bedrock import CONVERSE_TOOL_NAMES, BedrockConverseProvider
from bide.tools import ToolRegistry, define_tool


class Args(BaseModel):
    path: str = ""


async def execute(args: Args, api):
    return "ok"


def tool(name: str):
    return define_tool(name, "A tool", Args, execute)


def bedrock() -> BedrockConverseProvider:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    return BedrockConverseProvider("anthropic.claude-3-5-sonnet-20240620-v1:0", client=client)


def test_the_rule_is_the_one_in_botocores_converse_model():
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    for shape in ("ToolSpecification", "ToolUseBlock"):
        name = client.meta.service_model.shape_for(shape).members["name"].metadata
        assert (name["pattern"], name["min"], name["max"]) == (
            CONVERSE_TOOL_NAMES.pattern,
            1,
            CONVERSE_TOOL_NAMES.max_length,
        )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("fs.read", "does not match [a-zA-Z0-9_-]+"),
        ("read file", "does not match"),
        ("x" * 65, "65 characters long (1 to 64 are accepted)"),
    ],
)
def test_an_agent_refuses_a_name_bedrock_would_refuse(name, why):
    with pytest.raises(ToolNameError) as caught:
        Agent(bedrock(), ToolRegistry([tool("ok_name"), tool(name)]))
    message = str(caught.value)
    assert repr(name) in message and why in message and "ok_name" not in message
    assert "API_runtime_ToolSpecification" in message and "model family 'generic'" in message


def test_accepted_names_pass_and_a_provider_without_a_rule_accepts_any():
    Agent(bedrock(), ToolRegistry([tool("read-file_2"), tool("x" * 64)]))
    Agent(ScriptedProvider(reply("hi")), ToolRegistry([tool("fs.read")]))


def test_with_admission_the_exposed_presentation_names_are_checked_not_identities():
    def operation(exposed: str) -> Operation:
        return Operation("fs.read", tool("fs.read"), (Presentation(exposed, "Read a file", Args),))

    Agent(bedrock(), admission=Admission([operation("read_file")]))  # the identity has a dot
    with pytest.raises(ToolNameError, match=r"'read\.file'"):
        Agent(bedrock(), admission=Admission([operation("read.file")]))


def test_a_tool_added_later_is_refused_when_a_harness_takes_the_agent():
    registry = ToolRegistry([tool("ok_name")])
    agent = Agent(bedrock(), registry)
    registry.add(tool("late.tool"))
    with pytest.raises(ToolNameError, match=r"'late\.tool'"):
        Conversations(Kit(*agent.task_kinds()).h, agent)


def test_a_tool_added_while_running_ends_the_run_with_the_error_before_any_request():
    class Strict(ScriptedProvider):
        tool_name_rule = CONVERSE_TOOL_NAMES

    async def go():
        provider = Strict(reply("hi"))
        registry = ToolRegistry([tool("ok_name")])
        agent = Agent(provider, registry)
        k = Kit(*agent.task_kinds())
        conv = Conversations(k.h, agent)
        await k.h.open()
        await conv.create("c")
        registry.add(tool("late.tool"))
        await conv.submit("c", "hello", request_id="r1")
        await k.h.run_until_parked()
        sub = conv.submission("c", "r1")
        assert sub.status == "unanswered" and "'late.tool'" in sub.error
        assert provider.requests == []  # nothing the provider would refuse was sent

    run(go())
