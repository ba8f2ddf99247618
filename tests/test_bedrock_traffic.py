"""Bedrock Converse for real traffic: read timeouts sized to the answer and to the invocation's
remaining time, no botocore retries (the generation retries within the Lambda deadline), and
prompt-cache points.

Every request goes through a real ``bedrock-runtime`` client and botocore's Stubber, which
validates the request against the Converse service model and every stubbed response against
the operation's output shape; a ``before-send`` guard fails any request that would leave the
machine.
"""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest
from bedrock_kit import MODEL, WEATHER, ask, converse_response, tools_config
from botocore.exceptions import ParamValidationError, ReadTimeoutError
from botocore.stub import Stubber
from kit import Kit, run

from bide import Completed, Terminal, define_task
from bide.agent import STOP_AT_SERVICE, Agent, Conversations
from bide.agent.providers import (
    AssistantMessage,
    ModelDeferred,
    ModelError,
    ModelRequest,
    ToolCallRequest,
    ToolResultMessage,
    UserMessage,
)
from bide.aws.bedrock import BedrockConverseProvider, Timing, converse_client_config


class Factory:
    """Makes stubbed ``bedrock-runtime`` clients: each gets the queued responses, and the
    configs asked for are kept."""

    def __init__(self) -> None:
        self.configs: list[Any] = []
        self.responses: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        self.stubbers: list[Stubber] = []
        self.escaped: list[Any] = []

    def __call__(self, config: Any) -> Any:
        self.configs.append(config)
        client = boto3.client("bedrock-runtime", region_name="us-east-1", config=config)
        client.meta.events.register("before-send", self._refuse)
        stubber = Stubber(client)
        for response, expected in self.responses:
            stubber.add_response("converse", response, expected)
        self.responses = []
        stubber.activate()
        self.stubbers.append(stubber)
        return client

    def _refuse(self, request: Any, **_: Any) -> None:
        self.escaped.append(request)
        raise AssertionError(f"a request got past the Stubber: {request.url}")

    def done(self) -> None:
        for stubber in self.stubbers:
            stubber.assert_no_pending_responses()
        assert self.escaped == []


def answer(text: str = "ok", **usage: int) -> dict[str, Any]:
    return converse_response([{"text": text}], **usage)


@pytest.mark.parametrize(
    ("max_tokens", "time_limit", "read_timeout"),
    [
        (None, None, 3600.0),  # no output budget known: the ceiling
        (4000, None, 460.0),  # 60 s to the first token, then 4000 tokens at 10/s
        (4000, 200.0, 195.0),  # the invocation has 200 s left: less the 5 s margin
        (4000, 101.0, 90.0),  # rounded down to a 15 s step (one client per step)
        (100, 900.0, 70.0),  # a short answer needs less than the invocation has
    ],
)
def test_the_read_timeout_is_sized_to_the_answer_and_the_invocation(
    max_tokens, time_limit, read_timeout
):
    factory = Factory()
    provider = BedrockConverseProvider(MODEL, client_factory=factory)
    expected: dict[str, Any] = {"modelId": MODEL, "messages": [_user("Hi")]}
    if max_tokens is not None:
        expected["inferenceConfig"] = {"maxTokens": max_tokens}
    factory.responses.append((answer(), expected))
    request = ask("Hi", max_tokens=max_tokens, time_limit=time_limit)
    assert asyncio.run(provider.complete(request)).text == "ok"
    [config] = factory.configs
    assert config.read_timeout == read_timeout
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}
    factory.done()


def test_too_little_time_left_sends_nothing():
    factory = Factory()
    provider = BedrockConverseProvider(MODEL, client_factory=factory)
    with pytest.raises(ModelDeferred) as caught:
        asyncio.run(provider.complete(ask("Hi", time_limit=24.0)))
    assert caught.value.retryable and "next invocation" in str(caught.value)
    assert factory.configs == []  # no client, no request


def _timeouts(config: Any) -> int:
    """How many times botocore sends one ``converse`` call whose every read times out."""
    client = boto3.client("bedrock-runtime", region_name="us-east-1", config=config)
    sent: list[Any] = []

    def time_out(request: Any, **_: Any) -> None:
        sent.append(request)
        raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send", time_out)
    provider = BedrockConverseProvider(MODEL, client=client)
    with pytest.raises(ModelError) as caught:
        asyncio.run(provider.complete(ask("Hi")))
    assert caught.value.retryable and caught.value.code == "ReadTimeoutError"
    return len(sent)


def test_botocore_never_resends_a_timed_out_generation():
    # botocore's own retries (the default config) resend the request: each resend waits the
    # whole read timeout again, whatever the Lambda deadline says.
    assert _timeouts(None) > 1
    assert _timeouts(converse_client_config(60.0)) == 1


