"""Ending a session in the deployed service (on moto): the end route records the end, and
the worker run it wakes stamps every item of the session and its owner's index entry with
the expiry; a crash midway is finished by the wake's retry. The function configuration
reads the retention (bide.service.config)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from aws_fixtures import expiries
from handler_fixtures import Bench, aws_fixture, bench_fixture, http_event, response_json

from bide.service.config import ConfigError, settings_from_env
from bide.service.http import handle_api
from bide.service.owners import Caller, index_partition
from bide.service.sessions import create_session, submit
from bide.service.worker import run_session

__all__ = ["aws_fixture", "bench_fixture"]

DAY = 86_400
PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/dev/alice"


def end(bench: Bench, sid: str) -> int:
    event = http_event("POST", f"/sessions/{sid}/end", principal=PRINCIPAL)
    response = asyncio.run(handle_api(bench.deps, event, None))
    assert response["statusCode"] == 202, response_json(response)
    return int(response["statusCode"])


def ended_session(bench: Bench) -> tuple[str, int]:
    bench.store.set_retention(7 * DAY, clock=bench.clock.now)
    bench.deps.ended_sessions = bench.store
    sid = asyncio.run(create_session(bench.deps, "s-ending", Caller(PRINCIPAL)))
    asyncio.run(submit(bench.deps, sid, "hello", request_id="r1"))
    asyncio.run(run_session(bench.deps, sid))
    end(bench, sid)
    return sid, math.ceil(bench.clock.now() + 7 * DAY)


def test_the_worker_woken_by_the_end_stamps_the_session_and_its_listing(bench: Bench) -> None:
    sid, expiry = ended_session(bench)
    before = expiries(bench, sid)
    assert None in before.values()  # what was written before the end is not stamped yet
    asyncio.run(run_session(bench.deps, sid))
    assert set(expiries(bench, sid).values()) == {expiry}
    listing = expiries(bench, index_partition(PRINCIPAL))
    assert [v for k, v in listing.items() if k.startswith("D#")] == [expiry]
    # Past the expiry the session is gone for the API, before TTL deletes anything.
    bench.clock.set(expiry + 1)
    event = http_event("GET", f"/sessions/{sid}", principal=PRINCIPAL)
    assert asyncio.run(handle_api(bench.deps, event, None))["statusCode"] == 404
    event = http_event("GET", "/sessions", principal=PRINCIPAL)
    assert response_json(asyncio.run(handle_api(bench.deps, event, None)))["items"] == []


def test_a_worker_crash_while_stamping_is_finished_by_the_retry(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, expiry = ended_session(bench)
    real = bench.ddb.update_item
    calls = {"n": 0}

    def dying(**kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("the worker died")
        return real(**kw)

    monkeypatch.setattr(bench.ddb, "update_item", dying, raising=False)
    with pytest.raises(RuntimeError):
        asyncio.run(run_session(bench.deps, sid))
    assert None in expiries(bench, sid).values()
    monkeypatch.setattr(bench.ddb, "update_item", real, raising=False)
    asyncio.run(run_session(bench.deps, sid))  # the wake's retry
    assert set(expiries(bench, sid).values()) == {expiry}


def test_a_session_not_ended_costs_the_worker_no_stamping(bench: Bench) -> None:
    bench.store.set_retention(7 * DAY, clock=bench.clock.now)
    bench.deps.ended_sessions = bench.store
    sid = asyncio.run(create_session(bench.deps, "s-live", Caller(PRINCIPAL)))
    asyncio.run(submit(bench.deps, sid, "hello", request_id="r1"))
    asyncio.run(run_session(bench.deps, sid))
    assert not bench.store.needs_stamping(sid)
    assert set(expiries(bench, sid).values()) == {None}


def test_the_retention_setting_is_read_and_checked() -> None:
    base = {
        "BIDE_APP": "a.b:c",
        "BIDE_TABLE": "tbl",
        "BIDE_BUCKET": "bucket",
        "BIDE_WAKE_QUEUE_URL": "https://sqs.example/q.fifo",
    }
    assert settings_from_env(base).retention_seconds == 0
    assert settings_from_env({**base, "BIDE_RETENTION_SECONDS": "2592000"}).retention_seconds == (
        30 * DAY
    )
    for bad in ("-1", "1.5", "thirty", str(20 * 366 * DAY)):
        with pytest.raises(ConfigError, match="BIDE_RETENTION_SECONDS"):
            settings_from_env({**base, "BIDE_RETENTION_SECONDS": bad})
