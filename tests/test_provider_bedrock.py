"""The Bedrock Converse adapter's mapping, against botocore's Stubber on a real
``bedrock-runtime`` client (:mod:`bedrock_kit`): answers (text, tool calls, stop reasons) and
requests (history turns, tool config, system prompt, inference config). Errors are in
``test_provider_bedrock_errors.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from bedrock_kit import (
    MODEL,
    TIME,
    WEATHER,
    Stubbed,
    WeatherArgs,
    ask,
    complete,
    converse_response,
    stubbed,
    tool_result,
    tool_use,
    tools_config,
)

from bide.agent.providers import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from bide.aws.bedrock import BLANK_TEXT

__all__ = ["stubbed"]  # a fixture, imported for pytest to find


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
