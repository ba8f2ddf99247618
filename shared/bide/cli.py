"""The ``bide`` command line (``python -m bide ...``).

``bide dev`` runs the local stack. Every other command talks HTTP to a sessions API: the local
stack (the default, ``http://127.0.0.1:8787``) or a deployed one (``--url https://...``; its
requests are signed with SigV4 using your AWS credentials). ``bide init DIR`` writes a new
project (:mod:`bide.scaffold`) and talks to nothing. ``bide smoke`` checks a deployed stack
end to end (:mod:`bide.local.smoke`).

Exit codes: 0 done; 1 the server refused the request (HTTP 4xx/5xx, or an answer saying it
was not taken: a signal, failure, beat or answer that was not ``delivered``, an approval not
``decided``, a submission left ``unanswered``; a ``bide smoke`` step failed); 2 bad usage;
3 the server could not be reached or the request could not be made; 4 ``bide watch`` reached
its ``--timeout`` before the session went idle.

This module is the entry point: the options every command takes, the commands that run the
local stack or write a project, and the mapping of failures to exit codes. The commands' work
lives in ``bide.local``: the session commands (create, submit, show, signal, fail, beat,
answer, approve, hooks, watch, stop, cancel) in :mod:`bide.local.session_cli`, the host commands in
:mod:`bide.local.host_cli`, and listing, redrive and smoke in their own modules.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .engine.errors import BideError
from .local import host_cli, listing, session_cli
from .local.cli_base import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    HTTP_TIMEOUT_SECONDS,
    CommandFailed,
)
from .local.client import DEFAULT_URL, ApiClient, ClientError, PageRefused
from .local.redrive import RedriveError, add_redrive_parser, run_redrive
from .local.serve import local_logging, serve_until_signalled
from .local.session_cli import read_value
from .local.smoke import add_smoke_parser, run_smoke
from .local.stack import LocalStackError
from .scaffold import ProjectError, create_project

__all__ = [
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TIMEOUT",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CommandFailed",
    "build_parser",
    "main",
    "read_value",
]

DEFAULT_APP = "examples.agent_app:app"


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

    session_cli.add_parsers(command)
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


# --- the API's client and the commands kept here -------------------------------------------------


def _client(args: argparse.Namespace, timeout: float | None = None) -> ApiClient:
    seconds = timeout or args.timeout or HTTP_TIMEOUT_SECONDS
    return ApiClient(args.url, sign=args.sign, region=args.region, timeout=seconds)


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


def commands() -> dict[str, Callable[[argparse.Namespace], object]]:
    """Every command's handler, by name. Made per call, so the API commands take their client
    from this module's :func:`_client` as it is at that moment (tests point it in-process)."""
    return {
        "dev": cmd_dev,
        "init": cmd_init,
        **session_cli.commands(_client),  # create, submit, show, ... (see bide.local.session_cli)
        "smoke": cmd_smoke,
        "redrive": lambda args: print(run_redrive(args)),  # see bide.local.redrive
        "sessions": lambda args: listing.run(args, _client(args)),
        **host_cli.commands(_client),  # events, deny, resolve, reject, reply
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code."""
    args = build_parser().parse_args(argv)
    try:
        commands()[args.command](args)
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
    except PageRefused as exc:  # a GET of a session or a page of one was refused
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
