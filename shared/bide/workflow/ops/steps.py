"""Steps: ``ctx.step(fn, name=, retry=)`` runs ``fn`` until it succeeds (a failure is retried
by its :class:`RetryPolicy` after a park on time) and records the result once, so replay never
runs it again; a step that needs a provider sign-in parks the run until it is completed."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...tools.redaction import scrub
from ..errors import AuthorizationRequired, FatalError, StepFailed, WorkflowError
from ..history import attempt_memo, derived_id, op_memo
from ..requests import AuthorizationRequest, auth_key
from .base import Op, Outcome, Pending, Raise, Ready

if TYPE_CHECKING:
    from ..context import WorkflowContext


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


def _error(exc: BaseException, **more: Any) -> dict[str, Any]:
    # Recorded in the history and raised into the body: never with a provider token in it.
    return {"type": type(exc).__name__, "message": scrub(str(exc)), **more}


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
        # The step's code may act outside the task on what the body got from a wait whose
        # resolution is held for the next commit: commit it first (Runtime.flush_staged).
        await rt.flush_staged()
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

    def decode(self, stored: dict[str, Any]) -> Any:
        if "error" in stored:
            raise StepFailed.from_record(self.name, stored["error"])
        return stored.get("v")
