"""Who owns a session, who may use it, and the index of a caller's sessions.

**The principal.** The sessions API's routes are IAM-authorised (SigV4) at API Gateway, which
hands the function the caller's identity in the payload-2.0 event as
``requestContext.authorizer.iam`` (``userArn``, ``accountId``, ``callerId``, ...): see
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
(payload format 2.0) and
https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-access-control-iam.html.
The principal is ``userArn`` as given (for a role session:
``arn:aws:sts::<account>:assumed-role/<role>/<session name>``). The local stack puts its
caller there too (:mod:`bide.local.stack`: ``local`` unless the request names another in
``X-Bide-Principal``; it serves 127.0.0.1 only).

**The owner.** Creating a session records its creator in the document :data:`OWNER_KEY` of
the session, written by the commit that claims the id (the session's first commit, so two
creators racing for one id cannot both win). Every IAM route lets the owner in, and the
deployment's administrators (``BIDE_ADMIN_PRINCIPALS``: comma-separated principal ARNs; an
IAM role ARN ``arn:aws:iam::<account>:role/<name>`` also admits every session of that role);
anyone else gets 403 without learning who the owner is. Capability webhooks are not
IAM routes: the token is the credential, as before.

**Sessions without an owner** (created before owners were recorded, or by code that creates
sessions without the API) stay open to every IAM-authorised caller, as every session was
before; they are not in anyone's listing.

**The listing.** Each principal has an index partition in the store, the pseudo-session
``#owner/<principal>`` (a ``#`` no API session id may hold), with one document per session
under a key that sorts newest first. Listing is one ranged read of that partition (on
DynamoDB a Query on its partition key, never a Scan); adding to it is one small commit on the
caller's own partition (retried on a conflict with the caller's other creates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..engine.errors import BideError, ConflictError, StoreUnavailable
from ..engine.records import TaskRecord
from ..engine.store.base import Doc, Store
from ..engine.values import FrozenValue, value_class

OWNER_KEY = "session/owner"
INDEX_PARTITION_PREFIX = "#owner/"
INDEX_PREFIX = "s/"
LOCAL_PRINCIPAL = "local"
_INDEX_RETRIES = 20
# Newest first under ascending keys: the key holds this minus the creation time (ms).
_FAR_FUTURE_MS = 9_999_999_999_999


class NotAllowed(BideError):
    """The caller may not use this session (403)."""


class NoPrincipal(BideError):
    """The request carries no IAM principal (403): the route is IAM-authorised."""


@value_class
class Caller(FrozenValue):
    """Who is asking, and whether the deployment names them an administrator."""

    __slots__ = ("admin", "principal")
    principal: str
    admin: bool

    def __init__(self, principal: str, admin: bool = False) -> None:
        object.__setattr__(self, "principal", principal)
        object.__setattr__(self, "admin", admin)


def principal_of(event: Mapping[str, Any]) -> str | None:
    """The IAM principal (``userArn``) API Gateway put into a payload-2.0 event, or None."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    iam = authorizer.get("iam") if isinstance(authorizer, Mapping) else None
    found = iam.get("userArn") if isinstance(iam, Mapping) else None
    return found if isinstance(found, str) and found else None


