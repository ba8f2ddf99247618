"""StoreWrapper passes every method of the Store protocol through; the wrappers built on it
(ObservedStore, FaultyStore) override only the method they change."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from bide.engine.store import Store, StoreWrapper
from bide.service.observability import ObservedStore
from bide.testing import FaultyStore

STORE_METHODS = sorted(
    name for name, value in vars(Store).items() if callable(value) and not name.startswith("_")
)


class Recorder:
    """Stands in for a store: records every call and answers with a value of its own."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return ("answer of", name)

        return call


def bound(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by name as the protocol reads them, defaults filled in."""
    binding = inspect.signature(getattr(Store, method)).bind(None, *args, **kwargs)
    binding.apply_defaults()
    return dict(binding.arguments)


def test_the_protocol_has_the_methods_this_file_expects():
    # A new Store method shows up here first; the tests below then cover it by name.
    assert STORE_METHODS == [
        "close",
        "commit",
        "get_doc",
        "get_task",
        "head",
        "list_docs",
        "load",
        "task_and_doc_at_head",
        "task_at_head",
        "tasks_at_head",
    ]


@pytest.mark.parametrize("method", STORE_METHODS)
def test_every_store_method_is_defined_with_the_protocols_signature(method: str):
    assert method in vars(StoreWrapper), f"StoreWrapper does not pass {method} through"
    wrapper_signature = inspect.signature(getattr(StoreWrapper, method))
    assert wrapper_signature == inspect.signature(getattr(Store, method))


@pytest.mark.parametrize("method", STORE_METHODS)
@pytest.mark.parametrize("omit_defaults", [False, True], ids=["all-arguments", "defaults"])
def test_every_store_method_passes_through_unchanged(method: str, omit_defaults: bool):
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    parameters = list(inspect.signature(getattr(Store, method)).parameters.values())[1:]
    for parameter in parameters:
        if omit_defaults and parameter.default is not inspect.Parameter.empty:
            continue
        value = object()  # a distinct value per argument: a swapped pair would show
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = value
        else:
            args.append(value)
    inner = Recorder()

    answer = getattr(StoreWrapper(inner), method)(*args, **kwargs)  # type: ignore[arg-type]

    [(name, inner_args, inner_kwargs)] = inner.calls
    assert name == method
    assert bound(method, inner_args, inner_kwargs) == bound(method, tuple(args), kwargs)
    if method != "close":
        assert answer == ("answer of", method)


@pytest.mark.parametrize("wrapper", [ObservedStore, FaultyStore])
def test_wrappers_override_only_what_they_change(wrapper: type[StoreWrapper]):
    assert issubclass(wrapper, StoreWrapper)
    assert {name for name in STORE_METHODS if name in vars(wrapper)} == {"commit"}


def test_a_faulty_store_passes_reads_through_to_the_store_it_wraps():
    inner = Recorder()
    store = FaultyStore(inner, fail_at=1)  # type: ignore[arg-type]
    assert store.inner is inner
    assert store.load("s1") == ("answer of", "load")
    assert store.head("s1") == ("answer of", "head")
    assert store.commits == 0 and not store.crashed  # reads are not commits
