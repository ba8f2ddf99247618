"""The Bedrock Converse adapter's error table: which service and connection errors are
retryable (a ``ModelError`` the generation retries) and which are not, against botocore's
Stubber on a real ``bedrock-runtime`` client (:mod:`bedrock_kit`); and the adapter's own client.
"""

from __future__ import annotations

from typing import Any

import pytest
from bedrock_kit import MODEL, Stubbed, ask, complete, converse_response, stubbed
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
    StubAssertionError,
)

from bide.agent.providers import ModelError
from bide.aws.bedrock import BedrockConverseProvider

__all__ = ["stubbed"]  # a fixture, imported for pytest to find


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
