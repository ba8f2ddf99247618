"""Delegation (design 002, "Reuse the same mechanism for delegation and compute").

Two tools hand a brief to a child agent, a new conversation of the same session that starts
from its brief and an admitted profile (its system prompt), never from the parent's transcript:

* ``agent_run`` (joined): the call owns the child conversation, submits the brief with a
  ``notify`` and parks on :data:`~bide.agent.SUBMISSION_SETTLED`, like the subagent tool; the
  child's answer is the call's result. The child's deadline is the park's ``until``; when it
  passes the call ends and, owning the child, closes it.
* ``agent_spawn`` (promise): a supervisor task owns the child conversation and the call returns
  a promise handle at once. The supervisor resolves the promise with the child's answer; the
  promise's hard deadline is the child's deadline, and a cancelled or expired promise aborts
  the supervisor, which closes the child. The parent awaits the handle later with
  ``promise_await``.

Root-scoped limits (:class:`DelegationLimits`) bound the whole tree under a top-level
conversation: depth, total descendants, concurrently open descendants, and deadlines. Each
delegation reserves capacity in the root's document ``delegation-root/<root>`` in the same
commit that creates the child, and releases it when the child ends; refusals are recorded there
too. ``delegation-child/<conversation>`` says which root and depth a child conversation has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .agent.conversation import (
    SUBMISSION_SETTLED,
    Notify,
    create_conversation,
    owned_conversation_id,
)
from .engine.clock import HOUR
from .engine.errors import DefinitionError
from .engine.host import WriteTx
from .engine.ids import keyed_id
from .engine.signals import SignalExpired, SignalValue
from .engine.state import Aborted, Completed, Sleeping, Terminal
from .engine.tasks import TaskDefinition, TaskView, define_task
from .promises import DEADLINE_KEEPER, create_promise, read_promise, resolve_promise
from .tools.define import ToolDefinition, claim_tools, define_tool
from .tools.results import Sleep, ToolResult

if TYPE_CHECKING:
    from .agent.agent import Agent

ChildStatus = Literal["open", "answered", "failed", "expired", "cancelled"]


@dataclass(frozen=True)
class DelegationLimits:
    """Limits of one delegation tree (a top-level conversation and everything below it).

    ``max_depth``: how deep children may nest (a child of the root has depth 1);
    ``max_descendants``: how many children the tree may ever start; ``max_open``: how many may
    be open at once; ``child_deadline``: seconds each child has to answer; ``tree_deadline``:
    seconds from the root's first delegation after which no child may run.
    """

    max_depth: int = 2
    max_descendants: int = 10
    max_open: int = 4
    child_deadline: float = HOUR
    tree_deadline: float | None = None

    def __post_init__(self) -> None:
        if min(self.max_depth, self.max_descendants, self.max_open) < 1:
            raise DefinitionError("delegation limits must allow at least one child")
        if self.child_deadline <= 0 or (self.tree_deadline is not None and self.tree_deadline <= 0):
            raise DefinitionError("delegation deadlines are numbers of seconds > 0")


class ChildRecord(BaseModel):
    """One child of a delegation tree, as the root's document records it."""

    model_config = ConfigDict(extra="forbid")

    conversation: str
    parent: str
    depth: int
    mode: Literal["run", "spawn"]
    profile: str
    call_task: str
    status: ChildStatus = "open"
    started_at: float
    deadline: float
    promise: str | None = None
    ended_at: float | None = None


class DelegationTree(BaseModel):
    """The document ``delegation-root/<root>``: the tree's limits, counts and children."""

    model_config = ConfigDict(extra="forbid")

    root: str
    max_depth: int
    max_descendants: int
    max_open: int
    child_deadline: float
    deadline: float | None
    total: int = 0
    open: int = 0
    children: dict[str, ChildRecord] = Field(default_factory=dict)
    refusals: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class Reservation:
    """Capacity reserved for one child."""

    root: str
    depth: int
    deadline: float


@dataclass(frozen=True)
class Refusal:
    """A delegation a limit refused; ``reason`` names the limit."""

    reason: str


def root_doc_key(root: str) -> str:
    """The document of a delegation tree."""
    return f"delegation-root/{root}"


def child_doc_key(conversation: str) -> str:
    """Where a child conversation's root and depth are recorded."""
    return f"delegation-child/{conversation}"


