"""The ``bide`` command line (``python -m bide ...``).

``bide dev`` runs the local stack. Every other command talks HTTP to a sessions API: the local
stack (the default, ``http://127.0.0.1:8787``) or a deployed one (``--url https://...``; its
requests are signed with SigV4 using your AWS credentials). ``bide init DIR`` writes a new
project (:mod:`bide.scaffold`) and talks to nothing. ``bide smoke`` checks a deployed stack
end to end (:mod:`bide.local.smoke`).

Exit codes: 0 done; 1 the server refused the request (HTTP 4xx/5xx, or an answer saying it
was not taken: a signal or answer that was not ``delivered``, an approval not ``decided``, a
submission left ``unanswered``; a ``bide smoke`` step failed); 2 bad usage; 3 the server
could not be reached or the request could not be made; 4 ``bide watch`` reached its
``--timeout`` before the session went idle.

Long because: it is the one table of every command's arguments and handler; commands with
more than a request or two keep their work in ``bide.local`` (redrive, listing, smoke).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .engine.clock import SystemClock
from .engine.errors import BideError
from .local import client as api
from .local import host_cli, listing
from .local.client import DEFAULT_URL, ApiClient, ApiResponse, ClientError, path_of
from .local.redrive import RedriveError, add_redrive_parser, run_redrive
from .local.render import hook_line, not_taken, render_session
from .local.serve import local_logging, serve_until_signalled
from .local.smoke import add_smoke_parser, run_smoke
from .local.stack import LocalStackError
from .local.watch import WatchRefused, follow
from .scaffold import ProjectError, create_project

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_TIMEOUT = 4

HTTP_TIMEOUT_SECONDS = 30.0

DEFAULT_APP = "examples.agent_app:app"


class CommandFailed(Exception):
    """Ends a command with a message on stderr and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Accepted before and after the command name. A subcommand's copies default to SUPPRESS,
    # so they never overwrite a value given before the command.
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    url = os.environ.get("BIDE_URL", DEFAULT_URL)
    parser.add_argument(
        "--url", default=default(url), help=f"the sessions API (default: $BIDE_URL or {url})"
    )
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="print the raw JSON response"
    )
    parser.add_argument(
        "--region",
        default=default(None),
        help="AWS region for SigV4 (default: from the URL, else $AWS_REGION)",
    )
    parser.add_argument(
        "--sign",
        action=argparse.BooleanOptionalAction,
        default=default(None),
        help="sign requests with SigV4 (default: for https URLs that are not 127.0.0.1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default(None),
        help=f"seconds to wait for an answer (default {HTTP_TIMEOUT_SECONDS:g}); for watch: "
        "how long to follow the session (default: until it is idle)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="bide",
        description="Durable agent sessions: run the local stack, read and drive sessions.",
        epilog="Exit codes: 0 done, 1 refused by the server, 2 bad usage, 3 unreachable, "
        "4 watch timed out.",
    )
    _common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _common(sub, suppress=True)
        return sub

    dev = commands.add_parser(
        "dev",
        help="run the local stack: API + webhooks on 127.0.0.1, worker, alarms, SQLite file",
        description="Serve the sessions API and webhooks on 127.0.0.1 with the worker and "
        "alarm clock in-process, storing everything in one SQLite file. Stop it any time: "
        "parked work survives a restart.",
    )
    dev.add_argument("--port", type=int, default=8787, help="port on 127.0.0.1 (0: any free)")
    dev.add_argument("--db", default=".bide/dev.sqlite", help="SQLite file (default %(default)s)")
    dev.add_argument(
        "--app",
        default=os.environ.get("BIDE_APP", DEFAULT_APP),
        help="module:attribute of the bide.App to serve (default: $BIDE_APP or %(default)s)",
    )
    dev.add_argument(
        "--webhook-base-url",
        default=os.environ.get("BIDE_WEBHOOK_BASE_URL"),
        help="base URL put into minted webhooks (default: the server's own URL)",
    )
    dev.add_argument("--quiet", action="store_true", help="log warnings only")
    dev.add_argument("--exact", action="store_true", help="alarms fire exactly on time, no dedup")

    init = commands.add_parser(
        "init",
        help="write a new project: an app with a tool and a task, tests, a CDK app",
        description="Write a new project into DIR (new or empty): an app module with a tool "
        "that parks on a webhook and a task that sleeps, tests for both, a demo, and a CDK "
        "app that deploys it with BideService. See the project's README.md.",
    )
    init.add_argument("directory", metavar="DIR", help="the project folder (new or empty)")
    init.add_argument(
        "--package", help="the project's Python package (default: from DIR's name, my_agent)"
    )

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
    add_smoke_parser(command)
    add_redrive_parser(command)
    listing.add_parser(command)
    host_cli.add_parsers(command)
    return parser


