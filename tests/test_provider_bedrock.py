"""The Bedrock Converse adapter against botocore's Stubber on a real ``bedrock-runtime`` client.

The Stubber answers in ``before-call``, after botocore has validated and serialized the request
against the real Converse model, so a request shape Converse would refuse fails here too. No
request can leave the machine: a ``before-send`` guard fails any call that gets past the Stubber,
and every test ends with the Stubber's queue empty.

Long because: the request mapping, the response mapping and the error table all share the
Stubber fixtures and the Converse shapes built at the top; they are one adapter's contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import boto3
import pytest
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
    StubAssertionError,
)
from botocore.stub import Stubber
from pydantic import BaseModel, Field

from bide.agent.providers import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from bide.aws.bedrock import BLANK_TEXT, BedrockConverseProvider

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
    assert stubbed.escaped == []


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


# -- answers -------------------------------------------------------------------------------


def test_plain_text_answer(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response(
        "converse",
        converse_response([{"text": "Hello! How can I help?"}], input_tokens=9, output_tokens=8),
        {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "Hi"}]}]},
    )

    response = complete(stubbed.provider(), ask("Hi"))

    assert response == ModelResponse(
        text="Hello! How can I help?",
        stop_reason="end_turn",
        usage=Usage(input_tokens=9, output_tokens=8),
    )


def test_single_tool_use_with_tool_config_from_a_pydantic_schema(stubbed: Stubbed) -> None:
    schema = WeatherArgs.model_json_schema()
    assert schema["properties"]["city"]["description"] == "City name, e.g. Oslo"
    stubbed.stubber.add_response(
        "converse",
        converse_response(
            [
                {"text": "Let me look that up."},
                tool_use(
                    "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                    "get_weather",
                    {"city": "Oslo", "unit": "celsius"},
                ),
            ],
            stop_reason="tool_use",
        ),
        {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "Weather in Oslo?"}]}],
            "toolConfig": {
                "tools": [
                    {
                        "toolSpec": {
                            "name": "get_weather",
                            "description": "Current weather for a city.",
                            "inputSchema": {"json": schema},
                        }
                    }
                ]
            },
        },
    )

    response = complete(stubbed.provider(), ask("Weather in Oslo?", tools=(WEATHER,)))

    assert response.stop_reason == "tool_use"
    assert response.text == "Let me look that up."
    assert response.tool_calls == (
        ToolCallRequest(
            id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            name="get_weather",
            arguments={"city": "Oslo", "unit": "celsius"},
        ),
    )


def test_multiple_tool_calls_in_one_answer(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response(
        "converse",
        converse_response(
            [
                tool_use("tooluse_1", "get_weather", {"city": "Oslo"}),
                tool_use("tooluse_2", "get_time", {"city": "Lima"}),
            ],
            stop_reason="tool_use",
        ),
        {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "Oslo weather, Lima time"}]}],
            "toolConfig": tools_config(WEATHER, TIME),
        },
    )

    response = complete(stubbed.provider(), ask("Oslo weather, Lima time", tools=(WEATHER, TIME)))

    assert response.text == ""
    assert response.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("tooluse_1", "get_weather", {"city": "Oslo"}),
        ("tooluse_2", "get_time", {"city": "Lima"}),
    ]


@pytest.mark.parametrize(
    ("history", "expected", "answer"),
    [
        pytest.param(
            ModelRequest(
                system="You are terse.",
                messages=(
                    UserMessage(text="Oslo weather, Lima time"),
                    AssistantMessage(
                        text="Checking both.",
                        tool_calls=(
                            ToolCallRequest(
                                id="tooluse_1", name="get_weather", arguments={"city": "Oslo"}
                            ),
                            ToolCallRequest(
                                id="tooluse_2", name="get_time", arguments={"city": "Lima"}
                            ),
                        ),
                    ),
                    ToolResultMessage(call_id="tooluse_1", text="4°C, light snow"),
                    ToolResultMessage(
                        call_id="tooluse_2", text="clock service down", is_error=True
                    ),
                ),
                tools=(WEATHER, TIME),
                max_tokens=512,
            ),
            {
                "modelId": MODEL,
                "system": [{"text": "You are terse."}],
                "inferenceConfig": {"maxTokens": 512},
                "toolConfig": tools_config(WEATHER, TIME),
                "messages": [
                    {"role": "user", "content": [{"text": "Oslo weather, Lima time"}]},
                    {
                        "role": "assistant",
                        "content": [
                            {"text": "Checking both."},
                            tool_use("tooluse_1", "get_weather", {"city": "Oslo"}),
                            tool_use("tooluse_2", "get_time", {"city": "Lima"}),
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            tool_result("tooluse_1", "4°C, light snow"),
                            tool_result("tooluse_2", "clock service down", "error"),
                        ],
                    },
                ],
            },
            "Oslo: 4°C, light snow. Lima time unavailable.",
            id="tool-results-go-back-as-one-user-turn",
        ),
        pytest.param(
            ModelRequest(
                messages=(
                    UserMessage(text="First."),
                    UserMessage(text="Second."),
                    AssistantMessage(
                        tool_calls=(ToolCallRequest(id="t1", name="get_weather", arguments={}),)
                    ),
                    ToolResultMessage(call_id="t1", text="sunny"),
                    UserMessage(text="Also: thanks."),
                ),
                tools=(WEATHER,),
            ),
            {
                "modelId": MODEL,
                "toolConfig": tools_config(WEATHER),
                "messages": [
                    {"role": "user", "content": [{"text": "First."}, {"text": "Second."}]},
                    {"role": "assistant", "content": [tool_use("t1", "get_weather", {})]},
                    {
                        "role": "user",
                        "content": [tool_result("t1", "sunny"), {"text": "Also: thanks."}],
                    },
                ],
            },
            "You're welcome.",
            id="adjacent-messages-of-one-role-merge-into-one-turn",
        ),
        # Converse refuses blank text blocks, and a refused history would be refused forever.
        pytest.param(
            ModelRequest(
                system="   ",
                messages=(
                    UserMessage(text="Run it"),
                    AssistantMessage(
                        text=" ",
                        tool_calls=(ToolCallRequest(id="t1", name="get_weather", arguments={}),),
                    ),
                    ToolResultMessage(call_id="t1", text=""),
                ),
                tools=(WEATHER,),
            ),
            {
                "modelId": MODEL,
                "toolConfig": tools_config(WEATHER),
                "messages": [
                    {"role": "user", "content": [{"text": "Run it"}]},
                    {"role": "assistant", "content": [tool_use("t1", "get_weather", {})]},
                    {"role": "user", "content": [tool_result("t1", BLANK_TEXT)]},
                ],
            },
            "Done.",
            id="blank-texts-never-reach-converse",
        ),
    ],
)
def test_history_maps_to_converse_turns(
    stubbed: Stubbed, history: ModelRequest, expected: dict[str, Any], answer: str
) -> None:
    # The Stubber compares the whole request with ``expected``: no key more, none less.
    stubbed.stubber.add_response("converse", converse_response([{"text": answer}]), expected)

    response = complete(stubbed.provider(), history)

    assert response.text == answer
    assert response.tool_calls == ()


def test_tool_history_without_tools_still_declares_a_tool_config(stubbed: Stubbed) -> None:
    # Converse refuses toolUse/toolResult blocks without a toolConfig.
    request = ModelRequest(
        messages=(
            UserMessage(text="Weather?"),
            AssistantMessage(tool_calls=(ToolCallRequest(id="t1", name="get_weather"),)),
            ToolResultMessage(call_id="t1", text="sunny"),
        ),
    )
    params = stubbed.provider().converse_params(request)
    assert params["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": "No longer available. Do not call it.",
                    "inputSchema": {"json": {"type": "object", "properties": {}}},
                }
            }
        ]
    }
    stubbed.stubber.add_response("converse", converse_response([{"text": "Sunny."}]), params)

    assert complete(stubbed.provider(), request).text == "Sunny."


def test_system_prompt_maps_to_a_system_block(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response(
        "converse",
        converse_response([{"text": "Ahoy."}]),
        {
            "modelId": MODEL,
            "system": [{"text": "Talk like a pirate."}],
            "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
        },
    )

    assert complete(stubbed.provider(), ask("Hi", system="Talk like a pirate.")).text == "Ahoy."


def test_inference_config_carries_max_tokens(stubbed: Stubbed) -> None:
    provider = stubbed.provider(inference_config={"temperature": 0.2, "maxTokens": 4096})
    # The request's max_tokens wins over the provider's default, and only for that request.
    for max_tokens, sent in ((64, 64), (None, 4096)):
        stubbed.stubber.add_response(
            "converse",
            converse_response([{"text": "ok"}]),
            {
                "modelId": MODEL,
                "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
                "inferenceConfig": {"temperature": 0.2, "maxTokens": sent},
            },
        )

        complete(provider, ask("Hi", max_tokens=max_tokens))


def test_max_tokens_stop_reason(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response(
        "converse",
        converse_response(
            [{"text": "Once upon a time, in a land far"}],
            stop_reason="max_tokens",
            output_tokens=10,
        ),
        {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "Tell a story"}]}],
            "inferenceConfig": {"maxTokens": 10},
        },
    )

    response = complete(stubbed.provider(), ask("Tell a story", max_tokens=10))

    assert response.stop_reason == "max_tokens"
    assert response.text == "Once upon a time, in a land far"
    assert response.usage.output_tokens == 10


@pytest.mark.parametrize(
    ("bedrock_reason", "reason"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "stop_sequence"),
        ("content_filtered", "content_filtered"),
        ("guardrail_intervened", "content_filtered"),
        ("model_context_window_exceeded", "max_tokens"),
    ],
)
def test_stop_reasons(stubbed: Stubbed, bedrock_reason: str, reason: str) -> None:
    stubbed.stubber.add_response(
        "converse", converse_response([{"text": "..."}], stop_reason=bedrock_reason)
    )

    assert complete(stubbed.provider(), ask("Hi")).stop_reason == reason


@pytest.mark.parametrize("bedrock_reason", ["malformed_model_output", "malformed_tool_use"])
def test_malformed_output_is_retryable(stubbed: Stubbed, bedrock_reason: str) -> None:
    stubbed.stubber.add_response("converse", converse_response([], stop_reason=bedrock_reason))

    with pytest.raises(ModelError) as caught:
        complete(stubbed.provider(), ask("Hi"))

    assert (caught.value.retryable, caught.value.code) == (True, bedrock_reason)


def test_other_content_blocks_are_dropped(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response(
        "converse",
        converse_response(
            [
                {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
                {"text": "Part one."},
                {"text": "Part two."},
            ]
        ),
    )

    assert complete(stubbed.provider(), ask("Hi")).text == "Part one.\nPart two."


# -- errors --------------------------------------------------------------------------------


THROTTLED = "Too many requests"
BAD_MODEL = "The provided model identifier is invalid."
SERVICE_ERRORS = [  # code, HTTP status, retryable, message
    ("ThrottlingException", 429, True, THROTTLED),
    ("ServiceUnavailableException", 503, True, THROTTLED),
    ("ModelNotReadyException", 429, True, THROTTLED),
    ("InternalServerException", 500, True, THROTTLED),
    ("ModelTimeoutException", 408, True, THROTTLED),
    ("SomeFutureOverload", 502, True, THROTTLED),  # undocumented: decided by the HTTP status
    ("ValidationException", 400, False, BAD_MODEL),
    ("AccessDeniedException", 403, False, BAD_MODEL),
    ("ResourceNotFoundException", 404, False, BAD_MODEL),
    ("ModelErrorException", 424, False, BAD_MODEL),
    ("SomeFutureMistake", 400, False, BAD_MODEL),  # undocumented: decided by the HTTP status
]


@pytest.mark.parametrize(
    ("code", "status", "retryable", "message"),
    SERVICE_ERRORS,
    ids=[f"{code}-{status}" for code, status, _, _ in SERVICE_ERRORS],
)
def test_service_errors(
    stubbed: Stubbed, code: str, status: int, retryable: bool, message: str
) -> None:
    stubbed.stubber.add_client_error(
        "converse",
        service_error_code=code,
        service_message=message,
        http_status_code=status,
    )

    with pytest.raises(ModelError) as caught:
        complete(stubbed.provider(), ask("Hi"))

    assert (caught.value.retryable, caught.value.code) == (retryable, code)
    assert message in str(caught.value)


def test_model_error_reports_the_model_status(stubbed: Stubbed) -> None:
    stubbed.stubber.add_client_error(
        "converse",
        service_error_code="ModelErrorException",
        service_message="The model failed.",
        http_status_code=424,
        modeled_fields={"originalStatusCode": 500, "resourceName": MODEL},
    )

    with pytest.raises(ModelError) as caught:
        complete(stubbed.provider(), ask("Hi"))

    assert not caught.value.retryable
    assert "model status 500" in str(caught.value)


class RaisingClient:
    """Stands in for a client whose connection fails, which a Stubber cannot simulate."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def converse(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (EndpointConnectionError(endpoint_url="https://bedrock-runtime.example"), True),
        (ReadTimeoutError(endpoint_url="https://bedrock-runtime.example"), True),
        (ConnectTimeoutError(endpoint_url="https://bedrock-runtime.example"), True),
        (NoCredentialsError(), False),
    ],
)
def test_connection_errors(error: Exception, retryable: bool) -> None:
    client = RaisingClient(error)
    provider = BedrockConverseProvider(MODEL, client=client)

    with pytest.raises(ModelError) as caught:
        complete(provider, ask("Hi"))

    assert (caught.value.retryable, caught.value.code) == (retryable, type(error).__name__)
    assert client.calls == 1


def test_stubber_assertions_are_not_turned_into_model_errors() -> None:
    stubbed = Stubbed()
    with stubbed.stubber:
        stubbed.stubber.add_response(
            "converse",
            converse_response([{"text": "never"}]),
            {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "Other"}]}]},
        )
        with pytest.raises(StubAssertionError):
            complete(stubbed.provider(), ask("Hi"))
    assert stubbed.escaped == []


def test_adapter_makes_its_own_client_for_the_region() -> None:
    provider = BedrockConverseProvider(MODEL, region="eu-west-1")
    client = provider.client_for(provider.timing.ceiling)

    assert client.meta.service_model.service_name == "bedrock-runtime"
    assert client.meta.region_name == "eu-west-1"
    assert client.meta.config.read_timeout == 3600.0
    assert provider.client_for(3600.0) is client  # made once per read timeout
