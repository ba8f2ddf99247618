"""Lifecycle controllers (design 002, "Give lifecycle ownership to a controller").

A session has at most one lifecycle controller: the task that owns the policy around its main
conversation (a bot's inbox, budgets, rotation). The document ``controller`` names it; a second,
different controller is refused (:class:`ControllerExists`).

The controller receives run-terminal notifications: every run of its conversation that ends,
with an answer (``status: done``), a failure or reached limit (``failed``) or a Stop
(``stopped``), posts a ``run_ended`` envelope to the controller's mailbox and signals it in
the commit that ends the run (:func:`bide.agent.run_end.run_ended_in`; the same commit adds
the session's ``run_ended`` event). The controller task serves its mailbox like any receiver
(:func:`controller_task`). :func:`controller_hooks` and :data:`RUN_NOTIFIER` remain for apps
that install them; they no longer post (the run's end does), so a notice is never doubled.

A lifecycle-managed session cannot be forked or cloned: a copy would be a second conversation
with ambiguous controller ownership. :func:`fork_session` and :func:`clone_session` copy
conversation documents into a new session and refuse (:class:`LifecycleManaged`) when the
source has a controller. Admitting workflow-tool bindings does not make a session managed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .agent.conversation import ConversationHead, entry_key, head_key
from .agent.hooks import GenerationHooks
from .agent.run_end import CONTROLLER_DOC, CONTROLLER_MAILBOX
from .engine.errors import BideError
from .engine.host import WriteTx, host_commit
from .engine.mailbox import Handler, mailbox_task, post, read_mailbox
from .engine.state import Completed, Terminal
from .engine.store.base import MAX_COMMIT_ITEMS, Doc, Store
from .engine.tasks import TaskDefinition, TaskView, define_task

if TYPE_CHECKING:
    from .engine.harness import Harness


class ControllerExists(BideError):
    """The session already has a (different) lifecycle controller; a session has at most one."""


class LifecycleManaged(BideError):
    """The session is lifecycle-managed, so it cannot be forked or cloned."""


class ControllerRecord(BaseModel):
    """The document ``controller``."""

    model_config = ConfigDict(extra="forbid")

    task: str
    kind: str
    conversation: str
    attached_at: float


def read_controller(reader: Any) -> ControllerRecord | None:
    """The session's controller (``reader``: a harness, runtime, tx), or None."""
    body = reader.get_doc(CONTROLLER_DOC)
    return None if body is None else ControllerRecord.model_validate(body)


def attach_controller_in(
    tx: WriteTx, kind: TaskDefinition, conversation: str, input: Any = None
) -> ControllerRecord:
    """Make a task of ``kind`` the session's controller for ``conversation``, in ``tx``'s
    commit. Attaching the same controller again returns it (a retried request converges);
    any other raises :class:`ControllerExists` and writes nothing."""
    existing = read_controller(tx)
    if existing is not None:
        if existing.kind == kind.name and existing.conversation == conversation:
            return existing
        raise ControllerExists(
            f"session {tx.session_id!r} already has a lifecycle controller ({existing.kind!r}, "
            f"task {existing.task}); a session has at most one"
        )
    task = tx.create_task(kind, input, key="controller", owner=None)
    record = ControllerRecord(
        task=task, kind=kind.name, conversation=conversation, attached_at=tx.now()
    )
    tx.put_doc(CONTROLLER_DOC, record.model_dump(mode="json"))
    return record


async def attach_controller(
    harness: Harness, kind: TaskDefinition, conversation: str, input: Any = None
) -> ControllerRecord:
    """The host's command for :func:`attach_controller_in`."""
    return host_commit(harness, lambda tx: attach_controller_in(tx, kind, conversation, input))


def controller_task(name: str, handle: Handler) -> TaskDefinition:
    """A controller task kind that hands each envelope of its mailbox (``run_ended``
    notifications) to ``handle(tx, envelope)`` inside a commit."""
    return mailbox_task(name, CONTROLLER_MAILBOX, handle)


def run_notices(reader: Any, after: int = 0) -> list[dict[str, Any]]:
    """The run-terminal notifications posted to the controller, numbered ``after`` and later."""
    return read_mailbox(reader, CONTROLLER_MAILBOX, after)


# --- run-terminal notifications ---------------------------------------------------------------


async def _notify(task: TaskView, rt: Any) -> None:
    notice = dict(task.input)

    def build(tx: Any) -> Terminal:
        controller = read_controller(tx)
        if controller is not None:
            post(tx, CONTROLLER_MAILBOX, notice, ping=controller.task)
        return Terminal(outcome=Completed())

    await rt.commit(build)


