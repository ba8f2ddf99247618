"""Durable operations: what a workflow body awaits.

An operation takes the next sequence number when the body creates it (so the order is the
order of creation, whatever awaits later) and is performed by
:meth:`WorkflowContext._perform <bide.workflow.context.WorkflowContext._perform>` when awaited:
a recorded resolution is returned as recorded; otherwise a *wait* is polled (ready, or a park
on keys and a deadline) and an *action* (a step, a webhook, a message) runs once and is
recorded. See :mod:`bide.workflow.history` for the record format.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..agent.conversation import (
    SUBMISSION_SETTLED,
    Notify,
    create_conversation,
    owned_conversation_id,
    read_submission,
)
from ..engine.signals import SignalExpired, SignalKey, SignalToken, SignalValue
from ..tools.webhooks import WebhookBinding, binding_key, make_token
from .errors import (
    AuthorizationRequired,
    FatalError,
    StepFailed,
    SubagentFailed,
    WaitTimeout,
    WorkflowError,
)
from .history import (
    WAKE,
    WEBHOOK,
    attempt_memo,
    derived_id,
    op_memo,
    result_memo,
    seq_key,
)
from .requests import (
    AskAnswer,
    AskOption,
    AuthorizationRequest,
    Display,
    InputRequest,
    ask_key,
    auth_key,
)

if TYPE_CHECKING:
    from .context import WorkflowContext

T = TypeVar("T")


# --- what polling an operation says --------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """Resolved: record ``value``, or what ``build(tx, record)`` returns inside the commit."""

    value: Any = None
    build: Callable[[Any, dict[str, Any]], Any] | None = None


@dataclass(frozen=True)
class Raise:
    """Resolved with an error: recorded, and raised on every replay."""

    error: dict[str, Any]


@dataclass(frozen=True)
class Pending:
    """Not yet: park on these signal keys, doorbells of these documents, and deadline."""

    keys: tuple[SignalKey[Any], ...] = ()
    bells: tuple[str, ...] = ()
    until: float | None = None


Outcome = Ready | Raise | Pending


@dataclass(frozen=True)
class RetryPolicy:
    """How a step retries: up to ``max_attempts`` attempts in all, waiting ``initial_delay``
    seconds after the first failure and ``backoff`` times longer after each next one (at most
    ``max_delay``). A wait parks the run on time; it never sleeps in memory. A
    :class:`~bide.workflow.errors.FatalError` is never retried."""

    max_attempts: int = 3
    initial_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("a retry policy needs max_attempts >= 1")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        return float(min(self.max_delay, self.initial_delay * self.backoff ** (failures - 1)))


# --- the base ------------------------------------------------------------------------------


class Op(Generic[T]):
    """A durable operation. Await it (once or again: a resolved one returns its recorded
    value), or race it with :meth:`WorkflowContext.race`."""

    kind: ClassVar[str] = "op"
    waits: ClassVar[bool] = True

    def __init__(self, ctx: WorkflowContext, name: str) -> None:
        self._ctx = ctx
        self.seq = ctx._next_seq()
        self.name = name

    def __await__(self) -> Generator[Any, None, T]:
        return self._ctx._perform(self).__await__()

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r} #{self.seq}>"

    def params(self) -> dict[str, Any]:
        """Values fixed at the first evaluation and kept in the record (e.g. a deadline)."""
        return {}

    def record(self) -> dict[str, Any]:
        """The operation's record, as first evaluated."""
        return {"op": self.kind, "name": self.name, **self.params()}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        """Side writes committed with the record of a wait (e.g. publishing a question)."""

    async def poll(self, record: dict[str, Any]) -> Outcome:
        """Whether the operation is resolved now."""
        raise NotImplementedError

    async def decode(self, stored: dict[str, Any]) -> T:
        """The value a recorded resolution stands for (or the error it raises)."""
        return stored.get("v")  # type: ignore[return-value]


def _error(exc: BaseException, **more: Any) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), **more}


# --- actions -------------------------------------------------------------------------------