def read_tree(reader: Any, root: str) -> DelegationTree | None:
    """A delegation tree (``reader``: a harness, runtime or tx); None before any delegation."""
    body = reader.get_doc(root_doc_key(root))
    return None if body is None else DelegationTree.model_validate(body)


# --- the rules, pure ---------------------------------------------------------------------------


def check_limits(tree: DelegationTree, depth: int, now: float) -> str | None:
    """Why a child at ``depth`` may not start now, or None when it may."""
    if depth > tree.max_depth:
        return f"depth limit: a child at depth {depth} exceeds max_depth {tree.max_depth}"
    if tree.total >= tree.max_descendants:
        return f"descendant limit: the tree already started {tree.total} of {tree.max_descendants}"
    if tree.open >= tree.max_open:
        return f"open limit: {tree.open} children are open (max_open {tree.max_open})"
    if tree.deadline is not None and now >= tree.deadline:
        return "deadline limit: the delegation tree's deadline has passed"
    return None


def child_deadline(tree: DelegationTree, now: float) -> float:
    """A new child's hard deadline: its own allowance, capped by the tree's deadline."""
    own = now + tree.child_deadline
    return own if tree.deadline is None else min(own, tree.deadline)


# --- reservations (inside commits) -------------------------------------------------------------


def _new_tree(root: str, limits: DelegationLimits, now: float) -> DelegationTree:
    deadline = None if limits.tree_deadline is None else now + limits.tree_deadline
    return DelegationTree(
        root=root,
        max_depth=limits.max_depth,
        max_descendants=limits.max_descendants,
        max_open=limits.max_open,
        child_deadline=limits.child_deadline,
        deadline=deadline,
    )


def _put_tree(tx: WriteTx, tree: DelegationTree) -> None:
    tx.put_doc(root_doc_key(tree.root), tree.model_dump(mode="json"))


def reserve(
    tx: WriteTx,
    limits: DelegationLimits,
    *,
    caller: str,
    child: str,
    mode: Literal["run", "spawn"],
    profile: str,
    call_task: str,
    promise: str | None = None,
) -> Reservation | Refusal:
    """Reserve capacity for ``child`` under ``caller``'s tree, or record a refusal. Idempotent
    per child and per refused call, so a rerun of the call gets the same answer."""
    placed = tx.get_doc(child_doc_key(caller))
    root, depth = (placed["root"], placed["depth"]) if placed is not None else (caller, 0)
    tree = read_tree(tx, root) or _new_tree(root, limits, tx.now())
    if child in tree.children:
        record = tree.children[child]
        return Reservation(root, record.depth, record.deadline)
    if call_task in tree.refusals:
        return Refusal(tree.refusals[call_task])
    why = check_limits(tree, depth + 1, tx.now())
    if why is not None:
        _put_tree(tx, tree.model_copy(update={"refusals": {**tree.refusals, call_task: why}}))
        return Refusal(why)
    deadline = child_deadline(tree, tx.now())
    record = ChildRecord(
        conversation=child,
        parent=caller,
        depth=depth + 1,
        mode=mode,
        profile=profile,
        call_task=call_task,
        started_at=tx.now(),
        deadline=deadline,
        promise=promise,
    )
    update = {
        "total": tree.total + 1,
        "open": tree.open + 1,
        "children": {**tree.children, child: record},
    }
    _put_tree(tx, tree.model_copy(update=update))
    tx.put_doc(child_doc_key(child), {"root": root, "depth": depth + 1, "parent": caller})
    return Reservation(root, depth + 1, deadline)


def release(tx: WriteTx, child: str, status: ChildStatus) -> None:
    """The child ended: record how, and free its open slot (once)."""
    placed = tx.get_doc(child_doc_key(child))
    tree = read_tree(tx, placed["root"]) if placed is not None else None
    record = tree.children.get(child) if tree is not None else None
    if tree is None or record is None or record.status != "open":
        return
    ended = record.model_copy(update={"status": status, "ended_at": tx.now()})
    update = {"open": tree.open - 1, "children": {**tree.children, child: ended}}
    _put_tree(tx, tree.model_copy(update=update))


# --- the tools ---------------------------------------------------------------------------------


class DelegateArgs(BaseModel):
    """What the model passes: a self-contained brief and an admitted profile name."""

    brief: str = Field(description="Everything the child needs to know; it sees nothing else")
    profile: str = Field(description="Which admitted profile the child runs with")


