"""The generation task: one run of an agent, from placed input to a final answer.

Checkpoints:

* ``{"phase": "request", "attempt": n}``: read the model's window of the transcript once
  (:mod:`.window`; a compaction hook may first fold old turns, :mod:`.compaction`), ask the
  model. Tool calls -> create tool tasks (owned) and wait ``all_settled`` at ``round``. A
  final answer -> ``on_yield``.
  A retryable model error parks on time (backoff), never sleeps in memory.
* ``{"phase": "round", "assistant": i, "plan": [...]}``: the batch runs (exclusive calls alone
  in order, parallel-safe ones up to 8 at a time); each tool task writes its own result
  entry. Once all ended, ``after_tools`` may start tasks (``after_tools``). A queued steer
  interrupts the round instead (:mod:`.steering`): no further call starts, the live ones were
  abort-marked by the steer, and once they ended the steer is placed and the model asked.
* ``{"phase": "after_tools", "assistant": i}``: hook tasks ended; one that completed with
  ``{"terminate": true}`` ends the run with the tool-calling answer.
* ``{"phase": "yield", "answer": i}``: ``on_yield`` tasks ended; queued user input wins,
  else the first ``{"continue": input}`` (creation order) sends the agent back to work.
* ``{"phase": "after_run", "answer": i}``: the answer stands and submissions are settled;
  waits for ``after_run`` tasks, then ends.

A run that reaches one of the agent's :class:`~.limits.RunLimits` ends there (see
:mod:`.limits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..admission import NotAdvertised
from ..constants import STOP_AT_SERVICE as _STOP_AT_SERVICE
from ..engine.state import Aborted, Completed, Failed, Running, Sleeping, Terminal, Waiting
from ..engine.tasks import TaskDefinition, TaskView, define_task
from .batch import schedule as schedule_batch
from .compaction import compact
from .conversation import (
    append_entry,
    entry_key,
    read_head,
    read_submission,
    settle,
    write_head,
)
from .hooks import Continue, StartTasks
from .limits import LimitReached, before_request, before_tools
from .providers.base import (
    ModelDeferred,
    ModelError,
    ModelResponse,
    ToolNameError,
)
from .run_end import run_ended_in
from .steering import interrupted_round, place_steers, settle_for_stop, steer_queued
from .window import Window, build_request, round_results, window, window_usage

if TYPE_CHECKING:
    from ..engine.runtime import Runtime
    from .agent import Agent

GENERATION_TASK = "bide.generation"

STOP_AT_SERVICE = _STOP_AT_SERVICE
"""The ``rt.services`` key under which a host puts the clock time its invocation stops
starting work (a Lambda worker: the deadline less its safety margin). A model request is then
told how long it may take (:attr:`~.providers.base.ModelRequest.time_limit`)."""


def generation_task(agent: Agent) -> TaskDefinition:
    """The task kind that runs ``agent``'s generations."""

    async def request(task: TaskView, rt: Any) -> None:
        await _request(agent, task, rt)

    async def round_(task: TaskView, rt: Any) -> None:
        await _round(agent, task, rt)

    async def after_tools(task: TaskView, rt: Any) -> None:
        await _after_tools(agent, task, rt)

    async def yield_(task: TaskView, rt: Any) -> None:
        await _yield(agent, task, rt)

    async def after_run(task: TaskView, rt: Any) -> None:
        await rt.commit(Terminal(outcome=Completed(result=task.checkpoint.get("result"))))

    async def abort(task: TaskView, rt: Any) -> None:
        await _aborted(agent, task, rt)

    return define_task(
        GENERATION_TASK,
        1,
        lambda _input: {"phase": "request", "attempt": 0},
        {
            "request": request,
            "round": round_,
            "after_tools": after_tools,
            "yield": yield_,
            "after_run": after_run,
        },
        abort=abort,
    )


