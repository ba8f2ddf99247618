"""The workflow context a body receives, and the replay of a body from its history.

A body is ``async def body(args, ctx)`` (``body(args, ctx, task)`` for lifetime ``"task"``).
Each run replays it from the top: operations recorded in the history return what they
recorded (steps never run again), the first unresolved one is evaluated, and when it cannot
resolve yet (a question unanswered, a time not reached) the body unwinds with an internal
suspension (a :class:`BaseException`, so ``except Exception`` never catches it) that the
adapter turns into a park. Local variables are simply recomputed by the replay.

While a body unwinds for a park, ``finally`` blocks run like for any exception; durable
operations called then do nothing and keep unwinding. When a parked run is cancelled, the
replay raises :class:`~bide.workflow.errors.Cancelled` at the operation it was parked at:
``finally`` blocks run with ``ctx.cancelled`` true, steps there run and are recorded, and
any later wait raises ``Cancelled`` again.

Long because: the context, its step view and the replay loop share the run's cursor and
the checks against the recorded history (kind, name, argument digest, count); split out
once the auth-in-steps work on ``get_token`` settles.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..engine.memo_pages import unshared
from ..engine.signals import SignalToken
from ..tools.redaction import SECRETS, scrub
from ..tools.redaction import register as register_secret
from ..tools.results import Sleep
from .auth import providers_of, resolved
from .errors import (
    AuthorizationRequired,
    Cancelled,
    FailureReceived,
    NonDeterminism,
    WorkflowError,
    _Suspend,
)
from .history import WAKE, has_history, op_memo, result_memo, seq_key
from .nondeterminism import fewer_operations, report_nondeterminism
from .ops import (
    AgentOp,
    AskOp,
    MessageOp,
    Op,
    Pending,
    RaceOp,
    RaceResult,
    Raise,
    Ready,
    RetryPolicy,
    SleepOp,
    StepOp,
    WaitForOp,
    WebhookOp,
)
from .ops.base import NOT_RECORDED
from .outcomes import Errored as Errored  # define and background import these here
from .outcomes import Finished as Finished
from .outcomes import Parked as Parked
from .outcomes import RunOutcome, Unwound
from .requests import AskOption, Display
from .requests import open_requests as open_requests  # where define and background look

if TYPE_CHECKING:
    from ..engine.runtime import Runtime

T = TypeVar("T")
DEFAULT_RETRY = RetryPolicy()


@dataclass
class RunHost:
    """What a run needs of the task that hosts it (the tool task or a background task)."""

    rt: Runtime
    tool: str
    call_id: str | None = None
    aborted: asyncio.Event = field(default_factory=asyncio.Event)
    agents: Mapping[str, Any] = field(default_factory=dict)
    report: Callable[[Any], None] | None = None
    """Where progress goes besides the services' ``workflow_progress`` sink."""
    messages: Callable[[Any, str, str], None] | None = None
    """Writes a parent message in a commit: ``(tx, text, delivery id)`` (background only)."""

    def agent_for(self, target: str) -> Any:
        """The agent that runs subagent ``target``."""
        found = self.agents.get(target)
        if found is None:
            raise WorkflowError(f"no subagent named {target!r} (pass agents= to the tool)")
        return found() if callable(found) and not hasattr(found, "task") else found

    def post_message(self, tx: Any, text: str, delivery: str) -> None:
        """Send a message to the parent conversation in ``tx``'s commit; ``delivery`` makes
        its request id, so sending it again is a duplicate."""
        if self.messages is None:
            raise WorkflowError("post_message needs a background task (lifetime='task')")
        self.messages(tx, text, delivery)