def test_an_answer_that_outlasts_the_invocation_is_given_up_in_time():
    class Slow:
        def converse(self, **_: Any) -> Any:
            import time

            time.sleep(0.5)
            return answer()

    timing = Timing(margin=0.0, minimum=0.0)
    provider = BedrockConverseProvider(MODEL, client=Slow(), timing=timing)
    with pytest.raises(ModelError) as caught:
        asyncio.run(provider.complete(ask("Hi", time_limit=0.05)))
    assert caught.value.retryable and caught.value.code == "invocation_deadline"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"text": text}]}


CACHE = {"cachePoint": {"type": "default"}}


def test_cache_points_after_the_system_prompt_the_tools_and_the_conversation():
    factory = Factory()
    provider = BedrockConverseProvider(
        MODEL, client_factory=factory, cache=("system", "tools", "messages")
    )
    request = ModelRequest(
        system="Be brief.",
        messages=(
            UserMessage(text="Weather in Oslo?"),
            AssistantMessage(
                tool_calls=(
                    ToolCallRequest(id="t1", name="get_weather", arguments={"city": "Oslo"}),
                )
            ),
            ToolResultMessage(call_id="t1", text="4 C"),
        ),
        tools=(WEATHER,),
    )
    tool_config = tools_config(WEATHER)
    tool_config["tools"].append(CACHE)
    expected = {
        "modelId": MODEL,
        "system": [{"text": "Be brief."}, CACHE],
        "messages": [
            _user("Weather in Oslo?"),
            {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "t1",
                            "name": "get_weather",
                            "input": {"city": "Oslo"},
                        }
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "t1",
                            "content": [{"text": "4 C"}],
                            "status": "success",
                        }
                    },
                    CACHE,
                ],
            },
        ],
        "toolConfig": tool_config,
    }
    response = answer("4 C in Oslo")
    response["usage"].update({"cacheReadInputTokens": 1800, "cacheWriteInputTokens": 40})
    factory.responses.append((response, expected))
    result = asyncio.run(provider.complete(request))
    assert (result.usage.cache_read_tokens, result.usage.cache_write_tokens) == (1800, 40)
    factory.done()


def test_no_cache_points_unless_asked_and_unknown_places_are_refused():
    assert "cachePoint" not in str(
        BedrockConverseProvider(MODEL, client=object()).converse_params(ask("Hi"))
    )
    with pytest.raises(ValueError, match="unknown places \\['prompt'\\]"):
        BedrockConverseProvider(MODEL, client=object(), cache=("prompt",))  # type: ignore[arg-type]


def test_a_stubbed_response_of_the_wrong_shape_is_refused():
    """The Stubber checks responses against the Converse output shape, so the responses these
    tests stub are ones Bedrock could send."""
    stubber = Stubber(boto3.client("bedrock-runtime", region_name="us-east-1"))
    wrong = answer()
    wrong["usage"]["inputTokens"] = "many"
    with pytest.raises(ParamValidationError):
        stubber.add_response("converse", wrong, None)


def test_a_deferred_request_parks_the_generation_until_the_invocation_stops():
    """The generation tells the provider how long the invocation has left; with too little it
    parks until the worker's stop time, not counting an attempt, and the next invocation asks
    with its own time."""

    async def go():
        factory = Factory()
        provider = BedrockConverseProvider(MODEL, client_factory=factory)
        agent = Agent(provider)
        kit = Kit(*agent.task_kinds())
        conv = Conversations(kit.h, agent)
        now = kit.clock.now()
        kit.h.services[STOP_AT_SERVICE] = now + 10.0  # the invocation is nearly over
        await kit.h.open()
        await conv.create("c")
        await conv.submit("c", "Hi", request_id="r1")
        await kit.h.run_until_parked()
        [generation] = kit.h.live_tasks.values()
        assert generation.state.status == "sleeping"
        assert generation.state.until == now + 10.0
        assert generation.state.checkpoint == {"phase": "request", "attempt": 0}
        assert factory.configs == []  # nothing was sent
        # The next invocation: 300 s left.
        kit.clock.set(now + 11.0)
        h = await kit.reopen()
        h.services[STOP_AT_SERVICE] = now + 311.0
        factory.responses.append((answer("hello"), {"modelId": MODEL, "messages": [_user("Hi")]}))
        await h.run_until_parked()
        assert Conversations(h, agent).submission("c", "r1").answer == "hello"
        [config] = factory.configs
        assert config.read_timeout == 285.0  # 300 s left less the margin, on a 15 s step
        factory.done()

    run(go())


def test_the_worker_tells_tasks_when_its_invocation_stops():
    from test_workflow_support import deps_for

    from bide.service.worker import run_session

    seen: list[Any] = []

    async def probe(task, rt):
        seen.append(rt.services.get(STOP_AT_SERVICE))
        await rt.commit(Terminal(outcome=Completed(result=None)))

    kind = define_task("test.probe", 1, lambda _: "p", {"p": probe})

    class App:
        def task_kinds(self):
            return [kind]

    async def go():
        kit = Kit(kind)
        await kit.h.open()
        await kit.h.create_task(kind, {})
        deps = deps_for(kit, App())
        stop_at = kit.clock.now() + 600.0
        await run_session(deps, "s1", stop_at=stop_at)
        assert seen == [stop_at]

    run(go())