async def _request(agent: Agent, task: TaskView, rt: Runtime) -> None:
    cid = task.input["conversation"]
    attempt = int(task.checkpoint.get("attempt", 0))
    view = window(rt, cid)  # the one read of the transcript for this request
    reached = before_request(agent.limits, window_usage(view, task.id))
    if reached is not None:
        await rt.commit(lambda tx: _stopped_in(agent, tx, cid, reached.message, reached.entry()))
        return
    try:
        agent.check_tool_names()
    except ToolNameError as exc:  # a tool added since the agent was defined
        await _end_with_error(agent, rt, cid, f"{type(exc).__name__}: {exc}")
        return
    compaction = next((h.compact for h in agent.hooks if h.compact is not None), None)
    if compaction is not None:
        view = await compact(compaction, rt, cid, task.id, view)
    request = build_request(agent, rt, cid, view)
    stop_at = rt.services.get(STOP_AT_SERVICE)
    if isinstance(stop_at, int | float):
        request = request.model_copy(update={"time_limit": max(0.0, stop_at - rt.now())})
    try:
        response = await agent.provider.complete(request)
    except ModelDeferred:
        # Too little of this invocation is left: park until it stops starting work, so the
        # next invocation asks with its full time. Not a failed attempt.
        until = stop_at if isinstance(stop_at, int | float) else rt.now() + agent.backoff_base
        checkpoint = {"phase": "request", "attempt": attempt}
        await rt.commit(Sleeping(checkpoint=checkpoint, until=max(until, rt.now())))
        return
    except ModelError as exc:
        if exc.retryable and attempt + 1 < agent.max_attempts:
            delay = min(agent.backoff_cap, agent.backoff_base * 2**attempt)
            checkpoint = {"phase": "request", "attempt": attempt + 1}
            await rt.commit(Sleeping(checkpoint=checkpoint, until=rt.now() + delay))
            return
        await _end_with_error(agent, rt, cid, f"{exc.code}: {exc}")
        return
    if response.tool_calls:
        await _start_round(agent, task, rt, cid, response, view)
        return
    await _answer(agent, task, rt, cid, response)


async def _start_round(
    agent: Agent,
    task: TaskView,
    rt: Runtime,
    cid: str,
    response: ModelResponse,
    view: Window,
) -> None:
    """Record the answer with its calls and plan the batch. Calls to names this request did
    not advertise get an error result at once and never reach an operation. Calls past the
    run's limits are not run at all: each gets an error result, and the run ends."""
    entry = _assistant_entry(response, task.id)
    reached = before_tools(agent.limits, window_usage(view, task.id, [entry]))
    if reached is not None:
        await rt.commit(lambda tx: _refused_round(agent, tx, cid, entry, reached))
        return
    plan: list[dict[str, Any]] = []
    refused: list[tuple[str, str]] = []
    catalog = agent.admission.catalog(agent.model_family) if agent.admission is not None else None
    for call in response.tool_calls:
        if catalog is None:
            tool = agent.tools.get(call.name)
            mode = tool.concurrency if tool is not None else "exclusive"
            plan.append(_planned(call.id, call.name, call.arguments, None, None, mode))
            continue
        try:
            resolved = catalog.resolve(call.name)
        except NotAdvertised as exc:
            refused.append((call.id, str(exc)))
            continue
        arguments = resolved.presentation.adapt_arguments(dict(call.arguments))
        mode = resolved.operation.tool.concurrency
        plan.append(
            _planned(call.id, resolved.identity, arguments, call.name, resolved.variant, mode)
        )

    def build(tx: Any) -> Running:
        index = append_entry(tx, cid, entry)
        head = read_head(tx, cid)
        # What a steer interrupts (bide.agent.steering), in the commit that plans the round.
        write_head(tx, head.model_copy(update={"round_calls": [c["call_id"] for c in plan]}))
        for call_id, why in refused:
            result = {
                "type": "tool_result",
                "call_id": call_id,
                "name": None,
                "text": why,
                "is_error": True,
                "code": "tool_unavailable",
            }
            append_entry(tx, cid, result)
        return Running(checkpoint={"phase": "round", "assistant": index, "plan": plan})

    await rt.commit(build)


def _planned(
    call_id: str, name: str, arguments: dict[str, Any], exposed: Any, variant: Any, mode: str
) -> dict[str, Any]:
    return dict(
        call_id=call_id, name=name, arguments=arguments, exposed=exposed, variant=variant, mode=mode
    )


def _assistant_entry(response: ModelResponse, run: str) -> dict[str, Any]:
    return {
        "type": "assistant",
        "text": response.text,
        "tool_calls": [c.model_dump(mode="json") for c in response.tool_calls],
        "stop_reason": response.stop_reason,
        # What the run limits count (bide.agent.limits).
        "run": run,
        "usage": response.usage.model_dump(mode="json"),
    }


def _refused_round(
    agent: Agent, tx: Any, cid: str, entry: dict[str, Any], reached: LimitReached
) -> Terminal:
    """The response that asked for tools past a limit, an error result for each of its
    calls (none runs), and the end of the run."""
    append_entry(tx, cid, entry)
    for call in entry["tool_calls"]:
        result = {
            "call_id": call["id"],
            "name": call["name"],
            "text": f"not run: {reached.message}",
        }
        append_entry(
            tx, cid, {"type": "tool_result", **result, "is_error": True, "code": "run_limit"}
        )
    return _stopped_in(agent, tx, cid, reached.message, reached.entry())


