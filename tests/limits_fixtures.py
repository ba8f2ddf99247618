"""What the value-limit tests share: a signal taking any JSON, a task that holds every value
delivered to it without consuming any, a task that stores a value it builds, webhook
bindings written directly, and a check that a session still loads from a fresh connection."""

from __future__ import annotations

import secrets
from typing import Any

from bide import (
    App,
    Completed,
    Harness,
    Sleeping,
    Store,
    TaskRuntime,
    TaskView,
    Terminal,
    define_signal,
    define_task,
)
from bide.engine.host import host_commit
from bide.tools.webhook_keys import WebhookKeys, process_keys
from bide.tools.webhooks import WebhookBinding, binding_key, new_nonce, token_of

BLOB = define_signal("test.blob", 1, Any)
"""A signal whose schema accepts any JSON: what a permissive webhook looks like."""

WAIT_KEY = "wait"  # the key HOLDER sleeps on; values for every other key are held early


async def _hold(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(Sleeping(checkpoint="done", signals=(BLOB.key(WAIT_KEY),)))


async def _done(task: TaskView, rt: TaskRuntime) -> None:
    await rt.commit(Terminal(outcome=Completed(result="woke")))


HOLDER = define_task("test.holder", 1, lambda _input: "hold", {"hold": _hold, "done": _done})
"""Sleeps on :data:`WAIT_KEY` with no deadline: values for other keys pile up on its record."""


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value nesting ``depth`` levels of arrays and objects (alternating)."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


async def _store_value(task: TaskView, rt: TaskRuntime) -> None:
    pad = task.input.get("pad", 0)
    where = task.input["where"]
    # In a checkpoint the value sits one level down ({"phase": ..., "value": ...}).
    depth = task.input["depth"] - (where == "checkpoint")
    value = nested(depth, "x" * pad if pad else 1)
    if where == "memo":
        await rt.memo("big", value)
        await rt.commit(Terminal(outcome=Completed(result="memo stored")))
    elif where == "checkpoint":
        await rt.commit(Sleeping(checkpoint={"phase": "store", "value": value}, until=1e12))
    else:
        await rt.commit(Terminal(outcome=Completed(result=value)))


STORER = define_task("test.storer", 1, lambda _input: "store", {"store": _store_value})
"""Builds ``nested(input.depth)`` and stores it as its ``result``, a ``memo`` or in its
``checkpoint`` (input ``where``): the value is built inside the task, so its input is small."""


async def _raise(task: TaskView, rt: TaskRuntime) -> None:
    raise RuntimeError("e" * task.input["chars"])


RAISER = define_task("test.raiser", 1, lambda _input: "raise", {"raise": _raise})
"""Raises an exception whose message is ``input.chars`` long."""


def limits_app() -> App:
    """An app with the holder, the storer and the permissive signal."""
    return App(tasks=[HOLDER, STORER, RAISER], signals=[BLOB])


def bind_webhook(
    harness: Harness,
    task_id: str,
    key: str,
    hmac_secret: str | None = None,
    keys: WebhookKeys | None = None,
) -> str:
    """Write a webhook binding to ``BLOB`` under ``key`` of ``task_id``; its token under
    ``keys`` (this process's key by default; a local stack's key for its routes)."""
    binding = WebhookBinding(
        session_id=harness.session_id,
        task_id=task_id,
        signal=BLOB.name,
        key=key,
        nonce=new_nonce(),
        hmac_secret=hmac_secret,
    )
    host_commit(harness, lambda tx: tx.put_doc(binding_key(binding.nonce), binding.to_doc()))
    return token_of(binding, keys or process_keys())


def loads_back(store: Store, session_id: str) -> dict[str, Any]:
    """Load the session and read each of its live tasks back from its stored JSON, as a new
    worker would; every task's signal values by slot."""
    snapshot = store.load(session_id)
    held: dict[str, Any] = {}
    for task_id in snapshot.tasks:
        record = store.get_task(session_id, task_id)
        assert record is not None
        again = type(record).from_json(record.to_json())
        held.update({k: s.value for k, s in again.signals.items() if s.has_value})
    return held


# --- the local stack over HTTP -------------------------------------------------------------------


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """A request to the local stack on 127.0.0.1 (no proxy); (status, parsed JSON or text)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def post_json(url: str, value: Any) -> tuple[int, Any]:
    """``POST`` ``value`` as JSON to the local stack; (status, parsed JSON or text)."""
    import json

    return http("POST", url, json.dumps(value).encode(), {"Content-Type": "application/json"})


class HttpSession:
    """A session of a running local stack with a parked :data:`HOLDER`, created through a
    second connection to the stack's SQLite file; its signal route and a webhook URL."""

    def __init__(self, stack: Any, session_id: str, hmac_secret: str | None = None) -> None:
        import asyncio
        from urllib.parse import quote

        from bide import SQLiteStore

        self.stack, self.sid = stack, session_id
        self.store = SQLiteStore(stack.stack.db_path)

        async def setup() -> tuple[str, str, str]:
            h = Harness(self.store, session_id, [HOLDER, STORER])
            await h.open()
            task = await h.create_task(HOLDER)
            await h.run_until_parked()
            keys = stack.stack.webhook_keys
            hooks = (
                bind_webhook(h, task, "hook", keys=keys),
                bind_webhook(h, task, "stream.*", keys=keys),
                bind_webhook(h, task, "signed.*", hmac_secret=self.hmac_secret, keys=keys),
            )
            await h.close()
            return task, *hooks

        self.hmac_secret = hmac_secret or secrets.token_hex(16)
        self.task, hook, stream, signed = asyncio.run(setup())
        base = stack.url
        self.hook_url = f"{base}/hooks/{hook}"
        self.stream_url = f"{base}/hooks/{stream}"
        self.signed_url = f"{base}/hooks/{signed}"
        """A stream webhook that needs an HMAC signature with :attr:`hmac_secret`."""
        self.signal_base = f"{base}/sessions/{quote(session_id)}/tasks/{self.task}/signals"

    def signal_url(self, key: str, signal: str = BLOB.name) -> str:
        from urllib.parse import quote

        return f"{self.signal_base}/{quote(signal, safe='')}/{quote(key, safe='')}"

    def held(self) -> dict[str, Any]:
        """The values held on the holder, read back from the store."""
        return loads_back(self.store, self.sid)

    def head(self) -> int:
        return self.store.head(self.sid)

    def close(self) -> None:
        self.store.close()