def cmd_init(args: argparse.Namespace) -> None:
    """Write a new project (see :mod:`bide.scaffold`)."""
    try:
        written = create_project(args.directory, package=args.package)
    except ProjectError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from None
    for path in written:
        print(f"  {Path(args.directory) / path}")
    print(f"\nA new project in {args.directory}. Next:\n  cd {args.directory}")
    print("  make demo   # the app's story, in-process\n  make test   # its tests")


# --- commands talking to the API ---------------------------------------------------------------


def _client(args: argparse.Namespace, timeout: float | None = None) -> ApiClient:
    seconds = timeout or args.timeout or HTTP_TIMEOUT_SECONDS
    return ApiClient(args.url, sign=args.sign, region=args.region, timeout=seconds)


def _send(args: argparse.Namespace, method: str, path: str, body: Any = None) -> ApiResponse:
    response = _client(args).request(method, path, body)
    if args.json:
        print(json.dumps(response.body, indent=2, sort_keys=True))
    if not response.ok:
        raise CommandFailed(
            f"{method} {path} -> HTTP {response.status}: {response.message}", EXIT_REFUSED
        )
    return response


def cmd_create(args: argparse.Namespace) -> None:
    """POST /sessions."""
    body = {"session_id": args.session_id} if args.session_id else {}
    response = _send(args, "POST", "/sessions", body)
    if not args.json:
        found = response.body.get("session_id") if isinstance(response.body, dict) else None
        print(found or response.message)