async def _answer(
    agent: Agent, task: TaskView, rt: Runtime, cid: str, response: ModelResponse
) -> None:
    entry = _assistant_entry(response, task.id)
    decision: Continue | StartTasks | None = None
    for hooks in agent.hooks:
        if hooks.on_yield is not None:
            decision = await hooks.on_yield(entry, rt)
            if decision is not None:
                break
    after_run = await _after_run_tasks(agent, rt, entry)

    # One commit: the answer entry together with what follows from it, so a crash can never
    # leave an answer recorded while the run still looks unanswered.
    def build(tx: Any) -> Any:
        index = append_entry(tx, cid, entry)
        if place_steers(tx, cid):
            return Running(checkpoint={"phase": "request", "attempt": 0})
        if isinstance(decision, Continue):
            append_entry(tx, cid, {"type": "user", "text": decision.input, "source": "on_yield"})
            return Running(checkpoint={"phase": "request", "attempt": 0})
        if isinstance(decision, StartTasks) and decision.tasks:
            ids = [
                tx.create_task(h.task, h.input, key=f"yield:{index}:{n}")
                for n, h in enumerate(decision.tasks)
            ]
            return Waiting(checkpoint={"phase": "yield", "answer": index}, on=tuple(ids))
        return _finish_in(agent, tx, cid, index, after_run)

    await rt.commit(build)


async def _round(agent: Agent, task: TaskView, rt: Runtime) -> None:
    cid = task.input["conversation"]
    index = task.checkpoint["assistant"]
    plan = task.checkpoint.get("plan", [])
    waiting: list[Waiting | Running | None] = []

    def schedule(tx: Any) -> Waiting | Running | None:
        waiting.clear()
        if steer_queued(tx, cid):
            waiting.append(
                interrupted_round(tx, cid, task.checkpoint, plan) or _request_next(tx, cid)
            )
        else:
            waiting.append(schedule_batch(agent, tx, cid, plan))
        return waiting[0]

    await rt.commit(schedule)
    if waiting[0] is not None:
        return  # the batch parks as a whole until its next call ends (or a steer took over)
    assistant = rt.get_doc(entry_key(cid, index))
    results = round_results(rt, cid, index)
    for hooks in agent.hooks:
        if hooks.after_tools is None:
            continue
        answer = await hooks.after_tools(assistant, results, rt)
        if isinstance(answer, StartTasks) and answer.tasks:
            tasks = answer.tasks

            def start(tx: Any, tasks: Any = tasks) -> Waiting:
                ids = [
                    tx.create_task(h.task, h.input, key=f"after_tools:{index}:{n}")
                    for n, h in enumerate(tasks)
                ]
                return Waiting(
                    checkpoint={"phase": "after_tools", "assistant": index}, on=tuple(ids)
                )

            await rt.commit(start)
            return
    await _next_request(rt, cid)


def _request_next(tx: Any, cid: str) -> Running:
    """The round is over: place queued steers and ask the model again."""
    head = read_head(tx, cid)
    write_head(tx, head.model_copy(update={"round_calls": []}))
    place_steers(tx, cid)
    return Running(checkpoint={"phase": "request", "attempt": 0})


async def _next_request(rt: Runtime, cid: str) -> None:
    await rt.commit(lambda tx: _request_next(tx, cid))


async def _after_tools(agent: Agent, task: TaskView, rt: Runtime) -> None:
    cid = task.input["conversation"]
    for task_id in task.wake.ended if task.wake is not None and task.wake.reason == "tasks" else ():
        outcome = await rt.outcome(task_id)
        result = getattr(outcome, "result", None)
        if isinstance(result, dict) and result.get("terminate"):
            await _finish(agent, rt, cid, answer_index=task.checkpoint["assistant"])
            return
    await _next_request(rt, cid)


