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
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import boto3
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

__all__ = ["BLANK_TEXT", "CONVERSE_TOOL_NAMES", "BedrockConverseProvider"]

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


class BedrockConverseProvider:
    """A :class:`~.base.ModelProvider` backed by Bedrock's ``converse`` operation.

    ``model_id`` is a model id, inference profile id or ARN. ``client`` is a
    ``bedrock-runtime`` client; tests inject a stubbed one, and without it the adapter makes
    ``boto3.client("bedrock-runtime", region_name=region)`` (``region=None`` takes the region
    from the environment). ``inference_config`` is sent as Converse ``inferenceConfig`` with
    every request (for example ``{"temperature": 0}``); a request's ``max_tokens`` overrides
    its ``maxTokens``.
    """

    def __init__(
        self,
        model_id: str,
        client: Any = None,
        region: str | None = None,
        inference_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.model_id = model_id
        # Typed Any: boto3 clients are generated at run time, and the bedrock-runtime stubs
        # are not a dependency (with them installed, boto3.client would return a typed client
        # that a hand-written protocol could not describe without copying every parameter).
        self.client: Any = (
            client if client is not None else boto3.client("bedrock-runtime", region_name=region)
        )
        self.inference_config: dict[str, Any] = dict(inference_config or {})
        self.tool_name_rule = CONVERSE_TOOL_NAMES

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to Converse; raises :class:`~.base.ModelError` on failure.

        The boto3 call blocks, so it runs on a worker thread and the event loop stays free.
        """
        params = self.converse_params(request)
        try:
            raw = await asyncio.to_thread(self.client.converse, **params)
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
        inference = dict(self.inference_config)
        if request.max_tokens is not None:
            inference["maxTokens"] = request.max_tokens
        if inference:
            params["inferenceConfig"] = inference
        tool_config = _tool_config(request, params["messages"])
        if tool_config is not None:
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
