"""A worker process runs each session whole the first time it runs it (bide.service.whole_runs),
even for a signal's wake: design 001 ch. VIII asks every call parked at its gates again on the
first pass after open (a restart: new code, maybe new gates), and a targeted pass opens on one
task only. The host, app and fixtures are tests/targeted_kit.py's, as test_targeted_pass uses
them."""

from __future__ import annotations

import asyncio

from targeted_kit import APP, Host, Looper, host_fixtures

moto, host = host_fixtures()


def test_a_worker_process_runs_each_session_whole_the_first_time(host: Host) -> None:
    # Design 001 ch. VIII: the first pass after open (a restart: new code, maybe new gates)
    # asks every call parked at its gates again, so a process's first run of a session is a
    # full pass even for a signal's wake (bide.service.whole_runs).
    async def park_two() -> list[str]:
        from bide import Harness

        h = Harness(host.store.inner, host.sid, APP.task_kinds(), clock=host.clock)
        await h.open()
        ids = [await h.create_task(Looper, None) for _ in range(2)]
        await h.run_until_parked()
        await h.close()
        return ids

    ids = asyncio.run(park_two())  # parked without this worker ever running the session
    host.store.reset()
    host.signal(ids[0], "k0")
    host.drain()
    assert (host.store.loads, host.store.targeted, host.store.records) == (1, 0, 2)
    host.store.reset()
    host.signal(ids[0], "k1")
    host.drain()
    assert (host.store.loads, host.store.targeted, host.store.records) == (0, 1, 1)
    # A restarted worker (a new process: a new store object over the same table) runs it
    # whole again, once.
    restarted = Host(host.store.inner)
    restarted.sid = host.sid
    restarted.signal(ids[1], "k0")
    restarted.drain()
    assert (restarted.store.loads, restarted.store.targeted) == (1, 0)
    restarted.signal(ids[1], "k1")
    restarted.drain()
    assert (restarted.store.loads, restarted.store.targeted) == (1, 1)
    assert (host.n(ids[0]), host.n(ids[1])) == (3, 3)
