"""Where a task's memos live once many: sealed pages, documents of their own.

A memo is first-writer-wins: once written it never changes until the task ends. Kept on the
record, a task that memoizes N values (a workflow body's history: two memos per operation)
carried all N, loaded, parsed and rewritten by every commit of the task and read by every
resume. So when the record's memos pass a page (:data:`PAGE_MEMOS` memos or
:data:`PAGE_BYTES` bytes of JSON), the commit that writes the memo crossing it moves the
oldest memos, up to a page, into the document ``bide.memo/<task>/<page>`` (the page number
zero-padded, so pages list in order) and counts the page on the record
(:attr:`~bide.engine.records.TaskRecord.memo_pages`). The record keeps fewer than a page. A
page's body is ``{"task", "page", "memos", "bytes"}``: ``bytes`` is the size its seal
measured (its memos' values as JSON, and their names), so a process that caches the page
need not measure it again (pages sealed before it was recorded are measured).

A page is written once, by the commit that seals it, and never again: a crash before that
commit leaves the memos on the record, a crash after it leaves them in the page; both are
read the same way. A memo not on the record is looked for in the sealed pages, in the draft
of the commit first (a page sealed by it) and then in the harness's document cache, so a
rerun finds what an earlier run recorded however it is laid out, and ``memo(name,
candidate)`` returns the sealed value instead of writing ``candidate``.

Because a sealed page never changes, a process keeps the pages it read, parsed, in one
bounded cache shared by its invocations (:data:`PAGES`, a :class:`PageCache`): a warm
worker replaying a long workflow body reads and parses only the pages sealed since. A page
enters it only once read through the harness, that is from the store or from a commit that
succeeded, never from a draft; a worker's targeted read (``bide.engine.partial``) reads a
task's pages from the store with its record and puts those the record counts
(:func:`keep_read`). Its key holds what makes the page the one it is: the store
object (two stores in one process may hold the same session ids), the session, the task, the
task's ``created_at`` and the page number. Within a session a task id is never reused (a new
task's id must be unused, ended tasks included), and a session id reused after its session
expired (``bide.aws.retention``) names tasks created after that expiry, so later than any
task of the expired session: the created time tells the two apart.
"""

from __future__ import annotations

import itertools
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from .records import TaskRecord

PREFIX = "bide.memo/"
"""Every sealed page's document key starts with this, then ``<task id>/``."""

PAGE_MEMOS = 64
"""A page holds at most this many memos; the record seals one when it holds more."""

PAGE_BYTES = 32 * 1024
"""A page holds memos up to about this many bytes of JSON (at least one memo, so a page is
at most one value over it: well under a document's limit); the record seals one when its
memos pass it. Small enough that DynamoDB keeps the page in its item (400 KB), not in S3."""

PAGE_ITEMS = 1
"""Store items a seal adds to its commit (the page document)."""

GetDoc = Callable[[str], Any]
"""A document's body by key, None when absent (a draft's or a harness's ``get_doc``)."""

ListDocs = Callable[..., list[Any]]
"""Committed documents under a prefix in key order, ``(prefix, *, start_after, limit)``:
a harness's ``list_docs`` (its results have ``key`` and ``body``)."""


def task_prefix(task_id: str) -> str:
    """The prefix of every sealed page of ``task_id``."""
    return f"{PREFIX}{task_id}/"


def page_key(task_id: str, page: int) -> str:
    """The document of ``task_id``'s sealed page number ``page`` (0-based)."""
    return f"{task_prefix(task_id)}{page:06d}"


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def seal(record: TaskRecord) -> tuple[TaskRecord, str, dict[str, Any]] | None:
    """``(record without the page's memos, page key, page body)`` when ``record``'s memos
    pass a page, else None. The page takes the oldest memos in the record's order."""
    memos = record.memos
    # A memo's size is its value's JSON and its name. The JSON of all the memos at once is
    # larger than their sizes' sum (each name is written quoted, with separators), and one
    # encoder call instead of one per memo: below a page by that measure, none is sealed.
    if len(memos) <= PAGE_MEMOS and _size(memos) <= PAGE_BYTES:
        return None
    sizes = {name: _size(value) + len(name) for name, value in memos.items()}
    if len(sizes) <= PAGE_MEMOS and sum(sizes.values()) <= PAGE_BYTES:
        return None
    page: dict[str, Any] = {}
    used = 0
    for name, value in record.memos.items():
        if page and (len(page) >= PAGE_MEMOS or used + sizes[name] > PAGE_BYTES):
            break
        page[name] = value
        used += sizes[name]
    kept = {name: value for name, value in memos.items() if name not in page}
    number = record.memo_pages
    body = {"task": record.id, "page": number, "memos": page, "bytes": used}
    sealed = record.replace(memos=kept, memo_pages=number + 1)
    return sealed, page_key(record.id, number), body


