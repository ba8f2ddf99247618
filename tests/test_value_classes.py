"""The small values on the functions' import path that were ``@dataclass(frozen=True)`` classes
(signal keys and states, the engine's decisions and wakes, task views and definitions, the
store's documents and snapshots, the services' callers, keys, route groups and worker runs)
and the services' mutable ``Deps`` are classes of :mod:`bide.engine.values` now: each must
behave as the dataclass it replaced did (tests/test_frozen_values.py checks the states)."""

from __future__ import annotations

import dataclasses
import pickle
import weakref
from typing import Any

import pytest
from value_kit import (
    check_copies_and_pickles,
    check_equal_and_hashed_by_every_field,
    check_frozen_and_slotted,
)

from bide.engine.clock import SystemClock
from bide.engine.rules import SignalDecision, Wake, Wakeup
from bide.engine.signals import (
    SignalExpired,
    SignalKey,
    SignalResult,
    SignalToken,
    SignalValue,
    define_signal,
    slot_name,
)
from bide.engine.state import WakeExpired, WakeTime
from bide.engine.store.base import Doc, SessionSnapshot
from bide.engine.tasks import TaskDefinition, TaskView, define_task
from bide.engine.values import field_names
from bide.service import settings, worker
from bide.service.deps import Deps
from bide.service.http import API, RouteGroup
from bide.service.owners import Caller
from bide.tools.webhook_keys import StaticWebhookKeys, WebhookKeyError


def _register(app: Any, deps: Any) -> None:
    """A route group's registration (module level: it pickles by name)."""


KEY, OTHER_KEY = b"k" * 32, b"j" * 32

# One instance of each class, built positionally as its dataclass was, and for each field (all
# of them, in the order the dataclass declared them) a second value that differs.
SAMPLES: list[tuple[Any, dict[str, Any]]] = [
    (SignalKey("s", "k"), {"signal": "t", "key": "j"}),
    (SignalValue(1), {"value": 2}),
    (SignalExpired(), {"expired": False}),
    (
        SignalDecision(SignalResult.DELIVERED),
        {"result": SignalResult.INVALID, "record": "r", "errors": ({"field": "x"},)},
    ),
    (Wakeup(WakeTime(), {}), {"wake": WakeExpired(), "signals": {"a": 1}}),
    (Wake(True, None), {"active": False, "at": 1.0}),
    (
        TaskView("t", "s", "k", None, {"phase": "a"}, None, None),
        {
            "id": "u",
            "session_id": "z",
            "kind": "j",
            "input": 1,
            "checkpoint": {"phase": "b"},
            "wake": WakeTime(),
            "owner": "o",
            "abort_reason": "r",
            "created_at": 1.0,
        },
    ),
    (Doc("k", 1), {"key": "j", "body": 2}),
    (SessionSnapshot("s", 1), {"session_id": "t", "seq": 2, "tasks": {"x": 1}}),
    (Caller("p"), {"principal": "q", "admin": True}),
    (StaticWebhookKeys(KEY), {"current_key": OTHER_KEY, "previous": (KEY,)}),
    (
        worker.WorkerRun("s", Wake(True, None), "armed"),
        {"session_id": "t", "wake": None, "action": "idle"},
    ),
    (
        worker._Pass(Wake(False, None), 1, False, None, False, False),
        {
            "wake": Wake(True, 1.0),
            "seq": 2,
            "may_have_alarm": True,
            "loaded_at": 1.0,
            "stopped": True,
            "partial": True,
        },
    ),
    (
        RouteGroup("g", _register, "log", "error", True),
        {
            "name": "h",
            "register": len,
            "failure_log": "other",
            "failure_error": "other",
            "text_bodies_only": False,
            "lenient_paths": True,
        },
    ),
    (
        settings._Rule("V", "m"),
        {
            "var": "W",
            "meaning": "n",
            "required": True,
            "number": True,
            "pattern": "x",
            "min_length": 1,
            "max_length": 2,
            "lowest": 3,
            "highest": 4,
        },
    ),
]
IDS = [type(value).__name__ for value, _ in SAMPLES]


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_fields_in_order_and_positional_as_the_dataclass(value: Any, other: dict[str, Any]) -> None:
    names = field_names(value)
    assert list(names) == list(other)  # every field, in the declared order
    assert type(value).__match_args__ == names
    assert type(value)(*(getattr(value, n) for n in names)) == value
    assert type(value)(**{n: getattr(value, n) for n in names}) == value
    with pytest.raises(TypeError):
        type(value)(**{n: getattr(value, n) for n in names}, unknown=1)


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_equal_and_hashed_by_every_field(value: Any, other: dict[str, Any]) -> None:
    check_equal_and_hashed_by_every_field(value, other)