RUN_NOTIFIER = define_task(
    "bide.controller-notify", 1, lambda _input: "notify", {"notify": _notify}
)
"""The ``after_run`` task that tells the controller a run ended (register it with the agent's
``hook_tasks``)."""


def controller_hooks() -> GenerationHooks:
    """Generation hooks kept for apps that install them (``Agent(...,
    hooks=[controller_hooks()], hook_tasks=[RUN_NOTIFIER])``): they add nothing now, since
    the commit that ends a run notifies the controller itself, whatever the ending."""
    return GenerationHooks("bide.controller")


# --- fork and clone ---------------------------------------------------------------------------


def _refuse_if_managed(store: Store, source: str, what: str) -> None:
    doc = store.get_doc(source, CONTROLLER_DOC)
    if doc is not None:
        record = ControllerRecord.model_validate(doc.body)
        raise LifecycleManaged(
            f"session {source!r} is lifecycle-managed by controller {record.kind!r} (task "
            f"{record.task}), so it cannot be {what}: a copy would have ambiguous controller "
            "ownership"
        )


def _conversation_docs(store: Store, source: str, head: ConversationHead, last: int) -> list[Doc]:
    docs = [
        Doc(d.key, d.body)
        for d in store.list_docs(source, f"conv/{head.id}/e/")
        if d.key <= entry_key(head.id, last)
    ]
    for d in store.list_docs(source, f"conv/{head.id}/s/"):
        # Settled submissions keep request-id dedup; queued or placed ones belong to the
        # source's running work and are not copied.
        if d.body.get("status") in ("done", "unanswered"):
            docs.append(Doc(d.key, d.body))
    idle = head.model_copy(
        update={"run": None, "run_submissions": [], "queue": [], "stopped": False, "entries": last}
    )
    docs.append(Doc(head_key(head.id), idle.model_dump(mode="json")))  # the head goes last
    return docs


def _write(store: Store, target: str, docs: list[Doc]) -> None:
    if store.head(target) != 0:
        raise BideError(f"session {target!r} already exists; fork or clone into a new id")
    seq = 0
    # A store commit holds a bounded number of items; heads come last, so a copy cut short
    # has no visible conversation and the target id is simply not reusable.
    for start in range(0, len(docs), MAX_COMMIT_ITEMS):
        seq = store.commit(target, seq, [], docs[start : start + MAX_COMMIT_ITEMS])


def _top_level_heads(store: Store, source: str) -> list[ConversationHead]:
    heads = []
    for d in store.list_docs(source, "conv/"):
        if d.key.count("/") == 1:
            head = ConversationHead.model_validate(d.body)
            if head.owner_task is None:  # children belong to tasks of the source
                heads.append(head)
    return heads


def clone_session(store: Store, source: str, target: str) -> list[str]:
    """Copy every top-level conversation (transcript, settled submissions, an idle head) of
    ``source`` into the new session ``target``; the ids copied. No task is copied.
    Raises :class:`LifecycleManaged` for a session with a controller."""
    _refuse_if_managed(store, source, "cloned")
    heads = _top_level_heads(store, source)
    docs = [d for head in heads for d in _conversation_docs(store, source, head, head.entries)]
    docs.append(Doc("lineage", {"kind": "clone", "source": source}))
    _write(store, target, docs)
    return [head.id for head in heads]


def fork_session(
    store: Store, source: str, target: str, conversation: str, *, through_entry: int | None = None
) -> int:
    """Branch one top-level conversation of ``source`` into the new session ``target``, with
    its entries up to ``through_entry`` (default: all); the number of entries copied.
    Raises :class:`LifecycleManaged` for a session with a controller."""
    _refuse_if_managed(store, source, "forked")
    body = store.get_doc(source, head_key(conversation))
    if body is None:
        raise BideError(f"session {source!r} has no conversation {conversation!r}")
    head = ConversationHead.model_validate(body.body)
    if head.owner_task is not None:
        raise BideError(f"conversation {conversation!r} belongs to a task; fork its root instead")
    last = head.entries if through_entry is None else max(0, min(through_entry, head.entries))
    docs = _conversation_docs(store, source, head, last)
    lineage = {"kind": "fork", "source": source, "conversation": conversation}
    docs.append(Doc("lineage", {**lineage, "through_entry": last}))
    _write(store, target, docs)
    return last