MISSING: Any = object()
"""What :func:`find` returns for a memo the task does not have."""


def unshared(value: Any) -> Any:
    """``value`` (a memo, JSON) copied so that it shares no ``dict`` or ``list`` with the
    memo: sealed pages are shared by a process's invocations (:data:`PAGES`), so what code
    may change is handed out copied, the rest as it is (strings, numbers, None)."""
    kind = type(value)
    if kind is dict:
        copied = value.copy()
        for key, item in value.items():
            if type(item) is dict or type(item) is list:
                copied[key] = unshared(item)
        return copied
    if kind is list:
        return [unshared(item) for item in value]
    return value


def find(
    get_doc: GetDoc, record: TaskRecord, name: str, committed: tuple[SealedCache, int] | None = None
) -> Any:
    """Memo ``name`` of ``record``'s task: on the record or in a sealed page; :data:`MISSING`
    when it has none. With ``committed``, ``(cache, n)``: its first ``n`` pages are committed
    ones, looked for through ``cache`` (read once); the later ones (sealed by a draft) through
    ``get_doc``."""
    if name in record.memos:
        return record.memos[name]
    first = 0
    if committed is not None:
        cache, first = committed[0], min(committed[1], record.memo_pages)
        found = cache.among(record, first, name)
        if found is not MISSING:
            return found
    for page in range(first, record.memo_pages):
        body = get_doc(page_key(record.id, page))
        if body is not None and name in body["memos"]:
            return body["memos"][name]
    return MISSING


def page_bytes(body: dict[str, Any]) -> int | None:
    """The bytes of JSON of a page's memos as its seal measured them (values and names), or
    None for a page sealed before pages recorded it (or holding anything but a count)."""
    size = body.get("bytes")
    return size if type(size) is int and size >= 0 else None


class PageCache:
    """Sealed pages' memos by a key naming the page for good (see the module's docstring),
    least recently used first out once it holds more than ``max_pages`` pages or more than
    ``max_bytes`` bytes of their JSON. Safe to share between threads."""

    def __init__(self, *, max_pages: int, max_bytes: int) -> None:
        if max_pages < 0 or max_bytes < 0:
            raise ValueError(f"a page cache's bounds must be >= 0, not {max_pages}, {max_bytes}")
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self._pages: OrderedDict[Hashable, tuple[dict[str, Any], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pages)

    @property
    def bytes(self) -> int:
        """Bytes of JSON of the pages held (as given to :meth:`put` or measured by it)."""
        return self._bytes

    def get(self, key: Hashable) -> dict[str, Any] | None:
        """The memos of the page ``key`` names, or None when not held."""
        with self._lock:
            found = self._pages.get(key)
            if found is None:
                return None
            self._pages.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, memos: dict[str, Any], size: int | None = None) -> None:
        """Keep a page's memos, as read from the store (the caller must not change them).
        ``size``: their bytes of JSON when known (a page records what its seal measured),
        else they are measured."""
        if size is None:
            size = _size(memos)
        with self._lock:
            if key in self._pages or size > self.max_bytes or not self.max_pages:
                return
            self._pages[key] = (memos, size)
            self._bytes += size
            while len(self._pages) > self.max_pages or self._bytes > self.max_bytes:
                _, (_, dropped) = self._pages.popitem(last=False)
                self._bytes -= dropped

    def held(self) -> list[Hashable]:
        """The keys of the pages held, least recently used first (to inspect it)."""
        with self._lock:
            return list(self._pages)

    def clear(self) -> None:
        """Forget every page."""
        with self._lock:
            self._pages.clear()
            self._bytes = 0


PAGES = PageCache(max_pages=2048, max_bytes=8 * 1024 * 1024)
"""The process's cache of sealed pages: at most 2,048 pages and 8 MiB of their JSON (a
page is at most about :data:`PAGE_BYTES`). Parsed, a page of workflow memos takes about six
times its JSON in memory: some 50 MB at the bound, against the worker's 1,024 MB default."""