async def _yield(agent: Agent, task: TaskView, rt: Runtime) -> None:
    cid = task.input["conversation"]
    index = task.checkpoint["answer"]
    continue_with: str | None = None
    for task_id in task.wake.ended if task.wake is not None and task.wake.reason == "tasks" else ():
        outcome = await rt.outcome(task_id)
        result = getattr(outcome, "result", None)
        if isinstance(result, dict) and isinstance(result.get("continue"), str):
            continue_with = result["continue"]
            break

    answer = rt.get_doc(entry_key(cid, index)) or {}
    after_run = await _after_run_tasks(agent, rt, answer)

    def build(tx: Any) -> Any:
        if place_steers(tx, cid):  # a user's message wins over a hook's continue
            return Running(checkpoint={"phase": "request", "attempt": 0})
        if continue_with is not None:
            append_entry(tx, cid, {"type": "user", "text": continue_with, "source": "on_yield"})
            return Running(checkpoint={"phase": "request", "attempt": 0})
        return _finish_in(agent, tx, cid, index, after_run)

    await rt.commit(build)


async def _after_run_tasks(agent: Agent, rt: Runtime, answer: dict[str, Any]) -> list[Any]:
    started: list[Any] = []
    for hooks in agent.hooks:
        if hooks.after_run is not None:
            decision = await hooks.after_run(answer, rt)
            if isinstance(decision, StartTasks):
                started.extend(decision.tasks)
    return started


async def _finish(agent: Agent, rt: Runtime, cid: str, *, answer_index: int) -> None:
    """The answer (already in the transcript) stands."""
    answer = rt.get_doc(entry_key(cid, answer_index)) or {}
    started = await _after_run_tasks(agent, rt, answer)
    await rt.commit(lambda tx: _finish_in(agent, tx, cid, answer_index, started))


def _finish_in(agent: Agent, tx: Any, cid: str, answer_index: int, started: list[Any]) -> Any:
    """Settle the run's submissions (delivering their notify signals), start queued
    follow-ups, and start ``after_run`` tasks; the generation's next state."""
    answer = tx.get_doc(entry_key(cid, answer_index)) or {}
    result = {"answer": answer.get("text", ""), "answer_entry": answer_index}
    head = read_head(tx, cid)
    for rid in head.run_submissions:
        sub = read_submission(tx, cid, rid)
        if sub is not None:
            settle(tx, sub, "done", answer=result["answer"], answer_entry=answer_index)
    run_ended_in(tx, cid, tx.task_id, "done", answer=result["answer"])
    _release(agent, tx, cid)
    if started:
        ids = [
            tx.create_task(h.task, h.input, key=f"after_run:{answer_index}:{n}")
            for n, h in enumerate(started)
        ]
        return Waiting(checkpoint={"phase": "after_run", "result": result}, on=tuple(ids))
    return Terminal(outcome=Completed(result=result))


def _release(agent: Agent, tx: Any, cid: str) -> None:
    """The run is over: free the conversation and start the next queued input, if any."""
    from .agent import start_run

    head = read_head(tx, cid)
    head = head.model_copy(update={"run": None, "run_submissions": [], "round_calls": []})
    write_head(tx, head)
    if head.queue:
        first, *rest = head.queue
        write_head(tx, head.model_copy(update={"queue": rest}))
        sub = read_submission(tx, cid, first)
        if sub is not None:
            start_run(agent, tx, cid, sub)


async def _end_with_error(agent: Agent, rt: Runtime, cid: str, error: str) -> None:
    await rt.commit(lambda tx: _stopped_in(agent, tx, cid, error, {"type": "error", "text": error}))


def _stopped_in(agent: Agent, tx: Any, cid: str, error: str, entry: dict[str, Any]) -> Terminal:
    """End the run without an answer: its submissions are settled ``unanswered`` with
    ``error``, ``entry`` closes the transcript, and the next queued input starts."""
    head = read_head(tx, cid)
    for rid in head.run_submissions:
        sub = read_submission(tx, cid, rid)
        if sub is not None:
            settle(tx, sub, "unanswered", error=error)
    append_entry(tx, cid, entry)
    run_ended_in(tx, cid, tx.task_id, "failed", error=error)
    _release(agent, tx, cid)
    return Terminal(outcome=Failed(error=error))


async def _aborted(agent: Agent, task: TaskView, rt: Runtime) -> None:
    cid = task.input["conversation"]
    reason = task.abort_reason or "stopped"

    def build(tx: Any) -> Terminal:
        head = read_head(tx, cid)
        if head.run == task.id:
            run_ended_in(tx, cid, task.id, "stopped", error=reason)
            steers = settle_for_stop(tx, head, reason)
            write_head(
                tx,
                head.model_copy(
                    update={"run": None, "run_submissions": [], "queue": steers, "round_calls": []}
                ),
            )
            _release(agent, tx, cid)  # the first steer starts the next run, the rest join it
            if steers:
                place_steers(tx, cid)
        return Terminal(outcome=Aborted(reason=reason))

    await rt.commit(build)