class StepOp(Op[Any]):
    """``ctx.step(fn)``: runs ``fn`` until it succeeds (retries by policy), records the
    result once; never runs again on replay. ``fn`` takes the :class:`StepContext` (or
    nothing) and may be sync or async; its result must be JSON."""

    kind = "step"
    waits = False

    def __init__(
        self, ctx: WorkflowContext, fn: Callable[..., Any], name: str, retry: RetryPolicy
    ) -> None:
        super().__init__(ctx, name)
        self._fn = fn
        self._retry = retry
        try:
            # A required first parameter receives the StepContext; ``lambda: ...`` gets none.
            params = inspect.signature(fn).parameters.values()
            self._takes_context = any(
                p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                for p in params
            )
        except (TypeError, ValueError):  # builtins without a signature
            self._takes_context = False

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx, rt = self._ctx, self._ctx._rt
        attempt, failures, last = 0, 0, None
        while (tried := await rt.memo(attempt_memo(self.seq, attempt))) is not None:
            last, attempt = tried, attempt + 1
            if "error" in tried:  # an attempt that waited for a sign-in is no failure
                failures += 1
        signed_in: str | None = None
        waiting = last is not None and "retry_at" in last and not ctx.cancelled
        if waiting and last is not None and rt.now() < last["retry_at"]:
            return Pending(until=last["retry_at"])
        if last is not None and "auth" in last:
            body = rt.get_doc(auth_key(last["auth"])) or {}
            if body.get("status") == "open":
                return Pending(bells=(auth_key(last["auth"]),))
            signed_in = last["provider"] if body.get("status") == "completed" else None
        while True:
            step = ctx._enter_step(self, attempt)
            try:
                value = self._fn(step) if self._takes_context else self._fn()
                if inspect.isawaitable(value):
                    value = await value
            except AuthorizationRequired as need:
                if signed_in == need.provider or ctx.cancelled:
                    why = (
                        "rejected the token right after sign-in"
                        if signed_in == need.provider
                        else "needs a sign-in while the run is being cancelled"
                    )
                    error = {"type": "AuthorizationFailed", "message": f"{need.provider} {why}"}
                    return Raise({**error, "fatal": True, "attempts": failures + 1})
                return await self._sign_in(record, attempt, need.provider)
            except (FatalError, WorkflowError) as exc:
                return Raise(_error(exc, fatal=True, attempts=failures + 1))
            except Exception as exc:  # the step's own failure: retried by policy
                failures += 1
                if failures >= self._retry.max_attempts:
                    return Raise(_error(exc, fatal=False, attempts=failures))
                retry_at = rt.now() + self._retry.delay(failures)
                await self._attempt(record, attempt, {"error": _error(exc), "retry_at": retry_at})
                attempt, signed_in = attempt + 1, None
                if not ctx.cancelled and retry_at > rt.now():
                    return Pending(until=retry_at)
                continue
            finally:
                ctx._leave_step()
            problem = step._refuse(value)
            if problem is not None:
                return Raise({"type": "WorkflowError", "message": problem, "fatal": True})
            return Ready(value)

    async def _attempt(
        self, record: dict[str, Any], attempt: int, tried: dict[str, Any], doc: Any = None
    ) -> None:
        def write(tx: Any) -> None:
            tx.memo(op_memo(self.seq), record)
            tx.memo(attempt_memo(self.seq, attempt), tried)
            if doc is not None and tx.get_doc(auth_key(doc.id)) is None:
                tx.put_doc(auth_key(doc.id), doc.model_dump(mode="json"))

        await self._ctx._rt.write(write)

    async def _sign_in(self, record: dict[str, Any], attempt: int, provider: str) -> Outcome:
        ctx = self._ctx
        request = AuthorizationRequest(
            id=derived_id("auth-", ctx.task_id, self.seq, attempt),
            task_id=ctx.task_id,
            tool=ctx.tool_name,
            provider=provider,
            step=self.name,
            created_at=ctx._rt.now(),
        )
        await self._attempt(record, attempt, {"auth": request.id, "provider": provider}, request)
        return Pending(bells=(auth_key(request.id),))

    async def decode(self, stored: dict[str, Any]) -> Any:
        if "error" in stored:
            raise StepFailed.from_record(self.name, stored["error"])
        return stored.get("v")