def _caller_of(tx: Any) -> str | None:
    # The call's conversation is in its task's input; the commit can read its own task.
    record = tx.find(tx.task_id)
    return None if record is None else record.input.get("conversation")


class Delegation:
    """``agent_run`` and ``agent_spawn`` for one agent, its admitted profiles (name -> system
    prompt) and root-scoped limits.

    Build it, add :attr:`tools` to the agent's registry, then :meth:`bind` the agent (the
    tools and the agent refer to each other). A harness needs :meth:`task_kinds` besides the
    agent's own. A :class:`bide.app.App` does both for the delegations among its tools.
    """

    def __init__(self, profiles: dict[str, str], limits: DelegationLimits | None = None) -> None:
        if not profiles:
            raise DefinitionError("delegation needs at least one admitted profile")
        self.profiles = dict(profiles)
        self.limits = limits or DelegationLimits()
        self._agent: Agent | None = None
        self.supervisor = self._supervisor_task()
        self.tools: list[ToolDefinition] = [self._run_tool(), self._spawn_tool()]
        claim_tools(self, self.tools)  # an App finds the delegation through its tools

    def bind(self, agent: Agent) -> Delegation:
        """The agent children run with (the same one: only the profile differs)."""
        self._agent = agent
        return self

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` gave the delegation its agent."""
        return self._agent is not None

    @property
    def agent(self) -> Agent:
        """The bound agent."""
        if self._agent is None:
            raise DefinitionError("call Delegation.bind(agent) before running delegation tools")
        return self._agent

    def task_kinds(self) -> list[TaskDefinition]:
        """The supervisor of spawned children and the promise keeper."""
        return [self.supervisor, DEADLINE_KEEPER]

    def _profile_error(self, args: DelegateArgs) -> ToolResult | None:
        if args.profile in self.profiles:
            return None
        known = ", ".join(sorted(self.profiles))
        return ToolResult.of_text(
            f"unknown profile {args.profile!r}; admitted profiles: {known}", is_error=True
        )

    def _submit(self, tx: Any, child: str, args: DelegateArgs, owner: str) -> None:
        from .agent.agent import submit_in

        create_conversation(tx, child, owner_task=owner, system=self.profiles[args.profile])
        submit_in(
            self.agent,
            tx,
            child,
            args.brief,
            request_id=f"delegate:{owner}",
            notify=Notify(task_id=owner, key="answered"),
            source=f"task:{owner}",
        )

    # agent_run -----------------------------------------------------------------------------

    def _run_tool(self) -> ToolDefinition:
        async def execute(args: DelegateArgs, api: Any) -> ToolResult | Sleep:
            child = owned_conversation_id(api.task_id, "delegate")
            state = await api.read_signal(SUBMISSION_SETTLED, "answered")
            if isinstance(state, SignalValue):
                settled = state.value
                done = settled.status == "done"
                await api.write(lambda tx: release(tx, child, "answered" if done else "failed"))
                if not done:
                    text = f"agent_run: the child ended {settled.status}: {settled.error}"
                    return ToolResult.of_text(text, is_error=True)
                return ToolResult.of_text(settled.answer or "", details={"conversation": child})
            if isinstance(state, SignalExpired):
                await api.write(lambda tx: release(tx, child, "expired"))
                text = "agent_run: the child did not answer before its deadline; it was closed"
                return ToolResult.of_text(text, is_error=True)
            if (error := self._profile_error(args)) is not None:
                return error
            call_task = api.task_id

            def start(tx: Any) -> Reservation | Refusal:
                caller = _caller_of(tx)
                if caller is None:
                    return Refusal("agent_run needs a conversation to delegate from")
                got = reserve(
                    tx,
                    self.limits,
                    caller=caller,
                    child=child,
                    mode="run",
                    profile=args.profile,
                    call_task=call_task,
                )
                if isinstance(got, Reservation) and tx.get_doc(f"conv/{child}") is None:
                    self._submit(tx, child, args, call_task)
                return got

            got = await api.write(start)
            if isinstance(got, Refusal):
                return ToolResult.of_text(f"agent_run refused: {got.reason}", is_error=True)
            signals = [SUBMISSION_SETTLED.key("answered")]
            return Sleep(checkpoint={"child": child}, signals=signals, until=got.deadline)

        async def cancel(args: DelegateArgs, api: Any) -> None:
            child = owned_conversation_id(api.task_id, "delegate")
            await api.write(lambda tx: release(tx, child, "cancelled"))

        return define_tool(
            "agent_run",
            "Delegate a task to a child agent and wait for its answer",
            DelegateArgs,
            execute,
            replay="safe",
            cancel=cancel,
        )

    # agent_spawn ---------------------------------------------------------------------------

    def _spawn_tool(self) -> ToolDefinition:
        async def execute(args: DelegateArgs, api: Any) -> ToolResult:
            if (error := self._profile_error(args)) is not None:
                return error
            call_task = api.task_id
            child = owned_conversation_id(call_task, "spawn")
            promise_id = keyed_id("p-", call_task, "spawn")

            def start(tx: Any) -> Reservation | Refusal:
                caller = _caller_of(tx)
                if caller is None:
                    return Refusal("agent_spawn needs a conversation to delegate from")
                got = reserve(
                    tx,
                    self.limits,
                    caller=caller,
                    child=child,
                    mode="spawn",
                    profile=args.profile,
                    call_task=call_task,
                    promise=promise_id,
                )
                if isinstance(got, Reservation) and read_promise(tx, promise_id) is None:
                    spec = {
                        "child": child,
                        "brief": args.brief,
                        "profile": args.profile,
                        "promise": promise_id,
                    }
                    # Top-level: the child outlives the call (and the run) that spawned it;
                    # its deadline and its promise end it.
                    supervisor = tx.create_task(
                        self.supervisor, spec, key=f"delegate:{child}", owner=None
                    )
                    create_promise(
                        tx,
                        promise_id,
                        deadline=got.deadline,
                        producer=supervisor,
                        close_task=supervisor,
                        label=f"agent_spawn {args.profile}",
                    )
                return got

            got = await api.write(start)
            if isinstance(got, Refusal):
                return ToolResult.of_text(f"agent_spawn refused: {got.reason}", is_error=True)
            text = (
                f"spawned a {args.profile} child; promise handle: {promise_id}. "
                "Await it later with promise_await."
            )
            return ToolResult.of_text(
                text, details={"promise_id": promise_id, "conversation": child}
            )

        return define_tool(
            "agent_spawn",
            "Start a child agent on a task and get a promise handle to await later",
            DelegateArgs,
            execute,
            replay="safe",
        )

    # the supervisor of a spawned child -----------------------------------------------------

    def _supervisor_task(self) -> TaskDefinition:
        async def start(task: TaskView, rt: Any) -> None:
            args = DelegateArgs(brief=task.input["brief"], profile=task.input["profile"])

            def build(tx: Any) -> Sleeping:
                self._submit(tx, task.input["child"], args, task.id)
                signals = (SUBMISSION_SETTLED.key("answered"),)
                return Sleeping(checkpoint="answered", signals=signals)

            await rt.commit(build)

        async def answered(task: TaskView, rt: Any) -> None:
            state = await rt.read_signal(SUBMISSION_SETTLED, "answered")
            assert isinstance(state, SignalValue)
            settled = state.value
            promise_id, child = task.input["promise"], task.input["child"]

            def build(tx: Any) -> Terminal:
                if settled.status == "done":
                    resolve_promise(tx, promise_id, "resolved", settled.answer)
                    release(tx, child, "answered")
                else:
                    error = f"the child ended {settled.status}: {settled.error}"
                    resolve_promise(tx, promise_id, "rejected", error=error)
                    release(tx, child, "failed")
                return Terminal(outcome=Completed(result={"status": settled.status}))

            await rt.commit(build)

        async def closed(task: TaskView, rt: Any) -> None:
            promise_id, child = task.input["promise"], task.input["child"]
            reason = task.abort_reason or "closed"

            def build(tx: Any) -> Terminal:
                resolve_promise(tx, promise_id, "cancelled", error=reason)
                promise = read_promise(tx, promise_id)
                expired = promise is not None and promise.status == "expired"
                release(tx, child, "expired" if expired else "cancelled")
                return Terminal(outcome=Aborted(reason=reason))

            await rt.commit(build)

        return define_task(
            "bide.delegation-child",
            1,
            lambda _input: "start",
            {"start": start, "answered": answered},
            abort=closed,
        )
