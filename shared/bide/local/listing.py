"""``bide sessions``: the caller's sessions, newest first, read by page from ``GET /sessions``
(logic kept out of :mod:`bide.cli`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime

from .client import ApiClient, list_sessions

DEFAULT_LIMIT = 20
MAX_PAGE_LIMIT = 500  # the API's (bide.service.pages): a larger --limit is a usage error


def add_parser(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Declare ``bide sessions`` with the CLI's ``command`` factory."""
    sessions = command("sessions", "list your sessions (the ones you created), newest first")
    sessions.add_argument(
        "--limit", type=_limit, default=DEFAULT_LIMIT, help="sessions per page, 1 to 500 (20)"
    )
    sessions.add_argument("--all", action="store_true", help="read every page, not just one")


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_LIMIT:
        raise argparse.ArgumentTypeError(f"must be a number from 1 to {MAX_PAGE_LIMIT}")
    return int(text)


def run(args: argparse.Namespace, client: ApiClient) -> int:
    """Print the caller's sessions (``--json``: one JSON object a line); how many."""
    count = 0
    for item in list_sessions(client, limit=args.limit, every=args.all):
        count += 1
        if args.json:
            print(json.dumps(item, sort_keys=True))
            continue
        created = datetime.fromtimestamp(float(item.get("created_at") or 0), tz=UTC)
        print(f"{item.get('session_id')}  created {created:%Y-%m-%d %H:%M:%S}Z")
    if count == 0 and not args.json:
        print("no sessions of yours")
    return count
