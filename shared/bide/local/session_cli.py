"""The CLI's session commands (logic kept out of :mod:`bide.cli`): ``create``, ``submit``,
``show``, ``signal``, ``fail``, ``beat``, ``answer``, ``approve``, ``hooks``, ``watch``,
``stop`` and ``cancel``, each a request or two to the sessions API about one session.
:func:`add_parsers` declares them with the CLI's ``command`` factory and :func:`commands` gives
their handlers; a handler that is refused or misused raises
:class:`~bide.local.cli_base.CommandFailed` with its exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..engine.clock import SystemClock
from . import client as api
from .cli_base import EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE, HTTP_TIMEOUT_SECONDS, CommandFailed
from .client import ApiClient, ApiResponse, path_of
from .render import hook_line, not_taken, render_session
from .watch import WatchRefused, follow

#: Makes the API client for a command's arguments: ``connect(args, timeout)``, ``None`` for the
#: default wait.
Connect = Callable[[argparse.Namespace, float | None], ApiClient]


#: The positional arguments naming one signal slot, shared by ``signal``, ``fail`` and ``beat``.
_SLOT_ARGS = (
    ("session", "the session's id"),
    ("task", "the task's id (see bide show)"),
    ("signal", "the signal's name, e.g. app.ci-result"),
    ("key", "the key, e.g. done"),
)


def add_parsers(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Declare the session commands with the CLI's ``command`` factory."""
    create = command("create", "create a session (prints its id)")
    create.add_argument("--session-id", help="the id to use (idempotent); default: a new one")

    submit = command("submit", "submit user input to a session")
    submit.add_argument("session")
    submit.add_argument("text")
    submit.add_argument("--request-id", help="idempotency key (default: a new one)")
    submit.add_argument(
        "--when-busy", choices=["follow_up", "steer", "reject"], default="follow_up"
    )

    show = command("show", "show a session: task tree, waits, tool slots, asks, transcript")
    show.add_argument("session")
    show.add_argument("--tail", type=int, default=6, help="transcript entries to show")

    sig = command("signal", "deliver a signal value to a task (IAM-authorised route)")
    sig.add_argument("session")
    sig.add_argument("task")
    sig.add_argument("signal", help="the signal's name, e.g. app.ci-result")
    sig.add_argument("key", help="the key, e.g. done")
    sig.add_argument("value", help="the value as JSON; @file reads a file, - reads stdin")

    fail = command("fail", "deliver a failure instead of a value (the signal's /failure route)")
    for name, text in _SLOT_ARGS:
        fail.add_argument(name, help=text)
    fail.add_argument("--type", required=True, help="the failure's type, e.g. BuildFailed")
    fail.add_argument("--message", required=True, help="what went wrong, for a person")
    fail.add_argument("--data", help="details as JSON; @file reads a file, - reads stdin")

    beat = command("beat", "send a heartbeat on a key (the signal's /heartbeat route)")
    for name, text in _SLOT_ARGS:
        beat.add_argument(name, help=text)

    answer = command("answer", "answer a pending ask")
    answer.add_argument("session")
    answer.add_argument("ask", help="the ask's id (see bide show)")
    answer.add_argument("text", nargs="?", default=None, help="a free-form answer")
    answer.add_argument("--option", help="the id of the chosen option")

    approve = command("approve", "decide a pending approval (approve, or --deny)")
    approve.add_argument("session")
    approve.add_argument("approval", help="the approval's id (see bide show)")
    approve.add_argument("--deny", action="store_true", help="deny instead of approving")
    approve.add_argument("--note", help="why (the call's result carries it on a denial)")
    approve.add_argument("--by", default=os.environ.get("USER"), help="who decides ($USER)")

    hooks = command("hooks", "list the webhook URLs the session's live tasks listen on")
    hooks.add_argument("session")
    hooks.add_argument("-q", "--quiet", action="store_true", help="print the URLs only")

    watch = command("watch", "follow a session: print changes until it is idle (or Ctrl-C)")
    watch.add_argument("session")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between reads")

    stop = command("stop", "stop a session's running generation")
    stop.add_argument("session")

    cancel = command("cancel", "cancel one task (and what it owns)")
    cancel.add_argument("session")
    cancel.add_argument("task")


def _send(
    args: argparse.Namespace, connect: Connect, method: str, path: str, body: Any = None
) -> ApiResponse:
    response = connect(args, None).request(method, path, body)
    if args.json:
        print(json.dumps(response.body, indent=2, sort_keys=True))
    if not response.ok:
        raise CommandFailed(
            f"{method} {path} -> HTTP {response.status}: {response.message}", EXIT_REFUSED
        )
    return response


