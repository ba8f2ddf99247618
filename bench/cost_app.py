"""The app ``bench_cost.py`` deploys on moto (``BIDE_APP=cost_app:APP``): two long-lived tasks
that wait for one signal after another.

* ``bench.looper`` (from ``bench_aws_requests``) sleeps on signal key ``k<n>``; a caller
  delivers by task id (the IAM route).
* ``bench.hook_looper`` does the same but, like ``create_callback``, hands out a fresh
  capability webhook for each wait: the webhook's binding document is written in the same
  commit as the sleep, and its token is kept in :data:`HOOKS` for the bench to post to.
"""

from __future__ import annotations

from typing import Any

from bench_aws_requests import REPLY, Looper

from bide import Sleeping, define_task
from bide.app import App
from bide.service.webhooks import WebhookBinding, binding_key, keys_of, token_of
from bide.tools.webhooks import new_nonce

HOOKS: dict[str, str] = {}
"""session id -> the token of the webhook its task waits on now."""


async def hook_loop(task: Any, rt: Any) -> None:
    """Read the value that woke us (if any), mint a webhook for key k<n>, sleep on it."""
    n = task.checkpoint["n"]
    if task.wake is not None:
        await rt.read_signal(REPLY, f"k{n - 1}")
    binding = WebhookBinding(
        session_id=rt.session_id,
        task_id=rt.task_id,
        signal=REPLY.name,
        key=f"k{n}",
        nonce=new_nonce(),
    )

    def sleep_with_hook(tx: Any) -> Sleeping:
        tx.put_doc(binding_key(binding.nonce), binding.to_doc())
        return Sleeping(checkpoint={"phase": "wait", "n": n + 1}, signals=(REPLY.key(f"k{n}"),))

    await rt.commit(sleep_with_hook)
    HOOKS[rt.session_id] = token_of(binding, keys_of(rt.services))


HookLooper = define_task(
    "bench.hook_looper", 1, lambda _: {"phase": "wait", "n": 0}, {"wait": hook_loop}
)
APP = App(tasks=[Looper, HookLooper], signals=[REPLY])