class WebhookOp(Op["Webhook"]):
    """``await ctx.webhook()``: mint a capability URL whose requests this run receives."""

    kind = "webhook"
    waits = False

    def __init__(self, ctx: WorkflowContext, name: str) -> None:
        super().__init__(ctx, name)
        self._handle: Webhook | None = None

    def params(self) -> dict[str, Any]:
        rt = self._ctx._rt
        # Two ids of the id source (256 random bits in production). The secret is kept in the
        # run's own memo; the session's binding document is stored under its hash only.
        seed = f"{rt.new_id('')}\x1f{rt.new_id('')}\x1f{rt.task_id}\x1f{self.seq}"
        return {"secret": hashlib.sha256(seed.encode()).hexdigest()}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx = self._ctx
        base = str(ctx._rt.services.get("webhook_base_url", "")).rstrip("/")

        def build(tx: Any, winner: dict[str, Any]) -> dict[str, str]:
            binding = WebhookBinding(
                session_id=ctx.session_id,
                task_id=ctx.task_id,
                signal=WEBHOOK.name,
                key=seq_key(self.seq) + ".*",  # a stream: request i goes to wf.<seq>.<i>
            )
            tx.put_doc(binding_key(winner["secret"]), binding.model_dump(mode="json"))
            token = make_token(ctx.session_id, winner["secret"])
            return {"url": f"{base}/hooks/{token}", "token": token}

        return Ready(build=build)

    async def decode(self, stored: dict[str, Any]) -> Webhook:
        # One handle per webhook: it knows which requests the body already took.
        if self._handle is None:
            self._handle = Webhook(self._ctx, self.seq, stored["v"]["url"], stored["v"]["token"])
        return self._handle


class MessageOp(Op[None]):
    """``await task.post_message(text)``: one message to the parent, sent once."""

    kind = "message"
    waits = False

    def __init__(self, ctx: WorkflowContext, text: str) -> None:
        super().__init__(ctx, "post_message")
        self._text = text

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx = self._ctx

        def build(tx: Any, _record: dict[str, Any]) -> None:
            ctx._host.post_message(tx, self._text, f"m{self.seq}")

        return Ready(build=build)


# --- waits ---------------------------------------------------------------------------------


class SleepOp(Op[None]):
    """``ctx.sleep(...)``: park until a time fixed at the first evaluation."""

    kind = "sleep"

    def __init__(self, ctx: WorkflowContext, name: str, seconds: float, until: float | None):
        super().__init__(ctx, name)
        self._seconds = seconds
        self._until = until

    def params(self) -> dict[str, Any]:
        until = self._until if self._until is not None else self._ctx._rt.now() + self._seconds
        return {"until": until}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        if self._ctx._rt.now() >= record["until"]:
            return Ready(None)
        return Pending(until=record["until"])

    async def decode(self, stored: dict[str, Any]) -> None:
        return None


class WaitForOp(Op[T]):
    """``ctx.wait_for(token, key, timeout=)``: the signal value delivered to this run under
    ``key``; with a timeout, :class:`WaitTimeout` when it does not come in time."""

    kind = "wait_for"

    def __init__(
        self, ctx: WorkflowContext, token: SignalToken[T], key: str, timeout: float | None
    ) -> None:
        super().__init__(ctx, f"{token.name}/{key}")
        token.key(key)  # validates the key now
        self._token = token
        self._key = key
        self._timeout = timeout

    def params(self) -> dict[str, Any]:
        now = self._ctx._rt.now()
        return {"until": None if self._timeout is None else now + self._timeout}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        rt = self._ctx._rt
        state = await rt.read_signal(self._token, self._key)
        if isinstance(state, SignalValue):
            return Ready(self._token.dump(state.value))
        until = record.get("until")
        if until is not None and rt.now() >= until:
            return Raise({"type": "WaitTimeout", "message": f"no {self.name!r} in time"})
        if isinstance(state, SignalExpired):
            raise WorkflowError(
                f"signal key {self.name!r} expired at an earlier deadline; wait on a new key"
            )
        return Pending(keys=(self._token.key(self._key),), until=until)

    async def decode(self, stored: dict[str, Any]) -> T:
        if "error" in stored:
            raise WaitTimeout(stored["error"]["message"])
        return self._token.validate(stored["v"])