@pytest.mark.parametrize(("value", "other"), SAMPLES, ids=IDS)
def test_frozen_slotted_printed_copied_and_pickled(value: Any, other: dict[str, Any]) -> None:
    check_frozen_and_slotted(value, other)
    shown = ", ".join(f"{n}={getattr(value, n)!r}" for n in other)
    assert repr(value) == f"{type(value).__qualname__}({shown})"  # as a dataclass printed it
    check_copies_and_pickles(value, other)


def test_a_signal_keys_slot_is_a_cache_not_a_field() -> None:
    key = SignalKey("s", "k")
    assert key.slot == slot_name("s", "k") and key.slot is key.slot  # computed once
    assert key == SignalKey("s", "k") and hash(key) == hash(SignalKey("s", "k"))
    assert pickle.loads(pickle.dumps(key)).slot == "s/k"
    assert SignalKey[int]("s", "k") == key  # still generic


def test_static_keys_check_their_length_on_replace_too() -> None:
    with pytest.raises(WebhookKeyError, match="'current' is 3 bytes"):
        StaticWebhookKeys(b"abc")
    with pytest.raises(WebhookKeyError, match="'previous'"):
        StaticWebhookKeys(KEY).replace(previous=(b"x",))


def test_a_snapshot_gets_its_own_empty_tasks() -> None:
    one, two = SessionSnapshot("s", 0), SessionSnapshot("s", 0)
    assert one.tasks == {} and one.tasks is not two.tasks


def test_tokens_and_task_definitions_are_equal_to_themselves_only() -> None:
    token = define_signal("s", 1, int)
    again = define_signal("s", 1, int)
    definition = define_task("k", 1, lambda _: "a", {"a": _phase})
    twin_definition = define_task("k", 1, lambda _: "a", {"a": _phase})
    for value, twin in ((token, again), (definition, twin_definition)):
        assert value == value and value != twin
        assert hash(value) == object.__hash__(value) and value != value.replace()
        assert weakref.ref(value)() is value
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.name = "x"
    # Printed as their dataclasses were: the pydantic adapter left out.
    assert repr(token) == (
        "SignalToken(name='s', version=1, schema=<class 'int'>, migrate=None, envelope=0)"
    )
    assert repr(definition).startswith("TaskDefinition(name='k', version=1, initial=")
    assert "_input_adapter" not in repr(definition) and "adapter" not in repr(token)
    assert token.replace(version=2).version == 2 and token.replace()._adapter is token._adapter
    assert isinstance(token, SignalToken) and isinstance(definition, TaskDefinition)


async def _phase(task: Any, rt: Any) -> None:
    """A phase (never run here)."""


def _deps(**changes: Any) -> Deps:
    return Deps(store="store", alarms="alarms", queue="queue", app="app", **changes)  # type: ignore[arg-type]


def test_deps_are_mutable_equal_by_fields_and_unhashable() -> None:
    deps = _deps()
    assert isinstance(deps.clock, SystemClock) and deps.services == {}
    other = _deps()
    assert deps.services is not other.services  # a fresh default each, as a default_factory
    copied = deps.replace()
    assert copied == deps and copied is not deps
    assert deps.replace(lease_seconds=1.0) != deps
    assert deps.replace(admin_principals=frozenset({"a"})).admin_principals == {"a"}
    with pytest.raises(TypeError, match="'nope'"):
        deps.replace(nope=1)
    with pytest.raises(TypeError):
        hash(deps)
    deps.webhook_keys = StaticWebhookKeys(KEY)  # fields may be reassigned
    assert deps.webhook_keys == StaticWebhookKeys(KEY) and deps != copied
    with pytest.raises(AttributeError):
        deps.unknown = 1  # type: ignore[attr-defined]
    assert weakref.ref(deps)() is deps  # the HTTP functions keep a resolver per live Deps
    assert repr(deps).startswith("Deps(store='store', alarms='alarms', queue='queue', app='app',")
    assert set(field_names(Deps)) == set(Deps.__slots__) - {"__weakref__"}


def test_the_route_groups_keep_their_settings() -> None:
    assert (API.name, API.text_bodies_only, API.lenient_paths) == ("api", True, False)