class StepContext:
    """What a step function receives: its name and attempt, a stable idempotency key for
    external calls, the abort event, and provider tokens (:meth:`get_token`)."""

    def __init__(self, ctx: WorkflowContext, op: StepOp, attempt: int) -> None:
        self._ctx = ctx
        self.name = op.name
        self.attempt = attempt + 1
        """1 for the first attempt."""
        self.idempotency_key = f"{ctx.task_id}:{op.seq}"
        """The same for every attempt and every rerun of this step: pass it to services."""
        self.session_id = ctx.session_id
        self.task_id = ctx.task_id
        self.aborted = asyncio.Event() if ctx.cancelled else ctx._host.aborted
        """Set once the run is aborted (never during cleanup: cleanup is not cut short)."""
        self._tokens: list[str] = []  # also those too short to register for redaction

    def now(self) -> float:
        """The harness clock (steps may read it; the body should not)."""
        return self._ctx._rt.now()

    async def get_token(self, provider: str) -> str:
        """The session identity's token for ``provider``. Without one the attempt ends and
        the run parks on an authorization request; the step is retried after sign-in."""
        port = providers_of(self._ctx._rt.services)
        token = await resolved(port.get_token(self.session_id, provider))
        if not token:
            raise AuthorizationRequired(provider)
        self._tokens.append(str(token))
        register_secret(str(token))  # scrubbed from whatever this process records or logs
        return str(token)

    async def require_auth(self, provider: str) -> NoReturn:
        """The provider rejected the token: sign in again, then the step is retried."""
        raise AuthorizationRequired(provider, rejected=True)

    def _refuse(self, value: Any) -> str | None:
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return scrub(f"step {self.name!r} returned a value that is not JSON: {exc}")
        # Any registered token in any encoding scrub() knows, and this step's own as they are.
        if SECRETS.leaks_value(value) or any(token in text for token in self._tokens):
            return f"step {self.name!r} returned a provider token; tokens never enter the history"
        return None


class TaskHandle:
    """The ``task`` argument of a background workflow body."""

    def __init__(self, ctx: WorkflowContext) -> None:
        self._ctx = ctx

    @property
    def task_id(self) -> str:
        """The background task's id (what the model's receipt named)."""
        return self._ctx.task_id

    def post_message(self, text: str) -> MessageOp:
        """Await it to wake the parent conversation with ``text``, attributed to this task
        (delivered once: deduplicated by a delivery id; queued while the parent is busy)."""
        if not isinstance(text, str) or not text:
            raise WorkflowError("a message must be a non-empty string")
        return MessageOp(self._ctx, text)


