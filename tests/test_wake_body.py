"""A wake message read once (:func:`bide.aws.sqs.read_wake`): the fields the worker's run
needs, each read as the per-field readers read it, and a malformed field read as absent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bide.aws.sqs import (
    parse_wake,
    read_wake,
    wake_body,
    wake_focus,
    wake_pages,
)

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


def test_a_signals_wake_reads_whole() -> None:
    wake = read_wake(wake_body("s", "signal", task="t", owner="o", pages=(3, 12.5)))
    assert (wake.session_id, wake.reason) == ("s", "signal")
    assert wake.focus == ("t", "o") and wake.pages == (3, 12.5) and wake.fired_at is None


def test_an_alarms_wake_carries_its_deadline() -> None:
    wake = read_wake(json.dumps({"session_id": "s", "reason": "alarm", "at": 99}))
    assert wake.fired_at == 99.0 and wake.focus is None and wake.pages is None
    # only an alarm's wake is dated: the same field on another wake is not a fire
    assert read_wake(json.dumps({"session_id": "s", "reason": "api", "at": 99})).fired_at is None
    boolean = {"session_id": "s", "reason": "alarm", "at": True}
    assert read_wake(json.dumps(boolean)).fired_at is None


@pytest.mark.parametrize(
    "body", ["not json", "[1]", "{}", '{"session_id": ""}', '{"session_id": 3}']
)
def test_no_session_no_wake(body: str) -> None:
    with pytest.raises(ValueError):
        read_wake(body)


# No deadline: a loaded CI machine is not a failure of the property.
@settings(deadline=None, max_examples=300)
@given(
    st.fixed_dictionaries(
        {"session_id": st.sampled_from(["s", "s2"])},
        optional={
            "reason": st.one_of(st.sampled_from(["signal", "alarm", "api"]), ODD),
            "task": st.one_of(st.sampled_from(["t", ""]), ODD),
            "owner": st.one_of(st.sampled_from(["o", ""]), ODD),
            "pages": ODD,
            "created_at": ODD,
            "at": ODD,
        },
    )
)
def test_one_read_agrees_with_each_field_reader(data: dict[str, object]) -> None:
    body = json.dumps(data)  # NaN and infinities are written as JSON's extensions, as Python reads
    wake = read_wake(body)
    assert (wake.session_id, wake.reason) == parse_wake(body)
    assert wake.focus == wake_focus(body)
    assert wake.pages == wake_pages(body)
    reason, at = data.get("reason", "unknown"), data.get("at")
    dated = reason == "alarm" and isinstance(at, int | float) and not isinstance(at, bool)
    assert wake.fired_at == (float(at) if dated else None)  # type: ignore[arg-type]