class AskOp(Op[AskAnswer]):
    """``ctx.ask(...)``: publish a question to the session and wait for its answer."""

    kind = "ask"

    def __init__(
        self,
        ctx: WorkflowContext,
        prompt: str,
        display: Display,
        options: Sequence[AskOption],
        allow_freeform: bool,
        name: str,
    ) -> None:
        super().__init__(ctx, name)
        self._request = InputRequest(
            id=derived_id("ask-", ctx.task_id, self.seq),
            task_id=ctx.task_id,
            tool=ctx.tool_name,
            call_id=ctx.call_id,
            prompt=prompt,
            display=display,
            options=list(options),
            allow_freeform=allow_freeform,
        )

    @property
    def ask_id(self) -> str:
        """The question's id (what an answer names)."""
        return self._request.id

    def params(self) -> dict[str, Any]:
        return {"doc": ask_key(self._request.id)}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        if tx.get_doc(record["doc"]) is None:
            request = self._request.model_copy(update={"created_at": tx.now()})
            tx.put_doc(record["doc"], request.model_dump(mode="json"))

    async def poll(self, record: dict[str, Any]) -> Outcome:
        body = self._ctx._rt.get_doc(record["doc"]) or {}
        if body.get("status") == "answered":
            return Ready(body["answer"])
        if body.get("status") != "open":
            raise WorkflowError(f"question {self._request.id!r} was withdrawn")
        return Pending(bells=(record["doc"],))

    async def decode(self, stored: dict[str, Any]) -> AskAnswer:
        return AskAnswer.model_validate(stored["v"])


class NextRequestOp(Op[Any]):
    """The next request a :class:`Webhook` received (its JSON body)."""

    kind = "webhook.next"

    def __init__(self, ctx: WorkflowContext, hook: Webhook, name: str) -> None:
        super().__init__(ctx, name)
        self._hook = hook

    def params(self) -> dict[str, Any]:
        return {"hook": self._hook.seq, "from": self._hook._next}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        rt = self._ctx._rt
        index = record["from"]
        while True:
            key = seq_key(record["hook"], index)
            state = await rt.read_signal(WEBHOOK, key)
            if isinstance(state, SignalValue):
                return Ready({"index": index, "body": state.value})
            if isinstance(state, SignalExpired):  # a wait on it timed out; requests moved on
                index += 1
                continue
            return Pending(keys=(WEBHOOK.key(key),))

    async def decode(self, stored: dict[str, Any]) -> Any:
        self._hook._next = max(self._hook._next, stored["v"]["index"] + 1)
        return stored["v"]["body"]


class AgentOp(Op[str]):
    """``ctx.agent(key=, target=, message=)``: a subagent in a conversation owned by this
    run; its answer, or :class:`SubagentFailed`."""

    kind = "agent"

    def __init__(self, ctx: WorkflowContext, key: str, target: str, message: str) -> None:
        super().__init__(ctx, key)
        self._target = target
        self._message = message
        self._conversation = owned_conversation_id(ctx.task_id, f"agent:{key}")
        self._request_id = f"wf:{ctx.task_id}:{key}"

    def params(self) -> dict[str, Any]:
        return {"target": self._target, "conversation": self._conversation}

    def begin(self, tx: Any, record: dict[str, Any]) -> None:
        from ..agent.agent import submit_in

        ctx = self._ctx
        agent = ctx._host.agent_for(self._target)
        create_conversation(tx, self._conversation, owner_task=ctx.task_id)
        submit_in(
            agent,
            tx,
            self._conversation,
            self._message,
            request_id=self._request_id,
            notify=Notify(task_id=ctx.task_id, key=seq_key(self.seq)),
            source=f"task:{ctx.task_id}",
        )

    async def poll(self, record: dict[str, Any]) -> Outcome:
        rt = self._ctx._rt
        submission = read_submission(rt, record["conversation"], self._request_id)
        if submission is not None and submission.status in ("done", "unanswered"):
            return Ready(
                {
                    "status": submission.status,
                    "answer": submission.answer,
                    "error": submission.error,
                }
            )
        state = await rt.read_signal(SUBMISSION_SETTLED, seq_key(self.seq))
        if isinstance(state, SignalExpired):
            raise WorkflowError(f"the wait for subagent {self.name!r} expired at a deadline")
        return Pending(keys=(SUBMISSION_SETTLED.key(seq_key(self.seq)),))

    async def decode(self, stored: dict[str, Any]) -> str:
        value = stored["v"]
        if value["status"] != "done":
            raise SubagentFailed(self.name, value["status"], value.get("error"))
        return str(value.get("answer") or "")