class WorkflowContext:
    """What a workflow body receives: durable operations (await them), progress, and
    identity. Operations take their position in the history when created."""

    def __init__(self, host: RunHost, *, cancelling: bool = False) -> None:
        self._host = host
        self._rt = host.rt
        self._cancelling = cancelling
        self._cancel_raised = False
        self._seq = 0
        self._suspended = False
        self._park: Sleep | None = None
        self._dead: BaseException | None = None
        self._nondeterminism: NonDeterminism | None = None
        self._step: StepContext | None = None
        self._replaying = has_history(host.rt)
        self._agent_keys: set[str] = set()
        self._lambda_steps: dict[str, int] = {}
        self.last_progress: Any = None
        """The last progress value this run reported (last write wins)."""

    # --- identity ----------------------------------------------------------------------------

    @property
    def task_id(self) -> str:
        """The task that runs the body (the tool call, or the background task)."""
        return self._rt.task_id

    @property
    def session_id(self) -> str:
        """The session."""
        return self._rt.session_id

    @property
    def tool_name(self) -> str:
        """The tool's name."""
        return self._host.tool

    @property
    def call_id(self) -> str | None:
        """The model's id of the call that started the run (if a model made it)."""
        return self._host.call_id

    @property
    def cancelled(self) -> bool:
        """True once the run's cancellation reached the body (clean up in ``finally``)."""
        return self._cancel_raised

    # --- operations --------------------------------------------------------------------------

    def step(
        self, fn: Callable[..., Any], *, name: str | None = None, retry: RetryPolicy | None = None
    ) -> StepOp:
        """Run ``fn`` (sync or async; taking a :class:`StepContext` or nothing) once and
        record its JSON result; retried by ``retry`` (default 3 attempts, parked backoff).

        Without ``name`` the step is named after ``fn``: its ``__name__`` for a named
        function; a lambda gets ``<enclosing function>.<lambda>#<n>``, ``n`` counting the
        lambda steps of that function in this run (renaming the enclosing function or
        reordering its lambda steps changes the names: deploy such a change only when no run
        of the old code is in flight, or pass ``name=``)."""
        if name is not None:
            return StepOp(self, fn, name, retry or DEFAULT_RETRY)
        label, legacy = self._step_name(fn)
        op = StepOp(self, fn, label, retry or DEFAULT_RETRY)
        op.aliases = legacy
        return op

    def _step_name(self, fn: Callable[..., Any]) -> tuple[str, tuple[str, ...]]:
        """A default step name, and the names versions before it recorded for the same step
        (accepted on replay, so histories recorded by them still replay)."""
        inner = getattr(fn, "func", fn)  # a functools.partial is named after its function
        base = getattr(inner, "__name__", None)
        if base is None:
            return type(inner).__name__, ("step",)
        if base != "<lambda>":
            # Versions before these names called a partial (no __name__ of its own) "step".
            return str(base), ("step",) if inner is not fn else ()
        # "outer.<locals>.body.<locals>.<lambda>" -> "body"; comprehension scopes are
        # skipped (whether they have their own scope depends on the Python version).
        parts = [
            p
            for p in str(getattr(inner, "__qualname__", base)).split(".")
            if p != "<locals>" and not (p.startswith("<") and p != "<lambda>")
        ]
        enclosing = parts[-2] if len(parts) >= 2 else ""
        stem = f"{enclosing}.<lambda>" if enclosing else "<lambda>"
        self._lambda_steps[stem] = ordinal = self._lambda_steps.get(stem, 0) + 1
        return f"{stem}#{ordinal}", ("<lambda>",)

    def sleep(
        self,
        seconds: float = 0.0,
        *,
        minutes: float = 0.0,
        hours: float = 0.0,
        days: float = 0.0,
        until: float | None = None,
        name: str = "sleep",
    ) -> SleepOp:
        """Park until ``until`` (a clock time) or for the given duration, fixed when first
        evaluated; nothing runs meanwhile."""
        total = seconds + 60 * minutes + 3600 * hours + 86400 * days
        return SleepOp(self, name, total, until)

    def wait_for(
        self,
        token: SignalToken[T],
        key: str,
        *,
        timeout: float | None = None,
        heartbeat: float | None = None,
    ) -> WaitForOp[T]:
        """The value signalled to this run's task under ``key`` (validated by ``token``);
        with ``timeout`` (seconds) :class:`~bide.workflow.errors.WaitTimeout` if none came;
        with ``heartbeat`` (seconds) :class:`~bide.workflow.errors.HeartbeatMissed` when no
        beat (``POST .../heartbeat``) came on the key for that long. Not raceable."""
        return WaitForOp(self, token, key, timeout, heartbeat)

    def ask(
        self,
        prompt: str,
        *,
        display: Display | None = None,
        options: Sequence[AskOption | Mapping[str, Any]] = (),
        allow_freeform: bool = False,
        name: str = "ask",
    ) -> AskOp:
        """Ask a person: published as an input request of the session when first awaited
        (or raced); its answer ``{option_id, text}``. Answered once; withdrawn when the run
        ends. Race it against a deadline and await it again later: the request stays open."""
        choices = [o if isinstance(o, AskOption) else AskOption.model_validate(o) for o in options]
        shown: Display = display or ("select" if choices else "text")
        return AskOp(self, prompt, shown, choices, allow_freeform, name)

    def webhook(self, *, name: str = "webhook") -> WebhookOp:
        """Mint a capability URL for this run: ``hook = await ctx.webhook()``, then
        ``await hook`` for the next request's JSON body or ``async for body in hook``."""
        return WebhookOp(self, name)

    def agent(self, *, key: str, target: str, message: str) -> AgentOp:
        """Delegate ``message`` to the subagent ``target`` in a conversation owned by this
        run; its answer. ``key`` names the call site: unique within the run."""
        if not key or key in self._agent_keys:
            raise WorkflowError(f"subagent key {key!r} must be non-empty and unique in the run")
        self._agent_keys.add(key)
        return AgentOp(self, key, target, message)

    def race(
        self, op: Op[Any], *, timeout: float | None = None, until: float | None = None
    ) -> Op[Any]:
        """``op``'s value if it resolves before the deadline (``timeout`` seconds from the
        first evaluation, or the clock time ``until``), else None. ``op`` stays usable:
        await or race it again later (see :mod:`bide.workflow.ops.race` for each kind).

        None cannot tell a timeout from a value of JSON ``null`` (a ``wait_for`` or a
        webhook request may carry one): use :meth:`first`, whose result says ``timed_out``."""
        if timeout is None and until is None:
            raise WorkflowError("a race needs timeout= or until= (or use ctx.first)")
        return RaceOp(self, [op], timeout, until, legacy=True)

    def first(
        self, *ops: Op[Any], timeout: float | None = None, until: float | None = None
    ) -> Op[RaceResult[Any]]:
        """Race waits against each other (and against an optional deadline): a
        :class:`~bide.workflow.ops.RaceResult` naming the ``winner`` (its position among
        ``ops``) and its ``value``, or ``timed_out`` when the deadline came first. Losers stay
        usable. ``result = await ctx.first(ctx.ask(...), hook.next(), timeout=3600)``."""
        if len(ops) < 2 and timeout is None and until is None:
            raise WorkflowError("ctx.first needs two operations or a deadline (timeout=/until=)")
        return RaceOp(self, ops, timeout, until)

    def progress(self, value: Any) -> None:
        """Report progress (JSON): it never wakes the parent and is never the result. Silent
        while the body replays. It goes to the session's event stream as ``progress``
        events, coalesced (:mod:`bide.engine.progress`: at most one every few seconds, the
        latest value winning, the last one always written when the run parks or ends)."""
        if self._replaying or self._suspended or self._dead is not None:
            return
        self.last_progress = value
        self._rt.progress.report(value, tool=self.tool_name, call_id=self.call_id)
        if self._host.report is not None:
            self._host.report(value)
        sink = self._rt.services.get("workflow_progress")
        if sink is not None:
            sink(self.task_id, value)

    async def get_token(self, provider: str) -> str:
        """Inside a step: the step context's :meth:`StepContext.get_token`. In the body
        itself it raises: tokens are for steps, never for the recorded history."""
        if self._step is None:
            raise WorkflowError(
                f"get_token({provider!r}) works only inside a step: "
                "pass the step context to the code that needs the token"
            )
        return await self._step.get_token(provider)

    async def require_auth(self, provider: str) -> NoReturn:
        """Inside a step: ask for a new sign-in. In the body itself it raises."""
        if self._step is None:
            raise WorkflowError(f"require_auth({provider!r}) works only inside a step")
        await self._step.require_auth(provider)

    # --- the engine --------------------------------------------------------------------------

    def _next_seq(self) -> int:
        if self._step is not None:
            raise WorkflowError("durable operations cannot run inside a step")
        self._seq += 1
        return self._seq

    def _enter_step(self, op: StepOp, attempt: int) -> StepContext:
        self._step = StepContext(self, op, attempt)
        return self._step

    def _leave_step(self) -> None:
        self._step = None

    def _usable(self) -> None:
        if self._dead is not None:
            raise self._dead
        if self._suspended:
            raise _Suspend()
        if self._nondeterminism is not None:
            raise self._nondeterminism

    def _same(self, op: Op[Any], record: dict[str, Any]) -> None:
        """Non-determinism unless ``record`` is ``op`` as first evaluated: its kind, its name
        (or a name an older version gave it) and, when the record has one, the digest of its
        arguments (records made before digests existed are not checked)."""
        same = record.get("op") == op.kind and record.get("name") == op.name
        if same and ("args" not in record or record["args"] == op.digest()):
            return  # the usual replay: the checks below, in short
        recorded = (str(record.get("op")), str(record.get("name")))
        reason = "operation"
        if recorded[0] == op.kind and (recorded[1] == op.name or recorded[1] in op.aliases):
            if "args" not in record or record["args"] == op.digest():
                return  # the same operation: the usual replay
            reason = "arguments"
        self._nondeterminism = NonDeterminism(op.seq, recorded, (op.kind, op.name), reason=reason)
        raise self._nondeterminism

    def _replayed(self, op: Op[T]) -> Any:
        """``op``'s recorded value (once checked against its record), or :data:`NOT_RECORDED`
        when its resolution is not recorded: awaiting an operation the replay passes needs no
        coroutine (``Op.__await__``; :meth:`_perform` does the rest)."""
        if self._dead is not None or self._suspended or self._nondeterminism is not None:
            self._usable()  # raises
        try:
            record, stored = self._rt.recorded_pair(op_memo(op.seq), result_memo(op.seq))
            if record is not None:
                self._same(op, record)
            if stored is None:
                return NOT_RECORDED
            return op.decode(unshared(stored))  # the body may change what it gets
        except (_Suspend, Cancelled, Exception):
            raise
        except BaseException as exc:  # the invocation is over (a crash, an abort, a close)
            self._dead = exc
            raise

    async def _perform(self, op: Op[T]) -> T:
        self._usable()
        try:
            if self._rt.recorded(result_memo(op.seq)) is not None:
                return self._replayed(op)  # type: ignore[no-any-return]
            record = self._rt.recorded(op_memo(op.seq))
            if record is not None:
                self._same(op, record)
            self._replaying = False
            if self._cancelling and (op.waits or not self._cancel_raised):
                self._cancel_raised = True
                raise Cancelled(f"cancelled at operation {op.seq} ({op.kind} {op.name!r})")
            while True:
                if record is None and op.waits:
                    record = await self._begin(op)
                record = record or op.record()
                outcome = await op.poll_parking(record)
                if not isinstance(outcome, Pending):
                    held = op.holds(outcome)
                    return op.decode(unshared(await self._resolve(op, record, outcome, held)))
                if self._cancelling:
                    raise Cancelled(f"cancelled at operation {op.seq} ({op.kind} {op.name!r})")
                parked = await self._ring(op, outcome)
                if parked is None:
                    continue  # a request was answered meanwhile: look again
                self._suspend(op, parked)
        except (_Suspend, Cancelled, Exception):
            raise
        except BaseException as exc:  # the invocation is over (a crash, an abort, a close)
            self._dead = exc
            raise

    async def _begin(self, op: Op[Any]) -> dict[str, Any]:
        """The wait's record, written with its side effects when first evaluated (a wait
        without side writes stages it for the task's next commit instead)."""
        record = self._rt.recorded(op_memo(op.seq))
        if record is not None:
            self._same(op, record)
            return record  # type: ignore[no-any-return]
        candidate = op.record()
        if type(op).begin is Op.begin:
            # No side writes: the record rides with the park (or the resolution) instead of a
            # commit of its own. Nothing reads it before then; a crash before then replays
            # the operation as if never begun, as a crash before this commit did.
            return self._rt.stage_memo(op_memo(op.seq), candidate)  # type: ignore[no-any-return]

        def write(tx: Any) -> dict[str, Any]:
            winner: dict[str, Any] = tx.memo(op_memo(op.seq), candidate)
            op.begin(tx, winner)
            return winner

        return await self._rt.write(write)

    async def _resolve(
        self, op: Op[Any], record: dict[str, Any], outcome: Ready | Raise, held: bool = False
    ) -> dict[str, Any]:
        """Record the resolution (with the record, for actions) in one commit; the winner.
        ``held`` (fixed by durable data, :meth:`Op.holds`): held for the task's next commit
        instead (``Runtime.stage_memo``), which carries it, as a step does before its code
        runs; a crash before then replays the operation, which resolves the same."""
        if held and not (isinstance(outcome, Ready) and outcome.build is not None):
            self._rt.stage_memo(op_memo(op.seq), record)
            kept = {"error": outcome.error} if isinstance(outcome, Raise) else {"v": outcome.value}
            return self._rt.stage_memo(result_memo(op.seq), kept)  # type: ignore[no-any-return]

        def write(tx: Any) -> dict[str, Any]:
            winner = tx.memo(op_memo(op.seq), record)
            if isinstance(outcome, Raise):
                stored: dict[str, Any] = {"error": outcome.error}
            elif outcome.build is not None:
                stored = {"v": outcome.build(tx, winner)}
            else:
                stored = {"v": outcome.value}
            return tx.memo(result_memo(op.seq), stored)  # type: ignore[no-any-return]

        return await self._rt.write(write)

    async def _ring(self, op: Op[Any], pending: Pending) -> Pending | None:
        """Point the documents the park waits on at a fresh doorbell key, unless one of them
        was answered meanwhile (then None: poll again). Checked and written in one commit, so
        an answer either lands before (and is seen) or rings the new key."""
        if not pending.bells:
            return pending
        index = 0
        while await self._rt.read_signal(WAKE, seq_key(op.seq, index)) is not None:
            index += 1  # consumed or expired by an earlier park: never listed again
        key = seq_key(op.seq, index)

        def write(tx: Any) -> bool:
            bodies = [(doc, tx.get_doc(doc)) for doc in pending.bells]
            if any(body is None or body.get("status") != "open" for _, body in bodies):
                return False
            for doc, body in bodies:
                if body.get("wake") != key:
                    tx.put_doc(doc, {**body, "wake": key})
            return True

        if not await self._rt.write(write):
            return None
        return replace(pending, keys=(*pending.keys, WAKE.key(key)))

    def _suspend(self, op: Op[Any], pending: Pending) -> NoReturn:
        if not pending.keys and pending.until is None:
            raise WorkflowError(f"{op!r} waits for something that can never wake it")
        self._park = Sleep(
            checkpoint={"workflow": op.seq, "op": op.kind, "name": op.name},
            until=pending.until,
            signals=pending.keys,
            heartbeat=pending.heartbeat,
            expire_on_deadline=pending.expire,
        )
        self._suspended = True
        raise _Suspend()


