"""Where a task's memos live once many: sealed pages, documents of their own.

A memo is first-writer-wins: once written it never changes until the task ends. Kept on the
record, a task that memoizes N values (a workflow body's history: two memos per operation)
carried all N, loaded, parsed and rewritten by every commit of the task and read by every
resume. So when the record's memos pass a page (:data:`PAGE_MEMOS` memos or
:data:`PAGE_BYTES` bytes of JSON), the commit that writes the memo crossing it moves the
oldest memos, up to a page, into the document ``bide.memo/<task>/<page>`` (the page number
zero-padded, so pages list in order) and counts the page on the record
(:attr:`~bide.engine.records.TaskRecord.memo_pages`). The record keeps fewer than a page.

A page is written once, by the commit that seals it, and never again: a crash before that
commit leaves the memos on the record, a crash after it leaves them in the page; both are
read the same way. A memo not on the record is looked for in the sealed pages, in the draft
of the commit first (a page sealed by it) and then in the harness's document cache, so a
rerun finds what an earlier run recorded however it is laid out, and ``memo(name,
candidate)`` returns the sealed value instead of writing ``candidate``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
    sizes = {name: _size(value) + len(name) for name, value in record.memos.items()}
    if len(sizes) <= PAGE_MEMOS and sum(sizes.values()) <= PAGE_BYTES:
        return None
    page: dict[str, Any] = {}
    used = 0
    for name, value in record.memos.items():
        if page and (len(page) >= PAGE_MEMOS or used + sizes[name] > PAGE_BYTES):
            break
        page[name] = value
        used += sizes[name]
    kept = {name: value for name, value in record.memos.items() if name not in page}
    number = record.memo_pages
    body = {"task": record.id, "page": number, "memos": page}
    sealed = record.model_copy(update={"memos": kept, "memo_pages": number + 1})
    return sealed, page_key(record.id, number), body


MISSING: Any = object()
"""What :func:`find` returns for a memo the task does not have."""


def find(get_doc: GetDoc, record: TaskRecord, name: str) -> Any:
    """Memo ``name`` of ``record``'s task: on the record or in a sealed page; :data:`MISSING`
    when it has none."""
    if name in record.memos:
        return record.memos[name]
    for page in range(record.memo_pages):
        body = get_doc(page_key(record.id, page))
        if body is not None and name in body["memos"]:
            return body["memos"][name]
    return MISSING


class SealedCache:
    """The sealed memos of one task, read page by page as its record counts them, for one
    invocation (pages never change, so what was read stays true). Give it adopted records
    only: a page a draft sealed is not committed yet (:func:`find` reads drafts)."""

    def __init__(self, get_doc: GetDoc) -> None:
        self._get_doc = get_doc
        self._memos: dict[str, Any] = {}
        self._pages = 0

    def find(self, record: TaskRecord, name: str) -> Any:
        """Like :func:`find`, reading each sealed page at most once."""
        if name in record.memos:
            return record.memos[name]
        while self._pages < record.memo_pages:
            body = self._get_doc(page_key(record.id, self._pages))
            if body is None:  # the commit that counted the page wrote it: a store lost it
                raise LookupError(
                    f"sealed memo page {self._pages} of task {record.id!r} is missing from "
                    "the store; its memos cannot be read, so the run stops here"
                )
            self._memos.update(body["memos"])
            self._pages += 1
        return self._memos.get(name, MISSING)


def every_memo(get_doc: GetDoc, record: TaskRecord) -> dict[str, Any]:
    """All of the task's memos by name, the sealed pages' (oldest first) then the record's:
    for views that list them (a workflow's history, its webhooks)."""
    found: dict[str, Any] = {}
    for page in range(record.memo_pages):
        body = get_doc(page_key(record.id, page))
        if body is not None:
            found.update(body["memos"])
    return {**found, **record.memos}
