"""Per-run limits of an agent: model rounds, tool calls and tokens.

A run is one generation task (from placed input to its answer, steers and ``on_yield``
continues included). What a run has used is read from the transcript: every assistant entry
records the run that wrote it (``run``, the generation task's id), its tool calls and the
response's token usage, so the count survives a crash and a reload like the transcript does.

When a limit is reached the run ends: its submissions are settled ``unanswered`` with the
reason, an ``error`` entry with ``code: "run_limit"`` says which limit in the transcript,
and the generation fails with the same message, e.g. ``stopped: the run reached its limit of
20 model rounds``. Where each limit is checked:

* model rounds and tokens: before each model request (a run never asks the model again once
  it used ``max_model_rounds`` responses or ``max_tokens`` tokens; the response that crossed
  the token limit is kept, since its tokens are already spent);
* tool calls and tokens: when a response asks for tools. Calls that would take the run past
  ``max_tool_calls``, or arrive after the tokens ran out, are not run: each gets an error
  result saying why (so the transcript stays well-formed for the model) and the run ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

LimitName = Literal["model_rounds", "tool_calls", "tokens"]

#: The ``code`` of the transcript entry and of refused tool results when a run hits a limit.
RUN_LIMIT = "run_limit"

_UNITS: dict[LimitName, str] = {
    "model_rounds": "model rounds",
    "tool_calls": "tool calls",
    "tokens": "tokens",
}


@dataclass(frozen=True)
class RunLimits:
    """Caps on one run; None: no cap. The defaults stop a runaway loop long before it costs
    much, and are far above what a normal run uses."""

    max_model_rounds: int | None = 50
    max_tool_calls: int | None = 200
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_model_rounds", "max_tool_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"RunLimits.{name} must be a positive integer or None, not {value!r}"
                )


@dataclass(frozen=True)
class RunUsage:
    """What one run has used so far."""

    model_rounds: int = 0
    tool_calls: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class LimitReached:
    """Which limit a run reached, and the message the user sees."""

    limit: LimitName
    cap: int

    @property
    def message(self) -> str:
        """``stopped: the run reached its limit of <cap> <unit>``."""
        return f"stopped: the run reached its limit of {self.cap} {_UNITS[self.limit]}"

    def entry(self) -> dict[str, Any]:
        """The transcript entry that ends the run."""
        return {"type": "error", "text": self.message, "code": RUN_LIMIT, "limit": self.limit}


def usage(transcript: Iterable[dict[str, Any]], run: str) -> RunUsage:
    """What run ``run`` has used, from its assistant entries in ``transcript``."""
    rounds = calls = tokens = 0
    for entry in transcript:
        if entry.get("type") != "assistant" or entry.get("run") != run:
            continue
        rounds += 1
        calls += len(entry.get("tool_calls") or ())
        spent = entry.get("usage") or {}
        tokens += int(spent.get("input_tokens", 0)) + int(spent.get("output_tokens", 0))
    return RunUsage(rounds, calls, tokens)


def before_request(limits: RunLimits, used: RunUsage) -> LimitReached | None:
    """The limit that forbids asking the model again, if any."""
    if limits.max_model_rounds is not None and used.model_rounds >= limits.max_model_rounds:
        return LimitReached("model_rounds", limits.max_model_rounds)
    if limits.max_tokens is not None and used.tokens >= limits.max_tokens:
        return LimitReached("tokens", limits.max_tokens)
    return None


def before_tools(limits: RunLimits, used: RunUsage) -> LimitReached | None:
    """The limit that forbids running the tool calls of the latest response, if any;
    ``used`` includes that response."""
    if limits.max_tool_calls is not None and used.tool_calls > limits.max_tool_calls:
        return LimitReached("tool_calls", limits.max_tool_calls)
    if limits.max_tokens is not None and used.tokens >= limits.max_tokens:
        return LimitReached("tokens", limits.max_tokens)
    return None