# --- running a body ----------------------------------------------------------------------


async def run_body(
    host: RunHost,
    body: Callable[..., Any],
    args: Any,
    *,
    with_task: bool,
    cancelling: bool = False,
) -> RunOutcome:
    """Replay ``body`` once from its history and say how the run stands. Invocation-ending
    exceptions (a crash, an abort refusal, a close) propagate."""
    ctx = WorkflowContext(host, cancelling=cancelling)
    failure: Exception | None = None
    value: Any = None
    try:
        running = body(args, ctx, TaskHandle(ctx)) if with_task else body(args, ctx)
        if not inspect.isawaitable(running):
            raise WorkflowError(
                f"the body of {host.tool!r} returned {type(running).__name__}, not an awaitable: "
                "define it as `async def body(args, ctx)` and await its operations"
            )
        value = await running
    except (_Suspend, Cancelled):
        pass
    except Exception as exc:
        failure = exc
    if ctx._dead is not None:
        raise ctx._dead
    if ctx._nondeterminism is None and not ctx._suspended and not cancelling:
        ctx._nondeterminism = fewer_operations(host.rt, ctx._seq)
    if ctx._nondeterminism is not None:
        details = await report_nondeterminism(host, ctx._nondeterminism)
        return Errored(str(ctx._nondeterminism), nondeterminism=details)
    if ctx._suspended and not cancelling:
        assert ctx._park is not None
        return Parked(ctx._park)  # even when the body swallowed the suspension
    if cancelling:
        return Unwound(None if failure is None else scrub(f"{type(failure).__name__}: {failure}"))
    if failure is not None:
        received = failure if isinstance(failure, FailureReceived) else None
        return Errored(scrub(f"{type(failure).__name__}: {failure}"), failure=received)
    return Finished(value)