def cmd_create(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions."""
    body = {"session_id": args.session_id} if args.session_id else {}
    response = _send(args, connect, "POST", "/sessions", body)
    if not args.json:
        found = response.body.get("session_id") if isinstance(response.body, dict) else None
        print(found or response.message)


def cmd_submit(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/inputs."""
    request_id = args.request_id or "r-" + secrets.token_hex(8)
    body = {"content": args.text, "request_id": request_id, "when_busy": args.when_busy}
    response = _send(args, connect, "POST", path_of("sessions", args.session, "inputs"), body)
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        submission = data.get("submission", data)
        status = submission.get("status", "accepted") if isinstance(submission, dict) else ""
        print(f"submission {submission.get('id', request_id)}: {status}")
    if isinstance(response.body, dict) and response.body.get("status") == "unanswered":
        # Refused (--when-busy reject while a run goes on) or ended without an answer.
        why = response.body.get("error") or "the conversation was busy (--when-busy reject)"
        raise CommandFailed(f"the submission was not taken: {why}", EXIT_REFUSED)


def cmd_show(args: argparse.Namespace, connect: Connect) -> None:
    """GET /sessions/{id} and the pages it continues on, drawn as a tree."""
    client = connect(args, None)
    view = api.session_view(client, args.session, tail=args.tail)  # api.PageRefused: exit 1
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True))
    else:
        view = view if "asks" in view else {**view, **_workflow_view(args, connect)}
        print(render_session(view, SystemClock().now(), tail=args.tail))


def _workflow_view(args: argparse.Namespace, connect: Connect) -> dict[str, Any]:
    # Pending asks and sign-ins live beside the session view (GET /sessions/{id}/workflow,
    # every page) on servers that have workflow tools; a server without that route has none.
    found = api.workflow_view(connect(args, None), args.session)  # api.PageRefused: exit 1
    return {k: found[k] for k in ("asks", "approvals", "authorizations") if k in found}


def read_value(text: str, stdin: TextIO | None = None) -> Any:
    """A JSON value from the command line: literal JSON, ``@file`` or ``-`` (stdin)."""
    source = "the value"
    if text == "-":
        text, source = (stdin or sys.stdin).read(), "stdin"
    elif text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(), str(path)
        except OSError as exc:
            raise CommandFailed(f"cannot read {path}: {exc.strerror}", EXIT_USAGE) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandFailed(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            'quote it for the shell, e.g. \'{"status": "passed"}\'',
            EXIT_USAGE,
        ) from None