_SCOPES: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_SCOPE_NUMBERS = itertools.count(1)
_SCOPES_LOCK = threading.Lock()


def store_scope(store: Any) -> int | None:
    """A number naming ``store`` (the object) for this process's life, never given to
    another store, even once this one is gone; None for an object that cannot be weakly
    referenced or hashed (its pages are then not shared)."""
    with _SCOPES_LOCK:
        try:
            found = _SCOPES.get(store)
            if found is None:
                found = _SCOPES[store] = next(_SCOPE_NUMBERS)
        except TypeError:
            return None
        return found


def page_scope(harness: Any) -> tuple[int, str] | None:
    """Where sealed pages read through ``harness`` (a harness, or anything with ``store``
    and ``session_id``) may be shared with the process's other invocations (:data:`PAGES`):
    its store object and session; None for one without a store (it shares nothing)."""
    return session_scope(getattr(harness, "store", None), harness.session_id)


def session_scope(store: Any, session_id: str) -> tuple[int, str] | None:
    """:func:`page_scope` of a harness on ``store`` (None: no store) and ``session_id``."""
    number = None if store is None else store_scope(store)
    return None if number is None else (number, session_id)


class SealedCache:
    """The sealed memos of one task, read page by page as its record counts them, for one
    invocation (pages never change, so what was read stays true). Give it adopted records
    only: a page a draft sealed is not committed yet (:func:`find` reads drafts). With a
    ``scope`` (:func:`store_scope` of the store behind ``get_doc``, and the session id) it
    shares the pages it reads with the process's other invocations through ``pages``.

    With ``list_docs`` the pages it needs and does not hold are read in one listing, from the
    first missing to the last (a cold worker replaying a long body reads its pages in one
    request, not one per page; on DynamoDB one Query, paged past 1 MB, in place of one
    GetItem a page). A listed page past the count asked for is ignored: the record this
    invocation adopted does not count it yet. A page the listing did not return is read with
    ``get_doc``."""

    def __init__(
        self,
        get_doc: GetDoc,
        scope: Hashable | None = None,
        pages: PageCache | None = None,
        *,
        list_docs: ListDocs | None = None,
    ) -> None:
        self._get_doc = get_doc
        self._list_docs = list_docs
        self._scope = scope
        self._shared = PAGES if pages is None else pages
        self._memos: dict[str, Any] = {}
        self._pages = 0

    def find(self, record: TaskRecord, name: str) -> Any:
        """Like :func:`find`, reading each sealed page at most once."""
        memos = record.memos
        if name in memos:
            return memos[name]
        if self._pages < record.memo_pages:
            return self.among(record, record.memo_pages, name)
        return self._memos.get(name, MISSING)

    def among(self, record: TaskRecord, pages: int, name: str) -> Any:
        """Memo ``name`` in the task's first ``pages`` sealed pages (committed ones), or in a
        page read before (sealed too); :data:`MISSING` when none holds it."""
        self._read(record, pages)
        return self._memos.get(name, MISSING)

    def every(self, record: TaskRecord) -> dict[str, Any]:
        """Like :func:`every_memo`, reading each sealed page at most once (read-only use)."""
        self._read(record, record.memo_pages)
        return {**self._memos, **record.memos}

    def _read(self, record: TaskRecord, pages: int) -> None:
        if self._pages >= pages:
            return
        held = {n: self._cached(record, n) for n in range(self._pages, pages)}
        missing = [n for n, memos in held.items() if memos is None]
        if missing and self._list_docs is not None:
            held.update(self._listed(record, missing[0], missing[-1] + 1))
        while self._pages < pages:
            memos = held.get(self._pages)
            self._memos.update(memos if memos is not None else self._page(record, self._pages))
            self._pages += 1

    def _key(self, record: TaskRecord, number: int) -> Hashable | None:
        return None if self._scope is None else (self._scope, record.id, record.created_at, number)

    def _cached(self, record: TaskRecord, number: int) -> dict[str, Any] | None:
        key = self._key(record, number)
        return None if key is None else self._shared.get(key)

    def _listed(self, record: TaskRecord, first: int, end: int) -> dict[int, dict[str, Any]]:
        """Committed pages ``first`` to ``end - 1`` by number, read in one listing (and
        cached). Only keys :func:`page_key` gives for a number in that range count: a later
        page (sealed by a commit after the adopted record) or a key under the prefix that is
        no page of this task (a task whose id extends this one's) is ignored."""
        prefix = task_prefix(record.id)
        after = page_key(record.id, first - 1) if first else None
        assert self._list_docs is not None
        found: dict[int, dict[str, Any]] = {}
        for doc in self._list_docs(prefix, start_after=after, limit=end - first):
            number = _page_number(prefix, doc.key)
            if number is None or not first <= number < end or doc.body is None:
                continue
            memos = doc.body["memos"]
            key = self._key(record, number)
            if key is not None:
                self._shared.put(key, memos, page_bytes(doc.body))
            found[number] = memos
        return found

    def _page(self, record: TaskRecord, number: int) -> dict[str, Any]:
        key = self._key(record, number)
        memos = None if key is None else self._shared.get(key)
        if memos is not None:
            return memos
        body = self._get_doc(page_key(record.id, number))
        if body is None:  # the commit that counted the page wrote it: a store lost it
            raise LookupError(
                f"sealed memo page {number} of task {record.id!r} is missing from the store; "
                "its memos cannot be read, so the run stops here"
            )
        if key is not None:
            self._shared.put(key, body["memos"], page_bytes(body))
        return body["memos"]  # type: ignore[no-any-return]


