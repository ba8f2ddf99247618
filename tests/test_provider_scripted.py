"""The scripted provider: steps in order, errors raised, callables answering from the request."""

from __future__ import annotations

import asyncio

import pytest

from bide.agent.providers import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolResultMessage,
    UserMessage,
)
from bide.agent.providers.scripted import (
    ScriptedProvider,
    call_tool,
    call_tools,
    last_tool_result,
    reply,
)


def complete(provider: ScriptedProvider, request: ModelRequest) -> ModelResponse:
    return asyncio.run(provider.complete(request))


def ask(text: str) -> ModelRequest:
    return ModelRequest(messages=(UserMessage(text=text),))


def test_steps_are_answered_in_order_and_requests_recorded() -> None:
    provider = ScriptedProvider([reply("one"), reply("two")])
    first, second = ask("a"), ask("b")

    assert complete(provider, first).text == "one"
    assert provider.remaining == 1
    assert complete(provider, second).text == "two"
    assert provider.requests == [first, second]
    assert provider.remaining == 0


def test_an_error_step_is_raised_and_consumed() -> None:
    provider = ScriptedProvider(
        [ModelError("slow down", retryable=True, code="ThrottlingException"), reply("ok")]
    )

    with pytest.raises(ModelError) as caught:
        complete(provider, ask("a"))
    assert (caught.value.retryable, caught.value.code) == (True, "ThrottlingException")
    # The retry gets the next step.
    assert complete(provider, ask("a")).text == "ok"
    assert len(provider.requests) == 2


def test_running_out_of_script_is_a_clear_permanent_error() -> None:
    provider = ScriptedProvider([reply("only")])
    complete(provider, ask("a"))

    with pytest.raises(ModelError) as caught:
        complete(provider, ask("b"))

    assert (caught.value.retryable, caught.value.code) == (False, "script_exhausted")
    assert "request 2" in str(caught.value)
    assert len(provider.requests) == 2


def test_a_callable_step_answers_from_the_conversation() -> None:
    provider = ScriptedProvider(
        [
            call_tool("get_weather", {"city": "Oslo"}),
            lambda request: reply(f"The tool said: {last_tool_result(request)}"),
        ]
    )
    first = ask("Weather?")
    call = complete(provider, first).tool_calls[0]
    follow_up = ModelRequest(
        messages=(
            *first.messages,
            AssistantMessage(tool_calls=(call,)),
            ToolResultMessage(call_id=call.id, text="sunny"),
        )
    )

    assert complete(provider, follow_up).text == "The tool said: sunny"


def test_a_callable_script_answers_every_request() -> None:
    provider = ScriptedProvider(lambda request: reply(f"{len(request.messages)} messages"))

    for _ in range(3):
        assert complete(provider, ask("a")).text == "1 messages"
    assert provider.remaining is None
    assert len(provider.requests) == 3


def test_call_tool_builds_a_tool_use_response_with_stable_ids() -> None:
    response = call_tool("get_weather", {"city": "Oslo"}, text="Looking.")

    assert response.stop_reason == "tool_use"
    assert response.text == "Looking."
    [call] = response.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})
    # Derived ids do not depend on a counter or randomness.
    assert call_tool("get_weather", {"city": "Oslo"}).tool_calls[0].id == call.id
    assert call_tool("get_weather", {"city": "Lima"}).tool_calls[0].id != call.id
    assert call_tool("get_weather", {}, id="c1").tool_calls[0].id == "c1"


def test_call_tools_builds_several_calls_with_distinct_ids() -> None:
    response = call_tools(
        [
            ("get_weather", {"city": "Oslo"}),
            ("get_weather", {"city": "Oslo"}),
            ("get_time", {"city": "Lima"}, "mine"),
            ToolCallRequest(id="given", name="noop"),
        ]
    )

    assert response.stop_reason == "tool_use"
    ids = [call.id for call in response.tool_calls]
    assert ids[2:] == ["mine", "given"]
    assert len(set(ids)) == 4


def test_a_call_id_repeated_in_one_conversation_is_refused() -> None:
    same = call_tool("get_weather", {"city": "Oslo"})
    provider = ScriptedProvider([same, same])
    first = ask("Weather?")
    [call] = complete(provider, first).tool_calls
    follow_up = ModelRequest(
        messages=(
            *first.messages,
            AssistantMessage(tool_calls=(call,)),
            ToolResultMessage(call_id=call.id, text="sunny"),
        )
    )

    with pytest.raises(ModelError) as caught:
        complete(provider, follow_up)

    assert caught.value.code == "script_error"
    assert "pass id=" in str(caught.value)


def test_a_resent_request_takes_the_next_step() -> None:
    # At-least-once: the same request sent twice consumes two steps, and the re-sent one
    # is not mistaken for a repeated call id (the lost answer is not in its conversation).
    provider = ScriptedProvider([call_tool("get_weather", {"city": "Oslo"}), reply("second")])
    request = ask("Weather?")

    assert complete(provider, request).stop_reason == "tool_use"
    assert complete(provider, request).text == "second"
    assert provider.requests == [request, request]


def test_a_callable_step_must_return_a_response() -> None:
    provider = ScriptedProvider([lambda request: "not a response"])  # type: ignore[list-item,return-value]

    with pytest.raises(TypeError, match="ModelResponse"):
        complete(provider, ask("a"))