def cmd_signal(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/tasks/{task}/signals/{signal}/{key}."""
    _post_to_slot(args, connect, "", read_value(args.value), "signal")


def cmd_fail(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/tasks/{task}/signals/{signal}/{key}/failure: the failure's
    ``type``, ``message`` and (``--data``) ``data`` take the key's place of a value."""
    body: dict[str, Any] = {"type": args.type, "message": args.message}
    if args.data is not None:
        body["data"] = read_value(args.data)
    _post_to_slot(args, connect, "failure", body, "fail")


def cmd_beat(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/tasks/{task}/signals/{signal}/{key}/heartbeat (no body)."""
    _post_to_slot(args, connect, "heartbeat", None, "beat")


def _post_to_slot(
    args: argparse.Namespace, connect: Connect, route: str, body: Any, command: str
) -> None:
    # One answer, three commands: print "<result> (HTTP <status>)"; anything but delivered
    # (duplicate, HTTP 200, included: nothing was stored) exits 1.
    parts = ["sessions", args.session, "tasks", args.task, "signals", args.signal, args.key]
    path = path_of(*parts, *([route] if route else []))
    response = connect(args, None).request("POST", path, body)
    if args.json:
        print(json.dumps(response.body, indent=2, sort_keys=True))
    data = response.body if isinstance(response.body, dict) else {}
    result = data.get("result")
    if not args.json:
        detail = "" if response.ok or result is None else f": {response.message}"
        errors = data.get("errors") or []
        print(f"{result or 'error'} (HTTP {response.status}){detail}")
        for error in errors if isinstance(errors, list) else []:
            print(f"  {error}")
    if not response.ok and result is None:
        raise CommandFailed(
            f"POST {path} -> HTTP {response.status}: {response.message}", EXIT_REFUSED
        )
    if result != "delivered":
        raise CommandFailed(not_taken(command, result), EXIT_REFUSED)


def cmd_answer(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/asks/{ask}/answer, when the server has that route."""
    if args.text is None and args.option is None:
        raise CommandFailed("give the answer's text, --option ID, or both", EXIT_USAGE)
    body = {k: v for k, v in {"text": args.text, "option_id": args.option}.items() if v}
    path = path_of("sessions", args.session, "asks", args.ask, "answer")
    response = connect(args, None).request("POST", path, body)
    if response.status in (404, 405) and _route_missing(response):
        raise CommandFailed(
            f"answering asks is not supported by this server ({args.url} has no route "
            f"POST /sessions/{{session_id}}/asks/{{ask_id}}/answer)",
            EXIT_REFUSED,
        )
    if args.json:
        print(json.dumps(response.body, indent=2, sort_keys=True))
    if not response.ok:
        raise CommandFailed(
            f"POST {path} -> HTTP {response.status}: {response.message}", EXIT_REFUSED
        )
    result = response.body.get("result") if isinstance(response.body, dict) else None
    if not args.json:
        print(f"{result or 'answered'} (HTTP {response.status})")
    if result != "delivered":
        raise CommandFailed(not_taken("answer", result), EXIT_REFUSED)


def cmd_approve(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/approvals/{approval}/decide."""
    body = {"approved": not args.deny, "by": args.by, "note": args.note}
    path = path_of("sessions", args.session, "approvals", args.approval, "decide")
    response = _send(args, connect, "POST", path, {k: v for k, v in body.items() if v is not None})
    result = response.body.get("result") if isinstance(response.body, dict) else None
    if not args.json:
        print(f"{'denied' if args.deny else 'approved'}: {result}")
    if result != "decided":
        raise CommandFailed(not_taken("approve", result), EXIT_REFUSED)


def cmd_hooks(args: argparse.Namespace, connect: Connect) -> None:
    """GET /sessions/{id}/hooks, every page: one URL per live webhook, with its task and
    signal key (``--json``: one JSON object a line)."""
    path = path_of("sessions", args.session, "hooks")
    pages = api.read_pages(connect(args, None), path, limit=500)  # api.PageRefused: exit 1
    hooks = [h for page in pages for h in page.get("items") or []]
    for hook in (h for h in hooks if isinstance(h, dict)):
        if args.json:
            print(json.dumps(hook, sort_keys=True))
        else:
            print(hook.get("url") if args.quiet else hook_line(hook))
    if not hooks and not args.quiet and not args.json:
        print(f"no live webhooks in session {args.session}")


def cmd_watch(args: argparse.Namespace, connect: Connect) -> None:
    """Follow a session until it is idle, Ctrl-C, or --timeout seconds."""
    if args.interval <= 0:
        raise CommandFailed("--interval must be a positive number of seconds", EXIT_USAGE)
    if args.timeout is not None and args.timeout < 0:
        raise CommandFailed("--timeout must be zero or more seconds", EXIT_USAGE)
    # Each read may take as long as the whole watch, within reason.
    bounded = args.timeout is not None
    seconds = min(HTTP_TIMEOUT_SECONDS, max(args.timeout, 5.0)) if bounded else None
    client = connect(args, seconds)

    def raw(snapshot: Any) -> None:  # --json: each changed snapshot as one line
        print(json.dumps({"view": snapshot.view, "workflow": snapshot.workflow}), flush=True)

    try:
        idle = follow(
            client,
            args.session,
            clock=SystemClock(),
            interval=args.interval,
            timeout=args.timeout,
            emit=lambda line: print(line, flush=True),
            raw=raw if args.json else None,
        )
    except WatchRefused as exc:
        raise CommandFailed(str(exc), EXIT_REFUSED) from None
    if idle and not args.json:
        print(f"session {args.session} is idle: no live task, no run going", flush=True)
    else:
        raise CommandFailed(
            f"still busy after {args.timeout:g}s (stopped watching; the session goes on)",
            EXIT_TIMEOUT,
        )


def _route_missing(response: ApiResponse) -> bool:
    # A router's generic "not found" (no route) rather than a handler's "no such ask".
    return response.status == 405 or response.message.strip().lower() in _NO_ROUTE


_NO_ROUTE = frozenset({"not found", "not found.", "route not found", "no such route"})


def cmd_stop(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/stop."""
    response = _send(args, connect, "POST", path_of("sessions", args.session, "stop"))
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        print("stopped" if data.get("stopped", True) else "nothing was running")


def cmd_cancel(args: argparse.Namespace, connect: Connect) -> None:
    """POST /sessions/{id}/tasks/{task}/cancel."""
    path = path_of("sessions", args.session, "tasks", args.task, "cancel")
    response = _send(args, connect, "POST", path)
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        print("cancelled" if data.get("cancelled", True) else "the task had already ended")


def commands(connect: Connect) -> dict[str, Callable[[argparse.Namespace], None]]:
    """The CLI's handlers of the session commands; ``connect(args, timeout)`` makes the client."""
    return {name: _bound(run, connect) for name, run in _HANDLERS.items()}


def _bound(
    run: Callable[[argparse.Namespace, Connect], None], connect: Connect
) -> Callable[[argparse.Namespace], None]:
    def handler(args: argparse.Namespace) -> None:
        run(args, connect)

    return handler


_HANDLERS: dict[str, Callable[[argparse.Namespace, Connect], None]] = {
    "create": cmd_create,
    "submit": cmd_submit,
    "show": cmd_show,
    "signal": cmd_signal,
    "fail": cmd_fail,
    "beat": cmd_beat,
    "answer": cmd_answer,
    "approve": cmd_approve,
    "hooks": cmd_hooks,
    "watch": cmd_watch,
    "stop": cmd_stop,
    "cancel": cmd_cancel,
}
