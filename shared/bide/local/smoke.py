"""``bide smoke --url URL``: check a deployed stack end to end, step by step.

One smoke session runs the deployed app's ``bide_smoke`` tool (:mod:`bide.service.smoke`)
twice, through every part of the deployed path:

1. create a session (``POST /sessions``, SigV4-signed: the API function, IAM auth);
2. submit a smoke prompt (the API function queues a wake);
3. the worker runs the session and the tool mints a webhook (the wake queue, its event
   source mapping, the worker, the webhook key); the call parks on it with an alarm;
4. post to the webhook, unsigned (the signal function, the ``/hooks/{token}`` route);
5. the call resumes with the posted value (the signal function's wake, the worker);
6. submit a second prompt whose call nobody answers;
7. its alarm wakes the session: EventBridge Scheduler delivers to the wake queue. Scheduler
   fires a schedule within the minute it names, so this takes ``alarm_seconds`` plus up to
   about two minutes (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html).

Each step prints ``PASS`` or ``FAIL`` with what to check next. Time, waiting and the HTTP
transport are injected: the tests run the real handlers on the strict AWS twin in simulated
time behind 127.0.0.1 (``tests/test_smoke.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlencode

from ..engine.clock import SystemClock
from ..service.smoke import ALARM_FIRED, MAX_WAIT_SECONDS, SMOKE_PROMPT, WEBHOOK_DELIVERED
from .client import ApiClient, ApiResponse, ClientError, PreparedRequest, path_of

__all__ = [
    "DEFAULT_ALARM_SECONDS",
    "DEFAULT_POLL_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_WAIT_SECONDS",
    "Smoke",
    "StepFailed",
    "Transport",
    "add_smoke_parser",
    "run_smoke",
]

Transport = Callable[[PreparedRequest], Awaitable[ApiResponse]]

SMOKE_SIGNAL_NAME = "bide.smoke-ping"
DEFAULT_TIMEOUT_SECONDS = 600.0
DEFAULT_ALARM_SECONDS = 60
DEFAULT_POLL_SECONDS = 5.0
# A smoke session listens on a handful of webhooks; a listing longer than this is not ours.
MAX_HOOK_PAGES = 10
#: How late an alarm may be: Scheduler's one-minute precision, a flexible window of none, a
#: batch of the worker, and the time to read the answer.
ALARM_SLACK_SECONDS = 180.0

NEXT = {
    "create": "check that --url is the stack's ApiUrl output, that your credentials may call "
    "execute-api:Invoke on it (a 403 says they may not), and the api function's log group",
    "submit": "check the api function's log group; a 4xx names the refused field",
    "webhook": "no worker run minted the webhook: check that the worker's event source mapping "
    "on the wake queue exists and is Enabled, the worker's log group, the WakeDeadLetters "
    "queue, and that the app registers bide.service.smoke's SMOKE_TOOL and SMOKE_SIGNAL",
    "post": "check the signal function's log group and the POST /hooks/{token} route "
    "(a 404 means the token did not verify: the WebhookKey secret)",
    "resume": "the webhook was taken but the session did not run again: check the signal "
    "function's sqs:SendMessage on the wake queue, the event source mapping, the worker's log "
    "group and the WakeDeadLetters queue",
    "alarm": "the alarm did not wake the session: check the schedule group's schedules, that "
    "the Scheduler role may sqs:SendMessage to the wake queue (the schedules' target), the "
    "ScheduleDeadLetters queue and the ScheduleTargetErrorsAlarm",
}

WRONG_TOOL = (
    "the model did not call bide_smoke: the deployed app must register bide.service.smoke's "
    "SMOKE_TOOL and SMOKE_SIGNAL, and its model call the tool on a 'bide smoke' prompt (a "
    "scripted model: bide.service.smoke.smoke_reply; BIDE_MODEL_PROVIDER=scripted)"
)


class StepFailed(Exception):
    """A smoke step failed: why, and what to check next."""

    def __init__(self, reason: str, next_check: str) -> None:
        super().__init__(reason)
        self.next_check = next_check


@dataclass
class Smoke:
    """One smoke run against ``client``'s API. ``transport`` sends a prepared request
    (default: ``client.send`` in a thread); ``sleep`` and ``now`` are the run's time."""

    client: ApiClient
    transport: Transport | None = None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    now: Callable[[], float] = field(default_factory=lambda: SystemClock().now)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    alarm_seconds: int = DEFAULT_ALARM_SECONDS
    poll_seconds: float = DEFAULT_POLL_SECONDS
    out: TextIO | None = None

    async def run(self) -> bool:
        """Every step in order; stops at the first failure. True when all passed."""
        self._started = self.now()
        self._deadline = self._started + self.timeout
        steps: list[tuple[str, str, Callable[[], Awaitable[str]]]] = [
            ("create", "create a session", self._create),
            ("submit", "submit the webhook prompt", lambda: self._submit("webhook")),
            ("webhook", "the worker runs the session and mints a webhook", self._webhook),
            ("post", "post to the webhook (unsigned)", self._post),
            ("resume", "the session resumes with the posted value", self._resume),
            ("submit", "submit the alarm prompt", lambda: self._submit("alarm")),
            ("alarm", f"a {self.alarm_seconds}s alarm wakes the session", self._alarm),
        ]
        for number, (kind, title, step) in enumerate(steps, 1):
            began = self.now()
            try:
                detail = await step()
            except (StepFailed, ClientError) as exc:
                check = exc.next_check if isinstance(exc, StepFailed) else NEXT[kind]
                self._print(f"FAIL  {number}/{len(steps)} {title}: {exc}")
                self._print(f"      next: {check}")
                self._print(f"smoke FAILED at step {number} of {len(steps)}")
                return False
            self._print(f"PASS  {number}/{len(steps)} {title} ({self.now() - began:.1f}s) {detail}")
        self._print(f"smoke passed in {self.now() - self._started:.1f}s")
        return True

    # --- steps --------------------------------------------------------------------------------

    async def _create(self) -> str:
        found = await self._call("create", "POST", "/sessions", {})
        self.session_id = str(found.body["session_id"])
        return f"session {self.session_id}"

    async def _submit(self, why: str) -> str:
        seconds = self.alarm_seconds if why == "alarm" else MAX_WAIT_SECONDS
        content = SMOKE_PROMPT.format(seconds=seconds, why=why)
        self.request_id = f"smoke-{why}-{secrets.token_hex(6)}"
        body = {"content": content, "request_id": self.request_id}
        await self._call("submit", "POST", path_of("sessions", self.session_id, "inputs"), body)
        return f"request {self.request_id}"

    async def _webhook(self) -> str:
        async def minted() -> str | None:
            others = []
            for hook in await self._hooks():
                if hook.get("signal") == SMOKE_SIGNAL_NAME:
                    return str(hook["url"])
                others.append(f"{hook.get('tool') or 'a task'} ({hook.get('signal')})")
            if others:
                raise StepFailed(
                    f"the session parked on another webhook: {', '.join(others)}", WRONG_TOOL
                )
            await self._settled_elsewhere("webhook")
            return None

        self.hook_url = await self._until("webhook", minted, "no webhook was minted")
        return "webhook minted"

    async def _hooks(self) -> list[dict[str, Any]]:
        """Every webhook the session listens on: ``GET /sessions/{id}/hooks`` is paged
        (``items``, ``next``, ``more``); follow the pages (a smoke session has a handful)."""
        hooks: list[dict[str, Any]] = []
        path = path_of("sessions", self.session_id, "hooks")
        for _ in range(MAX_HOOK_PAGES):
            found = await self._call("webhook", "GET", path)
            hooks += [h for h in found.body.get("items", []) if isinstance(h, dict)]
            cursor = found.body.get("next")
            if not found.body.get("more") or not cursor:
                break
            path = (
                path_of("sessions", self.session_id, "hooks") + "?" + urlencode({"cursor": cursor})
            )
        return hooks

    async def _post(self) -> str:
        self.ping = secrets.token_hex(8)
        body = json.dumps({"ping": self.ping}).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "bide-smoke"}
        prepared = PreparedRequest("POST", self.hook_url, headers, body)  # unsigned
        response = await self._send(prepared)
        if not response.ok:
            raise StepFailed(f"HTTP {response.status}: {response.message}", NEXT["post"])
        return f"HTTP {response.status}"

    async def _resume(self) -> str:
        expected = f"{WEBHOOK_DELIVERED}: {self.ping}"
        answer = await self._until("resume", lambda: self._answer("resume"), "no answer")
        if expected not in answer:
            raise StepFailed(f"the session answered {answer!r}, not {expected!r}", NEXT["resume"])
        return "answered with the posted value"

    async def _alarm(self) -> str:
        needed = self.alarm_seconds + ALARM_SLACK_SECONDS
        if self._deadline - self.now() < needed:
            self._deadline = self.now() + needed  # an alarm cannot be checked faster
        answer = await self._until("alarm", lambda: self._answer("alarm"), "no answer")
        if ALARM_FIRED not in answer:
            raise StepFailed(f"the session answered {answer!r}, not {ALARM_FIRED!r}", NEXT["alarm"])
        return "answered after the alarm"

    # --- helpers ------------------------------------------------------------------------------

    async def _answer(self, kind: str) -> str | None:
        submission = await self._submission(kind)
        if submission is None or submission.get("status") in ("queued", "placed"):
            return None
        if submission.get("status") != "done":
            reason = submission.get("error") or submission.get("status")
            raise StepFailed(f"the smoke submission ended {reason!r}", NEXT[kind])
        return str(submission.get("answer") or "")

    async def _settled_elsewhere(self, kind: str) -> None:
        # A finished submission without a webhook: the model never called the smoke tool.
        submission = await self._submission(kind)
        if submission is not None and submission.get("status") not in ("queued", "placed"):
            raise StepFailed(
                f"the session answered without calling bide_smoke: {submission.get('answer')!r}",
                WRONG_TOOL,
            )

    async def _submission(self, kind: str) -> dict[str, Any] | None:
        path = path_of("sessions", self.session_id, "submissions")
        found = await self._call(kind, "GET", path + "?limit=100")
        for item in found.body.get("items", []):
            if item.get("id") == self.request_id:
                return dict(item)
        return None

    async def _until(
        self, kind: str, probe: Callable[[], Awaitable[str | None]], missing: str
    ) -> str:
        while True:
            found = await probe()
            if found is not None:
                return found
            if self.now() >= self._deadline:
                waited = self.now() - self._started
                raise StepFailed(f"{missing} after {waited:.0f}s (--timeout)", NEXT[kind])
            await self.sleep(self.poll_seconds)

    async def _call(self, kind: str, method: str, path: str, body: Any = None) -> ApiResponse:
        response = await self._send(self.client.prepare(method, path, body))
        if not response.ok:
            raise StepFailed(
                f"{method} {path}: HTTP {response.status}: {response.message}", NEXT[kind]
            )
        if not isinstance(response.body, dict):
            raise StepFailed(
                f"{method} {path}: not a JSON object: {response.raw[:200]!r}", NEXT[kind]
            )
        return response

    async def _send(self, prepared: PreparedRequest) -> ApiResponse:
        if self.transport is not None:
            return await self.transport(prepared)
        return await asyncio.to_thread(self.client.send, prepared)

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)


