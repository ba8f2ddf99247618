"""Hostile JSON bodies are a 400 on every route, never a 500, and store nothing.

Python's ``json`` raises ``RecursionError`` on deep nesting and ``ValueError`` on integers past
4300 digits, and turns ``1e400`` into ``inf`` and ``NaN`` into a float no JSON reader accepts
back. A sender that retries on 5xx would retry such a body forever; a value stored nested past
the readers' own limits would make its session unloadable.
"""

from __future__ import annotations

import json

import pytest
from aws_fixtures import unique
from handler_fixtures import (
    Bench,
    aws_fixture,
    bench_fixture,
    http_event,
    run,
    signal_event,
)

from bide.constants import MAX_JSON_DEPTH
from bide.service.http import handle_api, handle_signal
from bide.service.json_body import JsonRefused, nesting_depth, strict_json

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


HOSTILE = {
    "deep array": ("[" * 100_000 + "]" * 100_000, "nests"),
    "deep object": ('{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), "nests"),
    "5000-digit integer": ("1" + "0" * 5000, "too many digits"),
    "float overflow": ('{"x": 1e400}', "too large"),
    "NaN": ('{"x": NaN}', "not JSON"),
    "Infinity": ("[-Infinity]", "not JSON"),
    # Found by tests/test_fuzz_signal_routes.py: a 500 once the value reached the store.
    "lone surrogate": ('"\\ud800"', "lone surrogate"),
    "lone surrogate key": ('{"\\udfff": 1}', "lone surrogate"),
}


# --- the parser ---------------------------------------------------------------------------------


def test_depth_up_to_the_limit_is_accepted_one_more_is_refused() -> None:
    assert strict_json(nested(MAX_JSON_DEPTH)) is not None
    with pytest.raises(JsonRefused, match=f"nests {MAX_JSON_DEPTH + 1} levels"):
        strict_json(nested(MAX_JSON_DEPTH + 1))


def test_escaped_surrogate_pairs_are_text() -> None:
    assert strict_json('["\\ud83d\\ude00", "\\u00e9"]') == ["\U0001f600", "\u00e9"]


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"s": "[[[[{{{{" * 100, "q": 'a "quoted [ bracket' + "\\"})
    assert nesting_depth(text) == 1
    assert strict_json(text)["q"].endswith("\\")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_parser_refuses_what_json_would_crash_on_or_store_lossily(name: str) -> None:
    text, why = HOSTILE[name]
    with pytest.raises(JsonRefused, match=why):
        strict_json(text)


def test_ordinary_json_is_unchanged() -> None:
    value = {"a": [1, 2.5, -3e10, None, True, "x"], "b": {"c": "1" * 5000}}
    assert strict_json(json.dumps(value)) == value


# --- the routes -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_signal_route_answers_400_and_stores_nothing(bench: Bench, name: str) -> None:
    sid = unique("s")
    task_id = bench.start_napper([{"keys": ["k"]}], sid)
    bench.drain()
    seq = bench.store.head(sid)
    event = signal_event(sid, task_id, "reply", "k", headers={"content-type": "application/json"})
    event["body"] = HOSTILE[name][0]
    response = run(handle_signal(bench.deps, event, None))
    assert response["statusCode"] == 400, response
    assert "body refused" in json.loads(response["body"])["error"]
    assert bench.store.head(sid) == seq
    assert bench.task(sid, task_id).signals == {}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("path", ["/sessions", "/sessions/{sid}/inputs"])
def test_api_routes_answer_400(bench: Bench, name: str, path: str) -> None:
    created = run(handle_api(bench.deps, http_event("POST", "/sessions", body={}), None))
    sid = json.loads(created["body"])["session_id"]
    seq = bench.store.head(sid)
    event = http_event("POST", path.format(sid=sid), raw=HOSTILE[name][0])
    event["headers"]["content-type"] = "application/json"
    response = run(handle_api(bench.deps, event, None))
    assert response["statusCode"] == 400, response
    assert "body refused" in json.loads(response["body"])["error"]
    assert bench.store.head(sid) == seq