def _page_number(prefix: str, key: str) -> int | None:
    """The page number of a document key under ``prefix`` when it is the key
    :func:`page_key` gives that number, else None."""
    digits = key[len(prefix) :]
    if not key.startswith(prefix) or not digits.isascii() or not digits.isdigit():
        return None
    number = int(digits)
    return number if f"{number:06d}" == digits else None


AT_HEAD_PAGES = 72
"""Pages a worker's targeted read (one ``TransactGetItems``) fetches at most with the task:
the read holds at most 100 items and 4 MB of them
(https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactGetItems.html).
Room is left for the head, the task and its owner at a full item each (400 KB), and a page
is taken at :data:`PAGE_BYTES` and 8 KB for its key and wrapping: (4 MiB - 3 x 400 KiB) /
40 KiB = 72. A page over that (one large value) may push the read past 4 MB: DynamoDB
refuses it and the store reads again without the pages (``bide.aws.at_head``)."""


def pages_to_read(
    scope: Hashable | None, task_id: str, hint: tuple[int, float] | None, pages: PageCache = PAGES
) -> list[str]:
    """The document keys of the task's first sealed pages (as ``hint``, ``(count,
    created_at)``, counts them) that ``pages`` does not hold, at most :data:`AT_HEAD_PAGES`;
    none without a ``scope`` (nothing read could be shared) or a hint."""
    if scope is None or hint is None:
        return []
    count, created_at = hint
    keys: list[str] = []
    for number in range(count):
        if len(keys) >= AT_HEAD_PAGES:
            break
        if pages.get((scope, task_id, created_at, number)) is None:
            keys.append(page_key(task_id, number))
    return keys


def keep_read(
    scope: Hashable, record: TaskRecord, docs: Mapping[str, Any], pages: PageCache = PAGES
) -> int:
    """Put in ``pages`` the sealed pages of ``record``'s task among ``docs`` (documents by
    key, read from the store at the same seq as ``record``); how many. Only a page the record
    counts enters it (its memos never change); anything else read is ignored."""
    kept = 0
    for number in range(record.memo_pages):
        doc = docs.get(page_key(record.id, number))
        body = None if doc is None else doc.body
        memos = body.get("memos") if isinstance(body, dict) else None
        if isinstance(memos, dict):
            assert isinstance(body, dict)
            pages.put((scope, record.id, record.created_at, number), memos, page_bytes(body))
            kept += 1
    return kept


def every_memo(get_doc: GetDoc, record: TaskRecord) -> dict[str, Any]:
    """All of the task's memos by name, the sealed pages' (oldest first) then the record's:
    for views that list them (a workflow's history, its webhooks). Reads every page from
    ``get_doc``; ``SealedCache(get_doc, page_scope(harness)).every(record)`` reads them
    through the process's cache instead."""
    found: dict[str, Any] = {}
    for page in range(record.memo_pages):
        body = get_doc(page_key(record.id, page))
        if body is not None:
            found.update(body["memos"])
    return {**found, **record.memos}