def parse_admins(text: str) -> frozenset[str]:
    """The administrators named in ``BIDE_ADMIN_PRINCIPALS`` (comma-separated)."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def is_admin(principal: str, admins: Iterable[str]) -> bool:
    """Whether ``principal`` is one of ``admins``: named exactly, or a session of a role
    named by its IAM role ARN."""
    names = set(admins)
    if principal in names:
        return True
    # arn:aws:sts::123:assumed-role/Name/session  <-  arn:aws:iam::123:role/Name
    parts = principal.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"{parts[0]}:{parts[1]}:iam::{parts[4]}:role/{role}" in names
    return False


def caller_of(event: Mapping[str, Any], admins: Iterable[str]) -> Caller:
    """The caller of an IAM route; raises :class:`NoPrincipal` when there is none."""
    principal = principal_of(event)
    if principal is None:
        raise NoPrincipal("the request carries no IAM principal (requestContext.authorizer.iam)")
    return Caller(principal, is_admin(principal, admins))


def owner_of(store: Store, session_id: str) -> str | None:
    """The principal that created the session, or None when none was recorded."""
    return _owner_in(store.get_doc(session_id, OWNER_KEY))


def _owner_in(doc: Doc | None) -> str | None:
    if doc is None or not isinstance(doc.body, dict):
        return None
    owner = doc.body.get("principal")
    return owner if isinstance(owner, str) else None


def _check(owner: str | None, session_id: str, caller: Caller) -> None:
    if not caller.admin and owner is not None and owner != caller.principal:
        raise NotAllowed(f"session {session_id!r} belongs to another principal")


def check_access(store: Store, session_id: str, caller: Caller) -> None:
    """Raise :class:`NotAllowed` unless ``caller`` may use the session (see the module)."""
    if caller.admin:
        return  # no read needed
    _check(owner_of(store, session_id), session_id, caller)


def task_at_head_for(
    store: Store, session_id: str, task_id: str, caller: Caller
) -> tuple[int, TaskRecord | None]:
    """:meth:`~bide.engine.store.base.Store.task_at_head` for ``caller``: the owner document,
    the head and the task in one read (:meth:`~bide.engine.store.base.Store.task_and_doc_at_head`,
    one ``TransactGetItems`` on DynamoDB where :func:`check_access` then the read take two).
    Raises :class:`NotAllowed` exactly when :func:`check_access` would, before the caller
    decides or writes anything; otherwise the sequence number and the task, to deliver with."""
    seq, record, owner = store.task_and_doc_at_head(session_id, task_id, OWNER_KEY)
    _check(_owner_in(owner), session_id, caller)
    return seq, record


def index_partition(principal: str) -> str:
    """The store partition holding ``principal``'s index of sessions."""
    return INDEX_PARTITION_PREFIX + principal


def index_key(session_id: str, created_at: float) -> str:
    """The index document key of a session: sorts newest first, then by id."""
    return f"{INDEX_PREFIX}{_FAR_FUTURE_MS - int(created_at * 1000):013d}/{session_id}"


def claim(store: Store, session_id: str, caller: Caller, now: float) -> None:
    """Record ``caller`` as the owner of a new session and list it under them. For an
    existing session: check access, and repair a missing index entry of its owner's (a
    create that stopped between its two writes). Raises :class:`NotAllowed`."""
    existing = store.get_doc(session_id, OWNER_KEY)
    if existing is None and store.head(session_id) == 0:
        body = {
            "principal": caller.principal,
            "created_at": now,
            "index_key": index_key(session_id, now),
        }
        try:
            store.commit(session_id, 0, [], [Doc(OWNER_KEY, body)])
            existing = Doc(OWNER_KEY, body)
        except ConflictError:
            existing = store.get_doc(session_id, OWNER_KEY)  # someone else created it first
    check_access(store, session_id, caller)
    if existing is None or not isinstance(existing.body, dict):
        return  # a session from before owners: nothing to list
    owner, key = existing.body.get("principal"), existing.body.get("index_key")
    if isinstance(owner, str) and isinstance(key, str):
        _index(store, owner, key, session_id, float(existing.body.get("created_at", now)))


def _index(store: Store, owner: str, key: str, session_id: str, created_at: float) -> None:
    partition = index_partition(owner)
    for _ in range(_INDEX_RETRIES):
        if store.get_doc(partition, key) is not None:
            return
        seq = store.head(partition)
        try:
            store.commit(
                partition, seq, [], [Doc(key, {"session_id": session_id, "created_at": created_at})]
            )
            return
        except ConflictError:
            continue  # another create of the same caller committed first: read again
    raise StoreUnavailable(f"could not add session {session_id!r} to its owner's index")


def index_entry(store: Store, session_id: str) -> tuple[str, str] | None:
    """Where the session is listed: ``(index partition, document key)`` of its owner's index
    entry, or None for a session without an owner."""
    doc = store.get_doc(session_id, OWNER_KEY)
    body = doc.body if doc is not None and isinstance(doc.body, dict) else {}
    owner, key = body.get("principal"), body.get("index_key")
    if isinstance(owner, str) and isinstance(key, str):
        return index_partition(owner), key
    return None


def list_owned(store: Store, principal: str, *, start_after: str | None, limit: int) -> list[Doc]:
    """Up to ``limit`` index documents of ``principal``'s sessions after ``start_after``,
    newest first."""
    return store.list_docs(
        index_partition(principal), INDEX_PREFIX, start_after=start_after, limit=limit
    )
