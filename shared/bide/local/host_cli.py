"""The CLI's host commands (logic kept out of :mod:`bide.cli`): ``bide events`` reads or
follows a session's event stream by long poll (it works the same on AWS and the local
stack; a question's line ends with the ``bide answer`` command that answers it), ``bide
deny`` denies an approval, ``bide resolve`` and ``bide reject`` end a promise, ``bide
reply`` delivers a bound receiver's reply."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from .client import ApiClient, ApiResponse, path_of, read_page

#: The API's longest long poll (bide.service.host.MAX_WAIT_SECONDS).
MAX_WAIT_SECONDS = 20


class HostCommandFailed(Exception):
    """The server refused the command (exit ``code``: 1); the message says why."""

    code = 1


def add_parsers(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Declare the host commands with the CLI's ``command`` factory."""
    events = command(
        "events", "print a session's events (runs ended, approvals, promises, questions, progress)"
    )
    events.add_argument("session")
    events.add_argument("--cursor", help="read after this cursor (a printed `next`)")
    events.add_argument(
        "--wait", type=_wait, default=0, help=f"seconds to wait for one, 0 to {MAX_WAIT_SECONDS}"
    )
    events.add_argument("--follow", action="store_true", help="keep waiting for more")
    events.add_argument("--count", type=int, help="stop after this many events")

    deny = command("deny", "deny a pending approval (same as approve --deny)")
    deny.add_argument("session")
    deny.add_argument("approval", help="the approval's id (see bide show or bide events)")
    deny.add_argument("--note", help="why (the call's result carries it)")
    deny.add_argument("--by", help="who decides")

    resolve = command("resolve", "resolve a promise with a value")
    resolve.add_argument("session")
    resolve.add_argument("promise")
    resolve.add_argument("value", help="the value as JSON (a bare word is taken as a string)")

    reject = command("reject", "reject a promise with an error")
    reject.add_argument("session")
    reject.add_argument("promise")
    reject.add_argument("error", help="why it failed")
    reject.add_argument("--type", help="the error's type (default Rejected)")
    reject.add_argument("--data", help="details as JSON (a bare word is taken as a string)")

    reply = command("reply", "deliver a bound receiver's reply for one completion key")
    reply.add_argument("session")
    reply.add_argument("invocation")
    reply.add_argument("key", help="the completion key")
    reply.add_argument("--producer", required=True, help="the invocation's producer")
    reply.add_argument("--correlation", required=True, help="the key's correlation id")
    reply.add_argument("--value", help="the reply as JSON (resolved)")
    reply.add_argument("--error", help="reject the key with this error instead")


def commands(
    client: Callable[[argparse.Namespace, float | None], ApiClient],
) -> dict[str, Callable[[argparse.Namespace], Any]]:
    """The CLI's handlers of the host commands; ``client(args, timeout)`` makes the client."""

    def events(args: argparse.Namespace) -> None:
        # The client waits longer than the longest long poll.
        run_events(args, client(args, MAX_WAIT_SECONDS + 10))

    def action(args: argparse.Namespace) -> None:
        print(run_action(args, client(args, None)))

    return {"events": events, **dict.fromkeys(("deny", "resolve", "reject", "reply"), action)}


def _wait(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to {MAX_WAIT_SECONDS}")
    return int(text)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def event_line(event: dict[str, Any], session: str | None = None) -> str:
    """One event as a line: number, type and its fields; a question opened in ``session``
    ends with the command that answers it."""
    fields = " ".join(
        f"{k}={json.dumps(v, sort_keys=True)}"
        for k, v in event.items()
        if k not in ("seq", "type", "at", "answer_path")
    )
    line = f"#{event.get('seq')} {event.get('type')} {fields}".rstrip()
    if event.get("type") == "ask_opened" and session is not None:
        options = [o.get("id") for o in event.get("options") or [] if isinstance(o, dict)]
        how = [f"--option {'|'.join(map(str, options))}"] if options else []
        if event.get("allow_freeform") or not options:
            how.insert(0, "TEXT")
        line += f"  (answer: bide answer {session} {event.get('ask')} {' '.join(how)})"
    return line


def run_events(args: argparse.Namespace, client: ApiClient) -> int:
    """Print events after ``--cursor`` (``--json``: one object a line), waiting as asked;
    the cursor to resume from goes to stderr. How many were printed."""
    path = path_of("sessions", args.session, "events")
    cursor, printed = args.cursor, 0
    wait = MAX_WAIT_SECONDS if args.follow and not args.wait else args.wait
    while True:
        page = read_page(client, path, cursor=cursor, wait=wait or None)
        for event in page.get("items") or []:
            print(
                json.dumps(event, sort_keys=True) if args.json else event_line(event, args.session)
            )
            printed += 1
            if args.count is not None and printed >= args.count:
                break
        cursor = page.get("next") or cursor
        done = args.count is not None and printed >= args.count
        if done or not (args.follow or page.get("more")):
            break
    if cursor:
        print(f"next: {cursor}", file=sys.stderr)
    return printed


def _result(response: ApiResponse, what: str, wanted: str) -> str:
    result = response.body.get("result") if isinstance(response.body, dict) else None
    if not response.ok:
        raise HostCommandFailed(f"{what} -> HTTP {response.status}: {response.message}")
    if result != wanted:
        raise HostCommandFailed(f"{what}: {result}")
    return str(result)


def run_action(args: argparse.Namespace, client: ApiClient) -> str:
    """Send ``deny``, ``resolve``, ``reject`` or ``reply``; the server's result. Raises
    :class:`HostCommandFailed` when it was not taken."""
    if args.command == "deny":
        path = path_of("sessions", args.session, "approvals", args.approval, "decide")
        body = {"approved": False, "by": args.by, "note": args.note}
        body = {k: v for k, v in body.items() if v is not None}
        return _result(client.request("POST", path, body), f"deny {args.approval}", "decided")
    if args.command in ("resolve", "reject"):
        path = path_of("sessions", args.session, "promises", args.promise, args.command)
        body = {"value": _json_or_text(args.value)} if args.command == "resolve" else {}
        if args.command == "reject":
            body = {"error": args.error, "type": args.type}
            if args.data is not None:
                body["data"] = _json_or_text(args.data)
            body = {k: v for k, v in body.items() if v is not None}
        what = f"{args.command} {args.promise}"
        return _result(client.request("POST", path, body), what, "settled")
    path = path_of("sessions", args.session, "invocations", args.invocation, "reply")
    reply: dict[str, Any] = {
        "key": args.key,
        "producer": args.producer,
        "correlation": args.correlation,
    }
    if args.error is not None:
        reply.update(status="rejected", error=args.error)
    elif args.value is not None:
        reply["value"] = _json_or_text(args.value)
    return _result(client.request("POST", path, reply), f"reply {args.invocation}", "settled")
