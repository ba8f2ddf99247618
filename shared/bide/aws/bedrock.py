"""Amazon Bedrock through the Converse API.

:class:`BedrockConverseProvider` maps a provider-neutral :class:`~.base.ModelRequest` to one
``bedrock-runtime`` ``converse`` call and the answer back to a :class:`~.base.ModelResponse`.
Converse is one request shape for every Bedrock model that takes messages; tool use and
system prompts work with the models that support them.

Converse is stricter than the neutral messages, and the mapping absorbs the difference:

* roles must alternate user/assistant, so adjacent messages of one role become one turn;
* tool results travel in a *user* turn right after the assistant turn that asked for them, so
  consecutive :class:`~.base.ToolResultMessage` s become one user turn of ``toolResult`` blocks;
* blank text blocks are refused, so blank assistant text is left out and blank user or tool
  text is replaced by :data:`BLANK_TEXT` (a refused block would be refused again on every retry
  and wedge the session);
* ``toolConfig`` must be present whenever the conversation holds ``toolUse`` or ``toolResult``
  blocks, so a request without tools but with tool history still declares the tools it names.

Errors become :class:`~.base.ModelError`: throttling, overload, timeouts and connection failures
are ``retryable``; bad requests, missing access and model failures are not.

For real traffic (:class:`Timing`):

* the read timeout is sized to the answer: ``first_token`` seconds plus ``maxTokens`` at a slow
  ``tokens_per_second``, at most ``ceiling`` (botocore's default is 60 s, which a long
  generation exceeds; AWS suggests starting from 3,600 s,
  https://repost.aws/knowledge-center/bedrock-large-model-read-timeouts), and never more than
  the invocation has left (:attr:`~.base.ModelRequest.time_limit`) less ``margin``;
* botocore never resends a request itself (``total_max_attempts=1``): its retries know nothing
  of the Lambda deadline and resend a timed-out generation until they give up. A retryable
  failure goes back to the generation, which parks on time and asks again, in this invocation
  if the backoff fits, else in the next; with less than ``minimum`` seconds left nothing is
  sent at all (:class:`~.base.ModelDeferred`);
* ``cache`` places Converse ``cachePoint`` blocks after the system prompt, after the tools
  and at the end of the conversation, so a repeated prefix is read from the prompt cache
  (https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html; models without
  prompt caching refuse them, so it is off by default).

ConverseStream is not used: an answer arrives whole.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    StubResponseError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from ..agent.providers.base import (
    AssistantMessage,
    ModelDeferred,
    ModelError,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCallRequest,
    ToolNameRule,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "BLANK_TEXT",
    "CONVERSE_TOOL_NAMES",
    "BedrockConverseProvider",
    "CachePlace",
    "Timing",
    "converse_client_config",
]

CONVERSE_TOOL_NAMES = ToolNameRule(
    pattern="[a-zA-Z0-9_-]+",
    max_length=64,
    documented_at="Bedrock Converse ToolSpecification name: length 1-64, pattern "
    "[a-zA-Z0-9_-]+, https://docs.aws.amazon.com/bedrock/latest/APIReference/"
    "API_runtime_ToolSpecification.html",
)
"""The tool names Converse accepts (``toolSpec.name``, and so ``toolUse.name``)."""

BLANK_TEXT = "(empty)"
"""Stands in for blank user or tool-result text, which Converse refuses."""

# Error codes Converse documents for itself. The retryable ones say "not now" (quota,
# overload, a model still loading, a slow model); the same request may succeed later.
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)
# These say the request itself (or the account's access to the model) is wrong: sending it
# again cannot help. ModelErrorException is here because the Bedrock docs only say "an error
# while processing the model" and never call it retryable (unlike the stream-time
# modelStreamErrorException, which they do); its message carries the model's own status.
PERMANENT_CODES = frozenset(
    {
        "ValidationException",
        "AccessDeniedException",
        "ResourceNotFoundException",
        "ModelErrorException",
    }
)

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filtered": "content_filtered",
    "guardrail_intervened": "content_filtered",
    # The answer was cut short by the context window rather than by maxTokens; to the
    # caller it is the same thing: a truncated answer.
    "model_context_window_exceeded": "max_tokens",
}
# The model produced output Bedrock could not parse. Another sample may well be fine, so the
# generation parks and asks again rather than ending the run on one bad draw.
_MALFORMED_STOP_REASONS = frozenset({"malformed_model_output", "malformed_tool_use"})

# A tool declared only because the conversation mentions it (see _tool_config).
_RETIRED_TOOL_DESCRIPTION = "No longer available. Do not call it."


CachePlace = Literal["system", "tools", "messages"]
"""Where a ``cachePoint`` goes: after the system prompt, after the tool specs, or at the end
of the last turn (caching the conversation so far for the next request)."""

_CACHE_POINT = {"cachePoint": {"type": "default"}}
# A read timeout cut by the invocation's deadline is rounded down to this many seconds.
_TIMEOUT_STEP = 15.0


@dataclass(frozen=True)
class Timing:
    """How long a Converse answer may take, and how much of an invocation a request needs.

    ``read_timeout(max_tokens)`` is ``first_token + max_tokens / tokens_per_second`` (the
    ``ceiling`` when ``max_tokens`` is unknown), at most ``ceiling``. A request with
    ``time_limit`` gets at most ``time_limit - margin``; below ``minimum`` it is not sent."""

    first_token: float = 60.0
    tokens_per_second: float = 10.0
    ceiling: float = 3600.0
    margin: float = 5.0
    minimum: float = 20.0
    connect_timeout: float = 10.0

    def read_timeout(self, max_tokens: int | None) -> float:
        """The read timeout for an answer of up to ``max_tokens`` output tokens."""
        if max_tokens is None:
            return self.ceiling
        return min(self.ceiling, self.first_token + max_tokens / self.tokens_per_second)


def converse_client_config(read_timeout: float, timing: Timing | None = None) -> Config:
    """The botocore config of a ``bedrock-runtime`` client: ``read_timeout`` seconds, and no
    retries of its own (the generation retries, within the invocation's deadline)."""
    timing = timing or Timing()
    return Config(
        read_timeout=read_timeout,
        connect_timeout=timing.connect_timeout,
        retries={"mode": "standard", "total_max_attempts": 1},
    )


class BedrockConverseProvider:
    """A :class:`~.base.ModelProvider` backed by Bedrock's ``converse`` operation.

    ``model_id`` is a model id, inference profile id or ARN. Clients come from
    ``client_factory(config)`` (one per read timeout, see :class:`Timing`); by default
    ``boto3.client("bedrock-runtime", region_name=region, config=config)`` (``region=None``
    takes the region from the environment). A fixed ``client`` is used as given for every
    request (its own timeouts and retries apply; build it with :func:`converse_client_config`).
    ``inference_config`` is sent as Converse ``inferenceConfig`` with every request (for
    example ``{"temperature": 0}``); a request's ``max_tokens`` overrides its ``maxTokens``.
    ``cache`` lists where ``cachePoint`` blocks go (:data:`CachePlace`).
    """

    def __init__(
        self,
        model_id: str,
        client: Any = None,
        region: str | None = None,
        inference_config: Mapping[str, Any] | None = None,
        *,
        timing: Timing | None = None,
        cache: Collection[CachePlace] = (),
        client_factory: Callable[[Config], Any] | None = None,
    ) -> None:
        self.model_id = model_id
        self.timing = timing or Timing()
        unknown = set(cache) - {"system", "tools", "messages"}
        if unknown:
            raise ValueError(
                f"cache: unknown places {sorted(unknown)}; use 'system', 'tools', 'messages'"
            )
        self.cache = frozenset(cache)
        # Typed Any: boto3 clients are generated at run time, and the bedrock-runtime stubs
        # are not a dependency (with them installed, boto3.client would return a typed client
        # that a hand-written protocol could not describe without copying every parameter).
        self.client: Any = client
        self._factory: Callable[[Config], Any] = client_factory or (
            lambda config: boto3.client("bedrock-runtime", region_name=region, config=config)
        )
        self._clients: dict[float, Any] = {}
        self.inference_config: dict[str, Any] = dict(inference_config or {})
        self.tool_name_rule = CONVERSE_TOOL_NAMES

    def read_timeout(self, request: ModelRequest) -> float:
        """How long the answer to ``request`` may take: sized to its ``maxTokens`` and cut to
        what the invocation has left; :class:`~.base.ModelDeferred` when that is too little."""
        max_tokens = request.max_tokens or self.inference_config.get("maxTokens")
        timeout = self.timing.read_timeout(max_tokens)
        if request.time_limit is None:
            return timeout
        room = request.time_limit - self.timing.margin
        if room < self.timing.minimum:
            raise ModelDeferred(
                f"Bedrock Converse ({self.model_id}): {request.time_limit:.0f}s of the "
                f"invocation left, {self.timing.minimum + self.timing.margin:.0f}s needed to "
                "start a request; it is asked again in the next invocation"
            )
        # Rounded down to a step, so a deadline that shrinks by the second does not need a
        # new client per request; never below the minimum, which is at most ``room``.
        stepped = math.floor(room / _TIMEOUT_STEP) * _TIMEOUT_STEP
        return min(timeout, max(self.timing.minimum, stepped))

    def client_for(self, read_timeout: float) -> Any:
        """The client that waits ``read_timeout`` seconds (made once per value), or the fixed
        ``client``."""
        if self.client is not None:
            return self.client
        if read_timeout not in self._clients:
            config = converse_client_config(read_timeout, self.timing)
            self._clients[read_timeout] = self._factory(config)
        return self._clients[read_timeout]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to Converse; raises :class:`~.base.ModelError` on failure.

        The boto3 call blocks, so it runs on a worker thread and the event loop stays free.
        """
        params = self.converse_params(request)
        timeout = self.read_timeout(request)
        client = self.client_for(timeout)
        try:
            call = asyncio.to_thread(client.converse, **params)
            if request.time_limit is None:
                raw = await call
            else:
                # The socket's read timeout bounds each read; this bounds the whole answer,
                # so the invocation's deadline holds even for an injected client.
                raw = await asyncio.wait_for(call, request.time_limit - self.timing.margin)
        except TimeoutError as exc:
            raise ModelError(
                f"Bedrock Converse ({self.model_id}) did not answer within the "
                f"{request.time_limit:.0f}s left of the invocation",
                retryable=True,
                code="invocation_deadline",
            ) from exc
        except ClientError as exc:
            raise _client_error(exc, self.model_id) from exc
        except StubResponseError:
            # A botocore Stubber saying a test is wrong: that is a test failure, never a model
            # error for the engine to handle.
            raise
        except (BotoConnectionError, HTTPClientError) as exc:
            # Could not connect, the connection dropped, or the read timed out: the request
            # may well succeed later.
            raise ModelError(
                f"Bedrock Converse ({self.model_id}) could not be reached: {exc}",
                retryable=True,
                code=type(exc).__name__,
            ) from exc
        except BotoCoreError as exc:
            # Local failures (no credentials, parameter validation): retrying cannot fix them.
            raise ModelError(
                f"Bedrock Converse ({self.model_id}) request failed: {exc}",
                retryable=False,
                code=type(exc).__name__,
            ) from exc
        return parse_response(raw, self.model_id)

    def converse_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of the ``converse`` call for ``request``."""
        params: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": converse_messages(request),
        }
        if request.system is not None and request.system.strip():
            params["system"] = [{"text": request.system}]
            if "system" in self.cache:
                params["system"].append(dict(_CACHE_POINT))
        if "messages" in self.cache and params["messages"]:
            # The whole conversation so far: the next request (its answer and the input
            # after it appended) reads this prefix from the cache.
            params["messages"][-1]["content"].append(dict(_CACHE_POINT))
        inference = dict(self.inference_config)
        if request.max_tokens is not None:
            inference["maxTokens"] = request.max_tokens
        if inference:
            params["inferenceConfig"] = inference
        tool_config = _tool_config(request, params["messages"])
        if tool_config is not None:
            if "tools" in self.cache:
                tool_config["tools"].append(dict(_CACHE_POINT))
            params["toolConfig"] = tool_config
        return params


