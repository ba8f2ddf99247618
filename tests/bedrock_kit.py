"""The Bedrock Converse adapter's test bench: a real ``bedrock-runtime`` client behind botocore's
Stubber, and the Converse shapes (responses, tool specs, toolUse and toolResult blocks) the
adapter's tests build requests and answers from.

The Stubber answers in ``before-call``, after botocore has validated and serialized the request
against the real Converse model, so a request shape Converse would refuse fails here too. No
request can leave the machine: a ``before-send`` guard fails any call that gets past the Stubber,
and every test using the :func:`stubbed` fixture ends with the Stubber's queue empty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import boto3
import pytest
from botocore.stub import Stubber
from pydantic import BaseModel, Field

from bide.agent.providers import ModelRequest, ModelResponse, ToolSpec, UserMessage
from bide.aws.bedrock import BedrockConverseProvider

MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"


class Stubbed:
    """A real client, its Stubber and the requests that tried to get past it."""

    def __init__(self) -> None:
        self.client = boto3.client("bedrock-runtime", region_name="us-east-1")
        self.stubber = Stubber(self.client)
        self.escaped: list[Any] = []
        self.client.meta.events.register("before-send", self._refuse)

    def _refuse(self, request: Any, **_: Any) -> None:
        self.escaped.append(request)
        raise AssertionError(f"a request got past the Stubber: {request.url}")

    def provider(self, **kwargs: Any) -> BedrockConverseProvider:
        return BedrockConverseProvider(MODEL, client=self.client, **kwargs)


@pytest.fixture
def stubbed() -> Iterator[Stubbed]:
    stubbed = Stubbed()
    with stubbed.stubber:
        yield stubbed
        stubbed.stubber.assert_no_pending_responses()
    # Not a test module, so no assertion rewriting: the message says what went wrong.
    assert stubbed.escaped == [], f"requests got past the Stubber: {stubbed.escaped}"


def complete(provider: BedrockConverseProvider, request: ModelRequest) -> ModelResponse:
    return asyncio.run(provider.complete(request))


def converse_response(
    content: list[dict[str, Any]],
    stop_reason: str = "end_turn",
    input_tokens: int = 25,
    output_tokens: int = 12,
) -> dict[str, Any]:
    """A Converse response as Bedrock sends it."""
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": {
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens,
        },
        "metrics": {"latencyMs": 843},
    }


def ask(text: str, **kwargs: Any) -> ModelRequest:
    return ModelRequest(messages=(UserMessage(text=text),), **kwargs)


class WeatherArgs(BaseModel):
    """Arguments of the weather tool."""

    city: str = Field(description="City name, e.g. Oslo")
    unit: Literal["celsius", "fahrenheit"] = "celsius"


WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters=WeatherArgs.model_json_schema(),
)
TIME = ToolSpec(
    name="get_time",
    description="Current local time in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def tools_config(*tools: ToolSpec) -> dict[str, Any]:
    return {
        "tools": [
            {
                "toolSpec": {
                    "name": tool.name,
                    "description": tool.description,
                    "inputSchema": {"json": tool.parameters},
                }
            }
            for tool in tools
        ]
    }


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A toolUse content block as Converse carries it (in answers and in the history)."""
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": arguments}}


def tool_result(call_id: str, text: str, status: str = "success") -> dict[str, Any]:
    """A toolResult content block as the adapter sends it."""
    return {"toolResult": {"toolUseId": call_id, "content": [{"text": text}], "status": status}}
