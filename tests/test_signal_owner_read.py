"""The IAM signal routes read once (issue 12, goal 3): the session's owner document, its head
and the task in one ``TransactGetItems`` of 3 items (``Store.task_and_doc_at_head``), the
owner check decided on that read before anything is decided or written; a caller who is
neither the owner nor an administrator gets 403 and nothing is written or woken. Over
DynamoDB (moto); who may call which route over both stores: tests/test_owners.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aws_fixtures import unique
from handler_fixtures import (
    ACCOUNT,
    PRINCIPAL,
    REPLY,
    Bench,
    aws_fixture,
    bench_fixture,
    http_event,
    response_json,
)

from bide.service.http import handle_api
from bide.service.owners import OWNER_KEY

__all__ = ["aws_fixture", "bench_fixture"]  # fixtures, imported for pytest to find

ALICE = PRINCIPAL
BOB = f"arn:aws:sts::{ACCOUNT}:assumed-role/developer/bob"
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/bide-admin"
ADMIN = f"arn:aws:sts::{ACCOUNT}:assumed-role/bide-admin/carol"
SIGNAL_PATH = "/sessions/{sid}/tasks/{tid}/signals/" + REPLY.name + "/k"
SIGNAL_ROUTE = "POST /sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}"

#: Each IAM signal route: its path suffix, its body, and what it asks of AWS when it
#: delivers (a beat queues no wake).
ROUTES: dict[str, tuple[str, Any, list[str]]] = {
    "value": ("", {"text": "hi"}, ["SendMessage", "TransactGetItems", "UpdateItem"]),
    "failure": (
        "/failure",
        {"type": "Denied", "message": "no"},
        ["SendMessage", "TransactGetItems", "UpdateItem"],
    ),
    "beat": ("/heartbeat", None, ["TransactGetItems", "UpdateItem"]),
}


def owned_sleeper(bench: Bench) -> tuple[str, str]:
    """A session ALICE created (its owner document recorded) with a task asleep on ``k``."""
    create = http_event("POST", "/sessions", body={"session_id": unique("s")}, principal=ALICE)
    response = asyncio.run(handle_api(bench.deps, create, None))
    assert response["statusCode"] == 201, response
    sid = str(response_json(response)["session_id"])
    rounds = [{"keys": ["k"], "heartbeat": 300.0}]
    task_id = bench.start_napper(rounds, sid)
    bench.drain()
    assert bench.task(sid, task_id).state.status == "sleeping"
    assert bench.store.get_doc(sid, OWNER_KEY) is not None
    return sid, task_id


def send(bench: Bench, route: str, sid: str, task_id: str, principal: str) -> tuple[int, Any]:
    suffix, body, _ = ROUTES[route]
    path = SIGNAL_PATH.format(sid=sid, tid=task_id) + suffix
    event = http_event(
        "POST", path, body=body, route_key=SIGNAL_ROUTE + suffix, principal=principal
    )
    return bench.post_signal(event)


def the_one_read(made: list[tuple[str, dict[str, Any]]], sid: str, task_id: str) -> None:
    """Exactly one read request: a TransactGetItems of the head, the task and the owner doc."""
    reads = [(op, p) for op, p in made if op in ("GetItem", "TransactGetItems", "Query")]
    assert [op for op, _ in reads] == ["TransactGetItems"], made
    keys = [get["Get"]["Key"] for get in reads[0][1]["TransactItems"]]
    assert len(keys) == 3
    assert {k["pk"]["S"] for k in keys} == {sid}
    sort_keys = {k["sk"]["S"] for k in keys}
    assert any(s.endswith(OWNER_KEY) for s in sort_keys) and any(
        s.endswith(task_id) for s in sort_keys
    )


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("principal", [ALICE, ADMIN], ids=["owner", "admin"])
def test_the_owner_and_admins_are_let_in_on_one_read(
    bench: Bench, route: str, principal: str
) -> None:
    bench.deps = bench.deps.replace(admin_principals=frozenset({ADMIN_ROLE}))
    sid, task_id = owned_sleeper(bench)
    seq = bench.seq(sid)
    (status, body), made = bench.aws_requests(lambda: send(bench, route, sid, task_id, principal))
    assert (status, body["result"]) == (202, "delivered"), body
    the_one_read(made, sid, task_id)
    assert sorted(op for op, _ in made) == ROUTES[route][2]
    assert bench.seq(sid) == seq + 1


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_another_principal_gets_403_and_nothing_is_written(bench: Bench, route: str) -> None:
    sid, task_id = owned_sleeper(bench)
    seq, before = bench.seq(sid), bench.task(sid, task_id)
    assert bench.queued() == []
    (status, body), made = bench.aws_requests(lambda: send(bench, route, sid, task_id, BOB))
    assert status == 403 and body["error"] == f"session {sid!r} belongs to another principal"
    the_one_read(made, sid, task_id)
    assert [op for op, _ in made] == ["TransactGetItems"]  # no write, no wake
    assert bench.seq(sid) == seq and bench.task(sid, task_id) == before
    assert bench.queued() == []