def converse_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation as Converse ``messages``: alternating user and assistant turns."""
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            # Converse refuses two turns of one role in a row; one turn with both contents
            # says the same thing.
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in request.messages:
        if isinstance(message, UserMessage):
            add("user", [{"text": _non_blank(message.text)}])
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if message.text.strip():
                blocks.append({"text": message.text})
            blocks.extend(
                {"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments}}
                for call in message.tool_calls
            )
            # An assistant message with neither text nor calls says nothing; Converse would
            # refuse its empty content, so it is left out.
            add("assistant", blocks)
        elif isinstance(message, ToolResultMessage):
            add("user", [_tool_result_block(message)])
    return turns


def _tool_result_block(message: ToolResultMessage) -> dict[str, Any]:
    return {
        "toolResult": {
            "toolUseId": message.call_id,
            "content": [{"text": _non_blank(message.text)}],
            "status": "error" if message.is_error else "success",
        }
    }


def _non_blank(text: str) -> str:
    return text if text.strip() else BLANK_TEXT


def _tool_config(request: ModelRequest, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Converse ``toolConfig``: the request's tools, or ``None`` when there is nothing to declare.

    Converse refuses a conversation holding ``toolUse``/``toolResult`` blocks without a
    ``toolConfig``. When a request offers no tools but its history used some (say, a final
    answer asked for without tools), the tools the history names are declared as retired, so
    the request is accepted and the model is told not to call them.
    """
    specs = [
        {
            "toolSpec": {
                "name": tool.name,
                "description": tool.description,
                "inputSchema": {"json": tool.parameters},
            }
        }
        for tool in request.tools
    ]
    if not specs:
        names = dict.fromkeys(
            block["toolUse"]["name"]
            for turn in messages
            for block in turn["content"]
            if "toolUse" in block
        )
        specs = [
            {
                "toolSpec": {
                    "name": name,
                    "description": _RETIRED_TOOL_DESCRIPTION,
                    "inputSchema": {"json": {"type": "object", "properties": {}}},
                }
            }
            for name in names
        ]
    return {"tools": specs} if specs else None


