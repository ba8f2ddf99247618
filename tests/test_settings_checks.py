"""The settings' own checks (bide.service.settings, imported through bide.service.config; no
validation library): every problem is named at once, by variable, with what it must hold and
why the value is refused."""

from __future__ import annotations

import dataclasses

import pytest

from bide import constants as c
from bide.service.config import ConfigError, Settings, settings_from_env

BASE = {
    c.ENV_APP: "examples.agent_app:app",
    c.ENV_TABLE: "bide-sessions",
    c.ENV_BUCKET: "bide-values",
    c.ENV_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/wakes.fifo",
}


def refusal(**changes: str) -> str:
    with pytest.raises(ConfigError) as caught:
        settings_from_env({**BASE, **changes})
    return str(caught.value)


def test_every_problem_is_named_at_once() -> None:
    message = refusal(
        BIDE_TABLE="ab",
        BIDE_BUCKET="b" * 64,
        BIDE_SAFETY_MARGIN_MS="900001",
        **{c.ENV_MAX_RECEIVE_COUNT: "0"},
        BIDE_SCHEDULE_GROUP="alarms",
    )
    assert message.startswith("invalid function configuration: ")
    assert "BIDE_TABLE (the DynamoDB table of sessions): 'ab' is shorter than 3" in message
    assert "BIDE_BUCKET (the S3 bucket for large values): 64 characters, more than 63" in message
    assert "BIDE_SAFETY_MARGIN_MS" in message and "above the most allowed, 900000" in message
    assert c.ENV_MAX_RECEIVE_COUNT in message and "0 is below the least allowed, 1" in message
    assert f"also set {c.ENV_QUEUE_ARN}, {c.ENV_SCHEDULER_ROLE_ARN}" in message


@pytest.mark.parametrize("value", ["1_000", "5.0", "1e3", "٣", "five", "- 5"])
def test_a_number_is_plain_ascii_digits(value: str) -> None:
    assert "is not a whole number" in refusal(BIDE_RETENTION_SECONDS=value)


def test_numbers_and_texts_read_back() -> None:
    settings = settings_from_env(
        {
            **BASE,
            c.ENV_SAFETY_MARGIN_MS: " +2500 ",  # blanks around a value are not part of it
            c.ENV_RETENTION_SECONDS: "86400",
            c.ENV_MAX_RECEIVE_COUNT: "1000",
            c.ENV_WEBHOOK_KEY_SECRET: "arn:aws:secretsmanager:us-east-1:1:secret:bide/key-Ab1",
            c.ENV_ADMIN_PRINCIPALS: "arn:aws:iam::1:role/a, arn:aws:iam::1:user/b",
        }
    )
    assert (settings.safety_margin_ms, settings.retention_seconds) == (2500, 86_400)
    assert settings.max_receive_count == 1000 and settings.tracing is False
    assert settings.webhook_key_secret == "arn:aws:secretsmanager:us-east-1:1:secret:bide/key-Ab1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.table = "other"  # type: ignore[misc]


def test_a_value_of_the_wrong_form_is_quoted_with_the_form() -> None:
    message = refusal(BIDE_WEBHOOK_KEY_SECRET="my secret")
    assert "BIDE_WEBHOOK_KEY_SECRET" in message and "'my secret' does not have that form" in message
    long = "x" * 300
    assert "'" + "x" * 80 + "...'" in refusal(BIDE_APP=long)  # a long value is cut short


def test_settings_take_only_their_fields() -> None:
    with pytest.raises(TypeError):
        Settings(app="a:b", table="tbl", bucket="bkt", queue_url="https://q", extra=1)  # type: ignore[call-arg]