class RaceOp(Op[T | None]):
    """``ctx.race(op, timeout=)``: the op's value if it resolves before the deadline, else
    None. The op stays usable: await or race it again later (its request stays open)."""

    kind = "race"

    def __init__(
        self,
        ctx: WorkflowContext,
        ops: Sequence[Op[Any]],
        timeout: float | None,
        until: float | None,
    ) -> None:
        for op in ops:
            if not op.waits or isinstance(op, RaceOp):
                raise WorkflowError(f"only waits can race, not {op!r}")
            if op._ctx is not ctx:
                raise WorkflowError(f"{op!r} belongs to another run")
        super().__init__(ctx, "race")
        self._ops = list(ops)
        self._timeout = timeout
        self._until = until

    def params(self) -> dict[str, Any]:
        until = self._until
        if until is None and self._timeout is not None:
            until = self._ctx._rt.now() + self._timeout
        return {"of": [op.seq for op in self._ops], "until": until}

    async def poll(self, record: dict[str, Any]) -> Outcome:
        ctx, rt = self._ctx, self._ctx._rt
        for index, op in enumerate(self._ops):
            if await rt.memo(result_memo(op.seq)) is not None:
                return Ready({"winner": index})
        waiting: list[Pending] = []
        for index, op in enumerate(self._ops):
            own = await ctx._begin(op)
            outcome = await op.poll(own)
            if isinstance(outcome, Pending):
                waiting.append(outcome)
                continue
            await ctx._resolve(op, own, outcome)  # the op's own record first: it won
            return Ready({"winner": index})
        until = record.get("until")
        if until is not None and rt.now() >= until:
            return Ready({"winner": None})
        return _merge(waiting, until)

    async def decode(self, stored: dict[str, Any]) -> T | None:
        winner = stored["v"]["winner"]
        if winner is None:
            return None
        op = self._ops[winner]
        own = await self._ctx._rt.memo(result_memo(op.seq))
        return await op.decode(own)  # type: ignore[no-any-return]


def _merge(waiting: list[Pending], until: float | None) -> Pending:
    keys: dict[str, SignalKey[Any]] = {}
    bells: list[str] = []
    deadlines = [] if until is None else [until]
    for pending in waiting:
        keys.update({k.slot: k for k in pending.keys})
        bells.extend(b for b in pending.bells if b not in bells)
        if pending.until is not None:
            deadlines.append(pending.until)
    return Pending(tuple(keys.values()), tuple(bells), min(deadlines) if deadlines else None)


# --- handles -------------------------------------------------------------------------------


@dataclass
class Webhook:
    """A capability URL whose requests this run receives, in order.

    ``await hook`` (or ``await hook.next()``) is the next request's JSON body; ``async for
    body in hook`` goes on for every request. The URL stays the same for the run's whole life
    (each request goes to its own key, so none is lost); once the run ended, requests are
    refused with ``closed``."""

    _ctx: WorkflowContext = field(repr=False)
    seq: int
    url: str
    token: str = field(repr=False)
    _next: int = 0

    def next(self, *, name: str | None = None) -> NextRequestOp:
        """The next request, as an operation (race it against a deadline if you like)."""
        return NextRequestOp(self._ctx, self, name or f"webhook.{self.seq}")

    def __await__(self) -> Generator[Any, None, Any]:
        return self.next().__await__()

    def __aiter__(self) -> Webhook:
        return self

    async def __anext__(self) -> Any:
        return await self.next()


def describe(value: Any) -> str:
    """A value as notification text."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


__all__ = [
    "WAKE",
    "AgentOp",
    "AskOp",
    "MessageOp",
    "NextRequestOp",
    "Op",
    "Pending",
    "RaceOp",
    "Raise",
    "Ready",
    "RetryPolicy",
    "SleepOp",
    "StepOp",
    "WaitForOp",
    "Webhook",
    "WebhookOp",
]