def cmd_submit(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/inputs."""
    request_id = args.request_id or "r-" + secrets.token_hex(8)
    body = {"content": args.text, "request_id": request_id, "when_busy": args.when_busy}
    response = _send(args, "POST", path_of("sessions", args.session, "inputs"), body)
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        submission = data.get("submission", data)
        status = submission.get("status", "accepted") if isinstance(submission, dict) else ""
        print(f"submission {submission.get('id', request_id)}: {status}")
    if isinstance(response.body, dict) and response.body.get("status") == "unanswered":
        # Refused (--when-busy reject while a run goes on) or ended without an answer.
        why = response.body.get("error") or "the conversation was busy (--when-busy reject)"
        raise CommandFailed(f"the submission was not taken: {why}", EXIT_REFUSED)


def cmd_show(args: argparse.Namespace) -> None:
    """GET /sessions/{id} and the pages it continues on, drawn as a tree."""
    view = api.session_view(_client(args), args.session, tail=args.tail)  # api.PageRefused: exit 1
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True))
    else:
        view = view if "asks" in view else {**view, **_workflow_view(args)}
        print(render_session(view, SystemClock().now(), tail=args.tail))


def _workflow_view(args: argparse.Namespace) -> dict[str, Any]:
    # Pending asks and sign-ins live beside the session view (GET /sessions/{id}/workflow,
    # every page) on servers that have workflow tools; a server without that route has none.
    found = api.workflow_view(_client(args), args.session)  # api.PageRefused: exit 1
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


def cmd_signal(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/tasks/{task}/signals/{signal}/{key}."""
    value = read_value(args.value)
    path = path_of("sessions", args.session, "tasks", args.task, "signals", args.signal, args.key)
    response = _client(args).request("POST", path, value)
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
    if result != "delivered":  # duplicate (HTTP 200) included: the value was not stored
        raise CommandFailed(not_taken("signal", result), EXIT_REFUSED)


def cmd_answer(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/asks/{ask}/answer, when the server has that route."""
    if args.text is None and args.option is None:
        raise CommandFailed("give the answer's text, --option ID, or both", EXIT_USAGE)
    body = {k: v for k, v in {"text": args.text, "option_id": args.option}.items() if v}
    path = path_of("sessions", args.session, "asks", args.ask, "answer")
    response = _client(args).request("POST", path, body)
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


def cmd_approve(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/approvals/{approval}/decide."""
    body = {"approved": not args.deny, "by": args.by, "note": args.note}
    path = path_of("sessions", args.session, "approvals", args.approval, "decide")
    response = _send(args, "POST", path, {k: v for k, v in body.items() if v is not None})
    result = response.body.get("result") if isinstance(response.body, dict) else None
    if not args.json:
        print(f"{'denied' if args.deny else 'approved'}: {result}")
    if result != "decided":
        raise CommandFailed(not_taken("approve", result), EXIT_REFUSED)


def cmd_hooks(args: argparse.Namespace) -> None:
    """GET /sessions/{id}/hooks, every page: one URL per live webhook, with its task and
    signal key (``--json``: one JSON object a line)."""
    path = path_of("sessions", args.session, "hooks")
    pages = api.read_pages(_client(args), path, limit=500)  # api.PageRefused: exit 1
    hooks = [h for page in pages for h in page.get("items") or []]
    for hook in (h for h in hooks if isinstance(h, dict)):
        if args.json:
            print(json.dumps(hook, sort_keys=True))
        else:
            print(hook.get("url") if args.quiet else hook_line(hook))
    if not hooks and not args.quiet and not args.json:
        print(f"no live webhooks in session {args.session}")


def cmd_watch(args: argparse.Namespace) -> None:
    """Follow a session until it is idle, Ctrl-C, or --timeout seconds."""
    if args.interval <= 0:
        raise CommandFailed("--interval must be a positive number of seconds", EXIT_USAGE)
    if args.timeout is not None and args.timeout < 0:
        raise CommandFailed("--timeout must be zero or more seconds", EXIT_USAGE)
    # Each read may take as long as the whole watch, within reason.
    bounded = args.timeout is not None
    client = _client(args, min(HTTP_TIMEOUT_SECONDS, max(args.timeout, 5.0)) if bounded else None)

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


def cmd_stop(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/stop."""
    response = _send(args, "POST", path_of("sessions", args.session, "stop"))
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        print("stopped" if data.get("stopped", True) else "nothing was running")


def cmd_cancel(args: argparse.Namespace) -> None:
    """POST /sessions/{id}/tasks/{task}/cancel."""
    response = _send(args, "POST", path_of("sessions", args.session, "tasks", args.task, "cancel"))
    if not args.json:
        data = response.body if isinstance(response.body, dict) else {}
        print("cancelled" if data.get("cancelled", True) else "the task had already ended")


# --- bide dev -------------------------------------------------------------------------------------


def cmd_smoke(args: argparse.Namespace) -> None:
    """Check a deployed stack end to end (:mod:`bide.local.smoke`); exit 1 on a failed step."""
    if not run_smoke(args, _client(args, timeout=HTTP_TIMEOUT_SECONDS)):
        raise CommandFailed("", EXIT_REFUSED)


def cmd_dev(args: argparse.Namespace) -> None:
    """Run the local stack until SIGINT/SIGTERM."""
    from .app import load_app

    local_logging(quiet=args.quiet)
    # `--app mymodule:app` should find modules in the current directory, as `python -m` does.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        app = load_app(args.app)
    except BideError as exc:
        hint = " (run from the repository root, or pass --app)" if args.app == DEFAULT_APP else ""
        raise CommandFailed(f"{exc}{hint}", EXIT_USAGE) from None
    try:
        asyncio.run(
            serve_until_signalled(
                app,
                app_name=args.app,
                db=args.db,
                port=args.port,
                webhook_base_url=args.webhook_base_url,
                exact=args.exact or os.environ.get("BIDE_DEV_EXACT") == "1",
            )
        )
    except LocalStackError as exc:
        raise CommandFailed(str(exc), EXIT_UNREACHABLE) from None


COMMANDS: dict[str, Callable[[argparse.Namespace], object]] = {
    "dev": cmd_dev,
    "init": cmd_init,
    "create": cmd_create,
    "submit": cmd_submit,
    "show": cmd_show,
    "signal": cmd_signal,
    "answer": cmd_answer,
    "approve": cmd_approve,
    "hooks": cmd_hooks,
    "watch": cmd_watch,
    "stop": cmd_stop,
    "cancel": cmd_cancel,
    "smoke": cmd_smoke,
    "redrive": lambda args: print(run_redrive(args)),  # see bide.local.redrive
    "sessions": lambda args: listing.run(args, _client(args)),
    **host_cli.commands(_client),  # events, deny, resolve, reject, reply
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code."""
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (CommandFailed, host_cli.HostCommandFailed) as exc:
        if str(exc):
            print(f"bide {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except ClientError as exc:
        print(f"bide {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except RedriveError as exc:
        print(f"bide {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except api.PageRefused as exc:  # a GET of a session or a page of one was refused
        print(f"bide {args.command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bide show ... | head`: the reader left. Point stdout at devnull so the interpreter's
        # final flush does not raise again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    return EXIT_OK
