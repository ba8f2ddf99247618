"""The public API is whole: every type it takes or returns can be imported from where it
is documented, and tools need nothing private (``mint_webhook`` uses ``ToolExecutionApi``'s
public members only)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from kit import ANSWER, Kit, run
from pydantic import BaseModel

import bide
import bide.tools
from bide.engine.runtime import Runtime
from bide.tools import ToolRegistry, ToolResult, define_tool, result_of

# Public-named members that are not user API, and why.
INTERNAL = {
    # The engine's Kernel protocol: scheduler, runtime and host tx stage writes in a Draft.
    "Harness.mark_abort",
    "Harness.new_task",
    # Built by the tool task for each run; users receive one, never construct it.
    "ToolExecutionApi.__init__",
}
# Names that only TYPE_CHECKING imports bring into the annotations.
# The packages import their names on first use, so ask for each rather than read vars().
NAMESPACE = {
    **{name: getattr(bide, name) for name in bide.__all__},
    **{name: getattr(bide.tools, name) for name in bide.tools.__all__},
    "Runtime": Runtime,
}


def types_in(annotation: Any) -> set[type]:
    """Every class an annotation mentions (inside unions, generics, Annotated)."""
    found: set[type] = set()
    origin = typing.get_origin(annotation)
    if origin is not None:
        if isinstance(origin, type):
            found.add(origin)
        for arg in typing.get_args(annotation):
            found |= types_in(arg)
    elif isinstance(annotation, type):
        found.add(annotation)
    elif isinstance(annotation, list | tuple):
        for arg in annotation:
            found |= types_in(arg)
    return found


def signatures(module: Any) -> dict[str, Any]:
    """Each public function, class (its fields) and public method of ``module.__all__``."""
    found: dict[str, Any] = {}
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            found[name] = obj
        elif isinstance(obj, type):
            found[f"{name} (fields)"] = obj
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, classmethod | staticmethod):
                    member = member.__func__
                if inspect.isfunction(member):
                    found[f"{name}.{attr}"] = member
    return found


def touched(fn: Any) -> set[type]:
    hints = typing.get_type_hints(fn, localns=NAMESPACE)
    return set().union(*(types_in(h) for h in hints.values())) if hints else set()


@pytest.mark.parametrize("module", [bide, bide.tools], ids=["bide", "bide.tools"])
def test_every_type_the_public_api_touches_is_exported(module):
    # Tool types are documented in bide.tools (bide.App takes a ToolRegistry from there).
    exported = {getattr(m, n) for m in (bide, bide.tools) for n in m.__all__}
    everything = signatures(module)
    missing = {
        f"{t.__module__}.{t.__qualname__} (in {label})"
        for label, fn in everything.items()
        if label not in INTERNAL
        for t in touched(fn)
        if t.__module__.startswith("bide") and t not in exported
    }
    assert not missing, f"types users touch but cannot import from {module.__name__}: {missing}"


def test_the_walk_sees_what_a_new_user_saw():
    # Harness.deliver returned a type `bide` did not export: the walk must see it.
    assert bide.SignalDecision in touched(bide.Harness.deliver)
    assert bide.Doc in touched(bide.Harness.list_docs)
    assert bide.SignalSlot in touched(bide.TaskRecord)
    assert bide.tools.ToolRegistry in touched(bide.App)
    assert set(INTERNAL) <= set(signatures(bide)) | set(signatures(bide.tools))


def test_app_is_exported_but_loaded_only_when_asked_for():
    import os
    import subprocess
    import sys
    from pathlib import Path

    shared = Path(bide.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(shared)}
    probe = "import sys, bide; print('bide.app' in sys.modules); print(bide.App.__module__)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["False", "bide.app"]
    from bide import App
    from bide.app import App as from_module

    assert App is from_module
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = bide.Nope


def test_mint_webhook_is_where_tool_authors_look():
    from bide.service.webhooks import mint_webhook as from_service
    from bide.tools.webhooks import mint_webhook as from_module

    assert bide.tools.mint_webhook is from_service is from_module
    assert bide.tools.Webhook is bide.tools.webhooks.Webhook


class PublicOnlyApi:
    """What a tool sees of ToolExecutionApi's public surface, and nothing else: a
    ``mint_webhook`` that reached into private state would fail on it."""

    __slots__ = ("memos", "services", "session_id", "task_id", "writes")

    def __init__(self) -> None:
        self.session_id = "sess-9"
        self.task_id = "t-4"
        self.services = {"webhook_base_url": "https://hooks.example/"}
        self.memos: dict[str, Any] = {}
        self.writes: list[tuple[str, Any]] = []

    async def memo(self, name: str, candidate: Any = ...) -> Any:
        return self.memos.setdefault(name, candidate)

    async def write(self, change: Any) -> Any:
        writes = self.writes

        class Tx:
            def put_doc(self, key: str, body: Any) -> None:
                writes.append((key, body))

        return change(Tx())


def test_mint_webhook_needs_only_the_public_api():
    from bide.tools.webhooks import binding_key, parse_token

    api = PublicOnlyApi()
    hook = run(bide.tools.mint_webhook(api, ANSWER, "done"))  # type: ignore[arg-type]
    assert hook.url == f"https://hooks.example/hooks/{hook.token}"
    session, nonce, _mac = parse_token(hook.token)
    assert session == "sess-9"
    [(key, body)] = api.writes
    assert key == binding_key(nonce)
    assert body["session_id"] == "sess-9" and body["task_id"] == "t-4"
    assert body["signal"] == ANSWER.name and body["key"] == "done"
    again = run(bide.tools.mint_webhook(api, ANSWER, "done"))  # type: ignore[arg-type]
    assert again == hook, "a rerun gets the same URL (the nonce is memoized)"


class NoArgs(BaseModel):
    pass


def test_a_tool_reads_its_session_and_the_host_services():
    seen: dict[str, Any] = {}

    async def probe(args: NoArgs, api: Any) -> ToolResult:
        seen.update(session=api.session_id, task=api.task_id, services=api.services)
        hook = await bide.tools.mint_webhook(api, ANSWER, "done")
        with pytest.raises(TypeError):
            api.services["webhook_base_url"] = "changed"  # read-only: the host sets them
        return ToolResult.of_text(hook.url)

    async def go():
        registry = ToolRegistry([define_tool("probe", "", NoArgs, probe, replay="safe")])
        k = Kit(registry.task)
        k.h.services["webhook_base_url"] = "http://127.0.0.1:8787"
        await k.h.open()
        t = await k.h.create_task(registry.task, registry.call("probe", {}))
        await k.h.run_until_parked()
        url = result_of(k.h.outcome(t)).text
        assert url.startswith("http://127.0.0.1:8787/hooks/")
        assert seen["session"] == "s1" and seen["task"] == t
        assert dict(seen["services"]) == {"webhook_base_url": "http://127.0.0.1:8787"}

    run(go())