# --- the command ---------------------------------------------------------------------------------


def _alarm_seconds(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_WAIT_SECONDS} seconds, not {text!r}")
    return int(text)


def add_smoke_parser(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """``bide smoke`` (``command`` adds a subcommand with the common options)."""
    smoke = command(
        "smoke",
        "check a deployed stack end to end: a session, a webhook, a short alarm "
        f"(--timeout: how long to wait in all, default {DEFAULT_TIMEOUT_SECONDS:g} s)",
    )
    smoke.add_argument(
        "--alarm-seconds",
        type=_alarm_seconds,
        default=DEFAULT_ALARM_SECONDS,
        help="the alarm step's wait (default %(default)s; Scheduler adds up to ~2 minutes)",
    )
    smoke.add_argument(
        "--poll", type=float, default=DEFAULT_POLL_SECONDS, help="seconds between reads"
    )


def run_smoke(args: argparse.Namespace, client: ApiClient) -> bool:
    """Run ``bide smoke`` with the parsed ``args``; True when every step passed."""
    smoke = Smoke(
        client,
        timeout=args.timeout or DEFAULT_TIMEOUT_SECONDS,
        alarm_seconds=args.alarm_seconds,
        poll_seconds=args.poll,
    )
    return asyncio.run(smoke.run())
