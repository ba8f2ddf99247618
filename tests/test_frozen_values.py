"""The states, wake reasons and outcomes are plain classes on
:class:`bide.engine.values.FrozenValue` (cheaper to import than ``@dataclass``): they must
behave as the frozen, slotted, keyword-only dataclasses they replaced did, for every class."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, ClassVar

import pytest
from value_kit import (
    check_copies_and_pickles,
    check_equal_and_hashed_by_every_field,
    check_frozen_and_slotted,
)

from bide.engine.signals import SignalKey
from bide.engine.state import (
    Aborted,
    Completed,
    Completing,
    Failed,
    Faulted,
    Orphaned,
    Pending,
    Running,
    Sleeping,
    Terminal,
    Waiting,
    WakeExpired,
    WakeHeartbeat,
    WakeSignal,
    WakeTasks,
    WakeTime,
)
from bide.engine.values import FrozenValue, field_defaults, field_names, frozen_value

# One instance of each class, every field set away from its default, and for each field a
# second value that differs from it.
SAMPLES: list[tuple[Any, dict[str, Any]]] = [
    (WakeTime(), {}),
    (WakeExpired(), {}),
    (WakeHeartbeat(missed_at=1.0), {"missed_at": 2.0}),
    (WakeSignal(signal="s", key="k"), {"signal": "t", "key": "j"}),
    (WakeTasks(ended=("a",)), {"ended": ("b",)}),
    (Completed(result=1), {"result": 2}),
    (Failed(error=1), {"error": 2}),
    (Aborted(reason="r", result=1), {"reason": "q", "result": 2}),
    (Orphaned(reason="r"), {"reason": "q"}),
    (Faulted(error="e"), {"error": "f"}),
    (Completing(outcome=Completed(result=1)), {"outcome": Failed(error=2)}),
    (Terminal(outcome=Completed(result=1)), {"outcome": Failed(error=2)}),
    (
        Pending(checkpoint="a", wake=WakeTime()),
        {"checkpoint": {"phase": "b"}, "wake": WakeExpired()},
    ),
    (
        Running(checkpoint="a", wake=WakeTime(), invocation="i", lease_until=1.0),
        {"checkpoint": {"phase": "b"}, "wake": None, "invocation": "j", "lease_until": 2.0},
    ),
    (
        Waiting(checkpoint="a", on=("x",), policy="any"),
        {"checkpoint": {"phase": "b"}, "on": ("y",), "policy": "fail_fast"},
    ),
    (
        Sleeping(
            checkpoint="a",
            until=1.0,
            signals=(SignalKey("s", "k"),),
            heartbeat=5.0,
            beat_by=2.0,
            expire_on_deadline=False,
        ),
        {
            "checkpoint": {"phase": "b"},
            "until": 3.0,
            "signals": (),
            "heartbeat": 6.0,
            "beat_by": 4.0,
            "expire_on_deadline": True,
        },
    ),
]
IDS = [type(value).__name__ for value, _ in SAMPLES]


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_equal_only_to_the_same_class_with_every_field_equal(value, other):
    check_equal_and_hashed_by_every_field(value, other)


def test_classes_with_the_same_fields_are_not_equal():
    assert Completed(result=1) != Failed(error=1)
    assert Orphaned(reason="x") != Aborted(reason="x")
    assert WakeTime() != WakeExpired() and WakeTime() == WakeTime()
    assert len({Completing(outcome=Failed()), Terminal(outcome=Failed())}) == 2


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_immutable_slotted_and_keyword_only(value, other):
    names = list(field_names(value))
    assert names == list(other)  # the fields, in the order they are written
    check_frozen_and_slotted(value, other)
    if names:
        with pytest.raises(TypeError):
            type(value)(*(getattr(value, n) for n in names))
    with pytest.raises(TypeError):
        type(value)(**{n: getattr(value, n) for n in names}, unknown=1)


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_copies_and_pickles_to_an_equal_value(value, other):
    check_copies_and_pickles(value, other)


def test_repr_names_the_tag_then_the_fields_in_order():
    assert repr(WakeExpired()) == "WakeExpired(reason='expired')"
    assert (
        repr(WakeSignal(signal="s", key="k")) == "WakeSignal(reason='signal', signal='s', key='k')"
    )
    assert repr(Aborted(reason="r")) == "Aborted(status='aborted', reason='r', result=None)"
    assert repr(Running(checkpoint="a")) == (
        "Running(status='running', checkpoint={'phase': 'a'}, wake=None, invocation=None,"
        " lease_until=None)"
    )


def test_fields_report_their_defaults_for_the_strict_reader():
    assert field_names(Sleeping) == (
        "checkpoint",
        "until",
        "signals",
        "heartbeat",
        "beat_by",
        "expire_on_deadline",
    )
    assert field_defaults(Sleeping) == {
        "until": None,
        "signals": (),
        "heartbeat": None,
        "beat_by": None,
        "expire_on_deadline": True,
    }
    assert field_defaults(Faulted) == {} and field_names(Faulted(error="e")) == ("error",)


def test_dataclasses_functions_still_work_on_them():
    # For code written against the dataclasses these were (their table is built on first use).
    @frozen_value
    class Pair(FrozenValue):
        __slots__ = ("a", "b")
        a: int
        b: int

        def __init__(self, a: int, b: int = 0) -> None:
            object.__setattr__(self, "a", a)
            object.__setattr__(self, "b", b)

    assert "_dataclass_table" not in Pair.__dict__  # nothing built until asked
    assert [(f.name, f.default, f.kw_only) for f in dataclasses.fields(Pair)] == [
        ("a", dataclasses.MISSING, False),
        ("b", 0, False),
    ]
    assert dataclasses.replace(Pair(1), b=2) == Pair(1, 2) == Pair(1).replace(b=2)
    defaults = {f.name: f.default for f in dataclasses.fields(Sleeping)}
    assert defaults == {"checkpoint": dataclasses.MISSING, **field_defaults(Sleeping)}
    assert [f.default for f in dataclasses.fields(Faulted)] == [dataclasses.MISSING]
    assert dataclasses.is_dataclass(Sleeping)
    assert dataclasses.asdict(Terminal(outcome=Failed(error=1))) == {"outcome": {"error": 1}}
    sleep = Sleeping(checkpoint="a", until=1.0, heartbeat=5.0)
    assert dataclasses.replace(sleep, beat_by=7) == sleep.replace(beat_by=7)
    assert [f.name for f in dataclasses.fields(Orphaned(reason="r"))] == ["reason"]


def test_replace_checks_the_new_value_as_the_constructor_does():
    sleep = Sleeping(checkpoint="a", until=1.0, heartbeat=5.0)
    moved = sleep.replace(beat_by=7)
    assert moved.beat_by == 7.0 and type(moved.beat_by) is float and moved.until == 1.0
    assert (moved.checkpoint, moved.heartbeat) == (sleep.checkpoint, 5.0)  # the rest is kept
    with pytest.raises(ValueError, match="heartbeat"):
        sleep.replace(heartbeat=-1)
    with pytest.raises(TypeError, match="'unknown'"):
        sleep.replace(unknown=1)


def test_a_class_whose_slots_and_fields_disagree_is_refused():
    with pytest.raises(TypeError, match="__slots__"):

        @frozen_value
        class Broken(FrozenValue):
            __slots__ = ("a",)
            tag: ClassVar[str] = "x"
            a: int
            b: int

            def __init__(self, *, a: int, b: int = 0) -> None:
                object.__setattr__(self, "a", a)


def test_settings_behave_as_their_frozen_keyword_only_dataclass_did():
    from bide.service.config import Settings

    base = {"app": "a:b", "table": "t", "bucket": "b", "queue_url": "q"}
    settings = Settings(**base)
    assert settings == Settings(**base) and hash(settings) == hash(Settings(**base))
    assert settings != Settings(**{**base, "tracing": True})
    assert settings.replace(table="u") == Settings(**{**base, "table": "u"})
    assert repr(settings).startswith("Settings(app='a:b', table='t', bucket='b', queue_url='q',")
    assert (settings.safety_margin_ms, settings.webhook_base_url, settings.tracing) == (
        20_000,
        "",
        False,
    )
    with pytest.raises(TypeError):
        Settings("a:b", "t", "b", "q")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Settings(app="a:b", table="t", bucket="b")  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del settings.app


def test_failures_behave_as_their_frozen_positional_dataclasses_did():
    from bide.engine.failures import SignalFailed, SignalFailure

    for cls in (SignalFailure, SignalFailed):
        failure = cls("T", "m", {"n": 1})
        assert failure == cls("T", "m", {"n": 1}) == cls(type="T", message="m", data={"n": 1})
        assert failure != cls("T", "m", {"n": 2}) and cls("T", "m") != cls("U", "m")
        assert cls("T", "m").data is None and hash(cls("T", "m")) == hash(cls("T", "m"))
        assert hash(cls("T", "m")) != hash(cls("T", "n"))
        assert repr(failure) == f"{cls.__name__}(type='T', message='m', data={{'n': 1}})"
        assert cls.__match_args__ == ("type", "message", "data")
        match failure:
            case cls(kind, text, data):  # type: ignore[misc]
                assert (kind, text, data) == ("T", "m", {"n": 1})
        assert pickle.loads(pickle.dumps(failure)) == failure
        assert failure.replace(message="x") == cls("T", "x", {"n": 1})
        with pytest.raises(dataclasses.FrozenInstanceError):
            failure.message = "x"  # type: ignore[misc]
        with pytest.raises(TypeError):
            cls("T")  # type: ignore[call-arg]
    assert SignalFailure("T", "m") != SignalFailed("T", "m")


def test_webhook_values_behave_as_their_frozen_positional_dataclasses_did():
    from bide.tools.webhooks import InvalidBinding, TokenParts, Webhook, WebhookBinding

    binding = WebhookBinding("s", "t", "sig", "k", "n")
    assert binding == WebhookBinding(session_id="s", task_id="t", signal="sig", key="k", nonce="n")
    assert (binding.hmac_secret, binding.window_seconds) == (None, 300)
    assert binding != binding.replace(hmac_secret="x")
    assert hash(binding) == hash(WebhookBinding("s", "t", "sig", "k", "n"))
    assert repr(binding).startswith("WebhookBinding(session_id='s', task_id='t', signal='sig',")
    with pytest.raises(InvalidBinding, match="window_seconds"):
        binding.replace(window_seconds=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        binding.nonce = "m"  # type: ignore[misc]
    assert Webhook("u", "tok") == Webhook(url="u", token="tok") != Webhook("u", "other")
    assert repr(Webhook("u", "tok")) == "Webhook(url='u', token='tok')"
    parts = TokenParts("s", None, "n", "m")
    assert parts == TokenParts("s", None, "n", "m") != TokenParts("s", "t", "n", "m")
    assert TokenParts.__match_args__ == ("session_id", "task_id", "nonce", "mac")
    assert pickle.loads(pickle.dumps(parts)) == parts
    with pytest.raises(TypeError):
        TokenParts("s", None, "n")  # type: ignore[call-arg]
