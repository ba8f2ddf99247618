"""Pages of a list the sessions API serves (transcript entries, live tasks, submissions, a
caller's sessions), and the opaque cursors that continue them.

A page holds at most ``limit`` items (default :data:`DEFAULT_PAGE_LIMIT`, at most
:data:`MAX_PAGE_LIMIT`) and at most :data:`MAX_PAGE_BYTES` bytes of items as JSON: it stops
before the item that would cross the byte bound. An item that alone is larger than the bound
is served as a stub saying so (:func:`omitted`), so every response stays bounded whatever a
session stores (Lambda's response payload limit is 6 MB:
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).

A cursor names a position in one list of one session: the position after the last item a
page held (a store key, or a task's creation time and id). Lists only grow at their end or
are read in key order, so a cursor stays valid while the session grows: following ``next``
from the first page reads every item once, in order, and a cursor kept after the last page
later reads what was added since. Cursors are base64url JSON with a checksum; they are
opaque to callers and grant nothing (the server re-checks the session and the caller on
every request), so the checksum is there to turn a tampered or truncated cursor into a clear
400 rather than to keep a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..engine.errors import BideError

DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 500
#: The bound on one page's items as JSON. The session summary holds three pages and the
#: live webhooks: well under Lambda's 6 MB.
MAX_PAGE_BYTES = 1024 * 1024
MAX_CURSOR_CHARS = 4096
_CHECK_CHARS = 16


class BadCursor(BideError):
    """A cursor that is not one this API issued for this list (400, naming the field)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


@dataclass(frozen=True)
class Page:
    """One page: its items, the cursor after its last item (``next``; pass it back to read
    on) and whether more items existed when it was read (``more``)."""

    items: list[Any]
    next: str | None
    more: bool

    def as_dict(self) -> dict[str, Any]:
        """The page as the API serves it."""
        return {"items": self.items, "next": self.next, "more": self.more}


def _check(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()[:_CHECK_CHARS]


def encode_cursor(session: str, kind: str, after: Any) -> str:
    """A cursor for the position ``after`` in list ``kind`` of ``session`` (a session id,
    or for the sessions listing the caller)."""
    payload = json.dumps({"s": session, "k": kind, "a": after}, separators=(",", ":"))
    raw = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return f"{raw}.{_check(payload)}"


def decode_cursor(cursor: str | None, *, session: str, kind: str, field: str = "cursor") -> Any:
    """The position a cursor names (None for no cursor: the start). Raises :class:`BadCursor`
    for a cursor that is malformed, altered, or issued for another list or session."""
    if cursor is None or cursor == "":
        return None
    if len(cursor) > MAX_CURSOR_CHARS:
        raise BadCursor(field, f"longer than {MAX_CURSOR_CHARS} characters")
    raw, dot, check = cursor.partition(".")
    if not dot:
        raise BadCursor(field, "not a cursor this API issued")
    try:
        payload = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, ValueError):
        raise BadCursor(field, "not a cursor this API issued") from None
    if check != _check(payload):
        raise BadCursor(field, "the cursor was altered or truncated")
    try:
        found = json.loads(payload)
    except ValueError:
        raise BadCursor(field, "not a cursor this API issued") from None
    if not isinstance(found, dict) or set(found) != {"s", "k", "a"}:
        raise BadCursor(field, "not a cursor this API issued")
    if found["k"] != kind:
        raise BadCursor(field, f"a cursor of another list ({found['k']!r}), not of {kind!r}")
    if found["s"] != session:
        raise BadCursor(field, "a cursor of another session (or caller)")
    return found["a"]


def check_limit(limit: int | None) -> int:
    """The page size to use (the API validates the range before this)."""
    return DEFAULT_PAGE_LIMIT if limit is None else max(1, min(limit, MAX_PAGE_LIMIT))


def item_bytes(item: Any) -> int:
    """An item's size as the response writes it (compact JSON, UTF-8)."""
    return len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode())


def omitted(size: int, byte_bound: int) -> dict[str, Any]:
    """What stands for an item larger than a whole page may be."""
    return {
        "omitted": True,
        "bytes": size,
        "reason": f"the item is {size} bytes, over the {byte_bound}-byte page bound",
    }


def build_page(
    candidates: Iterable[tuple[Any, Any]],
    *,
    limit: int,
    session: str,
    kind: str,
    start: Any,
    byte_bound: int = MAX_PAGE_BYTES,
    shape: Callable[[Any], Any] = lambda item: item,
) -> Page:
    """A page from ``candidates`` (``(position, item)`` pairs in list order, at most
    ``limit + 1`` of them: one more than the page tells whether more exist). ``start`` is the
    position the page was read after (its ``next`` when it is empty)."""
    items: list[Any] = []
    used = 2  # the list's brackets
    last = start
    more = False
    for position, item in candidates:
        if len(items) >= limit:
            more = True
            break
        shaped = shape(item)
        size = item_bytes(shaped)
        if size + 1 > byte_bound - 2:
            shaped = omitted(size, byte_bound)
            size = item_bytes(shaped)
        if items and used + size + 1 > byte_bound:
            more = True
            break
        items.append(shaped)
        used += size + 1
        last = position
    following = encode_cursor(session, kind, last) if last is not None else None
    return Page(items, following, more)
