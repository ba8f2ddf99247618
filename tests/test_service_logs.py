"""The services' JSON log lines (bide.service.logs, through bide.service.observability).

What a line carries (the fields Powertools' Logger wrote, by the same names), the level the
environment sets, the Lambda context of the invocation and its clearing, the correlated keys
(per asyncio task), exceptions, redaction of registered secrets and no second copy of a line
through the root logger's handlers (Lambda's runtime puts one there).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from handler_events import FakeContext

from bide.service import logs
from bide.service import observability as obs
from bide.tools.redaction import REDACTED, SECRETS


class Lines:
    """What the services' handler writes while the fixture holds it."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def read(self) -> list[dict[str, Any]]:
        text = self.stream.getvalue()
        self.stream.seek(0)
        self.stream.truncate()
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(name="lines")
def lines_fixture() -> Iterator[Lines]:
    captured = Lines()
    previous = obs.log_handler.setStream(captured.stream)
    level = obs.logger.level
    obs.logger.setLevel(logging.INFO)
    try:
        yield captured
    finally:
        obs.log_handler.setStream(previous)  # type: ignore[arg-type]
        obs.logger.setLevel(level)


def test_a_line_carries_level_location_message_time_service_and_extras(lines: Lines) -> None:
    before = datetime.now(UTC)
    obs.logger.info(
        "signal %s", "in", extra={"route": "hook", "n": 3, "when": before, "wake_at": None}
    )
    obs.logger.debug("not at INFO")
    [line] = lines.read()
    assert list(line)[:5] == ["level", "location", "message", "timestamp", "service"]
    assert line["level"] == "INFO" and line["message"] == "signal in"
    assert line["location"].startswith("test_a_line_carries_level_location")
    assert line["service"] == "bide" and line["route"] == "hook" and line["n"] == 3
    assert line["when"] == str(before)  # what JSON cannot hold is written as its text
    stamp = datetime.strptime(line["timestamp"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert abs((stamp - before).total_seconds()) < 5
    assert "wake_at" not in line  # a None field is left out, as Powertools left it
    assert "cold_start" not in line and "session_id" not in line  # no invocation, no keys


def test_correlated_keys_nest_and_come_back(lines: Lines) -> None:
    with obs.correlated(session_id="s-1", task_id=None):
        obs.logger.info("outer")
        with obs.correlated(session_id="s-2", task_id="t-1"):
            obs.logger.info("inner")
        obs.logger.info("outer again")
    obs.logger.info("outside")
    got = [(x["message"], x.get("session_id"), x.get("task_id")) for x in lines.read()]
    assert got == [
        ("outer", "s-1", None),
        ("inner", "s-2", "t-1"),
        ("outer again", "s-1", None),
        ("outside", None, None),
    ]


def test_concurrent_tasks_keep_their_own_keys(lines: Lines) -> None:
    events = {name: asyncio.Event() for name in ("a in", "b in", "a done", "b done")}

    async def one(me: str, other: str) -> None:
        with obs.correlated(session_id=f"s-{me}"):
            obs.logger.info("first")
            events[f"{me} in"].set()
            await events[f"{other} in"].wait()  # both are inside their blocks from here
            obs.logger.info("second")
            events[f"{me} done"].set()
            await events[f"{other} done"].wait()

    async def both() -> None:
        await asyncio.gather(one("a", "b"), one("b", "a"))

    asyncio.run(both())
    got = [(x["message"], x["session_id"]) for x in lines.read()]
    assert sorted(got) == [("first", "s-a"), ("first", "s-b"), ("second", "s-a"), ("second", "s-b")]


def test_a_lambda_invocation_adds_its_context_and_clears_state(
    lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "_cold", True)  # a fresh execution environment

    @obs.lambda_entry
    def handler(event: dict[str, Any], context: Any) -> str:
        obs.logger.info("in", extra={"event": event["n"]})
        with obs.correlated(session_id=f"s-{event['n']}"):
            obs.logger.info("with a session")
        return "done"

    with obs.correlated(session_id="from-before"):
        assert handler({"n": 1}, FakeContext(aws_request_id="r-1")) == "done"
        obs.logger.info("after")  # the key from before is back; the invocation's fields gone
    assert handler({"n": 2}, FakeContext(aws_request_id="r-2")) == "done"
    first, second, after, third, fourth = lines.read()
    assert first["cold_start"] is True and first["function_request_id"] == "r-1"
    assert first["function_name"] == "bide-test" and "session_id" not in first
    assert second["session_id"] == "s-1"
    assert after.get("session_id") == "from-before" and "function_request_id" not in after
    assert third["cold_start"] is False and third["function_request_id"] == "r-2"
    assert "session_id" not in third and fourth["session_id"] == "s-2"
    assert handler.__name__ == "handler"


def test_the_trace_id_is_the_root_of_the_lambda_header(lines: Lines) -> None:
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    assert logs.trace_id({"_X_AMZN_TRACE_ID": header}) == "1-5759e988-bd862e3fe1be46a994272793"
    assert logs.trace_id({}) is None
    with logs.invocation(FakeContext(), trace_id="1-abc"):
        obs.logger.info("traced")
    [line] = lines.read()
    assert line["xray_trace_id"] == "1-abc"


def test_an_exception_is_logged_with_its_traceback_and_name(lines: Lines) -> None:
    try:
        raise KeyError("missing")
    except KeyError:
        obs.logger.exception("worker run failed", extra={"attempt": 2})
    [line] = lines.read()
    assert line["level"] == "ERROR" and line["attempt"] == 2
    assert line["exception_name"] == "KeyError"
    assert line["exception"].startswith("Traceback") and "KeyError: 'missing'" in line["exception"]


def test_no_registered_secret_reaches_a_line(lines: Lines) -> None:
    secret = "sk-live-0123456789abcdef"
    SECRETS.register(secret)
    try:
        obs.logger.warning("calling with %s", secret)
        try:
            raise RuntimeError(f"401 for token {secret}")
        except RuntimeError:
            obs.logger.exception("provider call failed")
        # A child logger's records go through the same handler, and its filter.
        logging.getLogger("bide.test.child").error("child saw %s", secret)
    finally:
        SECRETS.forget_all()
    written = lines.read()
    assert len(written) == 3
    text = json.dumps(written)
    assert secret not in text and text.count(REDACTED) >= 3


@pytest.mark.parametrize(
    ("env", "level"),
    [
        ({}, logging.INFO),
        ({"POWERTOOLS_LOG_LEVEL": "warning"}, logging.WARNING),
        ({"LOG_LEVEL": "DEBUG"}, logging.DEBUG),
        ({"POWERTOOLS_LOG_LEVEL": "ERROR", "LOG_LEVEL": "DEBUG"}, logging.ERROR),
        # Lambda's advanced logging controls first, with Lambda's names for the levels.
        ({"AWS_LAMBDA_LOG_LEVEL": "WARN", "POWERTOOLS_LOG_LEVEL": "DEBUG"}, logging.WARNING),
        ({"AWS_LAMBDA_LOG_LEVEL": "TRACE"}, logging.DEBUG),
        ({"AWS_LAMBDA_LOG_LEVEL": "FATAL"}, logging.CRITICAL),
        ({"POWERTOOLS_LOG_LEVEL": " "}, logging.INFO),
    ],
)
def test_the_level_comes_from_the_environment(env: dict[str, str], level: int) -> None:
    assert logs.level_from_env(env) == level


def test_a_bad_level_names_its_variable() -> None:
    with pytest.raises(ValueError, match="POWERTOOLS_LOG_LEVEL='LOUD' is not a log level"):
        logs.level_from_env({"POWERTOOLS_LOG_LEVEL": "LOUD"})


def test_a_service_logger_is_configured_once_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "bide-logs-test-service"
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "ERROR")
    logger, handler = logs.service_logger(name)
    try:
        assert logger.level == logging.ERROR
        assert logs.service_logger(name) == (logger, handler)  # no second handler
        assert logger.handlers == [handler]
    finally:
        logger.removeHandler(handler)


def test_a_line_is_not_written_again_by_the_root_loggers_handlers(lines: Lines) -> None:
    root_out = io.StringIO()
    root_handler = logging.StreamHandler(root_out)
    root = logging.getLogger()
    root.addHandler(root_handler)  # as Lambda's runtime does before importing the handler
    try:
        logs.suppress_on_root("bide")
        logs.suppress_on_root("bide")  # idempotent
        assert len(root_handler.filters) == 1
        obs.logger.warning("once")
        logging.getLogger("bide.child").warning("once too")
        logging.getLogger("bidet").warning("not ours")  # a name that merely starts alike
    finally:
        root.removeHandler(root_handler)
    assert [x["message"] for x in lines.read()] == ["once", "once too"]
    assert root_out.getvalue() == "not ours\n"


def test_levels_are_written_in_lambdas_names(lines: Lines) -> None:
    # Lambda's JSON log format files a line by its level among TRACE DEBUG INFO WARN ERROR
    # FATAL; Python's WARNING and CRITICAL would be filed as INFO and escape the filter.
    obs.logger.warning("slow")
    obs.logger.critical("down")
    obs.logger.error("failed")
    assert [line["level"] for line in lines.read()] == ["WARN", "FATAL", "ERROR"]