def parse_response(raw: Mapping[str, Any], model_id: str = "?") -> ModelResponse:
    """A Converse response as a :class:`~.base.ModelResponse`."""
    stop = str(raw.get("stopReason", ""))
    if stop in _MALFORMED_STOP_REASONS:
        raise ModelError(
            f"Bedrock Converse ({model_id}) stopped with {stop}: the model's output could not "
            "be parsed; asking again may give a usable answer",
            retryable=True,
            code=stop,
        )
    if stop not in _STOP_REASONS:
        # A stop reason this adapter does not know yet could mean anything; guessing could
        # run a tool the model never asked for or drop one it did.
        raise ModelError(
            f"Bedrock Converse ({model_id}) stopped with unknown reason {stop!r}",
            retryable=False,
            code="unknown_stop_reason",
        )
    content = raw.get("output", {}).get("message", {}).get("content", [])
    texts: list[str] = []
    calls: list[ToolCallRequest] = []
    for block in content:
        if "text" in block:
            texts.append(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            arguments = use.get("input", {})
            if not isinstance(arguments, dict):
                # Tool arguments are a JSON object by contract; anything else is a malformed
                # draw, like Bedrock's own malformed_tool_use.
                raise ModelError(
                    f"Bedrock Converse ({model_id}) returned tool {use.get('name')!r} with "
                    f"non-object input {arguments!r}",
                    retryable=True,
                    code="malformed_tool_use",
                )
            calls.append(
                ToolCallRequest(id=use["toolUseId"], name=use["name"], arguments=arguments)
            )
        # Other blocks (reasoningContent, citationsContent, ...) have no place in the neutral
        # response and are dropped.
    usage = raw.get("usage", {})
    return ModelResponse(
        text="\n".join(texts),
        tool_calls=tuple(calls),
        stop_reason=_STOP_REASONS[stop],
        usage=Usage(
            input_tokens=int(usage.get("inputTokens", 0)),
            output_tokens=int(usage.get("outputTokens", 0)),
            cache_read_tokens=int(usage.get("cacheReadInputTokens", 0)),
            cache_write_tokens=int(usage.get("cacheWriteInputTokens", 0)),
        ),
    )


def _client_error(exc: ClientError, model_id: str) -> ModelError:
    # As a plain mapping: the stubs' TypedDict does not know service-specific keys.
    response: Mapping[str, Any] = exc.response
    error = response.get("Error", {})
    code = str(error.get("Code") or "ClientError")
    message = str(error.get("Message") or exc)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in RETRYABLE_CODES:
        retryable = True
    elif code in PERMANENT_CODES:
        retryable = False
    else:
        # A code Converse does not document: go by the HTTP status, as the AWS SDKs do.
        retryable = isinstance(status, int) and (status == 429 or status >= 500)
    original = response.get("originalStatusCode")
    detail = f" (model status {original})" if original is not None else ""
    return ModelError(
        f"Bedrock Converse ({model_id}) failed with {code}{detail}: {message}",
        retryable=retryable,
        code=code,
    )
