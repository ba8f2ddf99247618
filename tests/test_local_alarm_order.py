"""A crash while the local alarm clock fires loses no wake: the wake is queued before the alarm
is deleted, so a process that dies in between finds the alarm still armed after its restart and
fires it again (a second wake is harmless; a lost one would leave the session asleep forever).
This is the order ActionAfterCompletion=DELETE gives a one-time schedule on AWS: the schedule is
deleted only after it invoked its target."""

from __future__ import annotations

from pathlib import Path

import pytest

from bide import ManualClock
from bide.local import LocalAlarms, LocalDb


class Died(Exception):
    """The process died while handing the wake to the queue."""


class DyingQueue:
    def __init__(self, die: bool) -> None:
        self.die = die
        self.woken: list[str] = []

    def send(self, session_id: str, body: str, dedup_id: str | None = None) -> bool:
        if self.die:
            raise Died(session_id)
        self.woken.append(session_id)
        return True


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "aws-like"])
def test_an_alarm_survives_a_crash_before_its_wake_is_queued(tmp_path: Path, exact: bool) -> None:
    clock = ManualClock()
    path = str(tmp_path / "alarms.sqlite")
    alarms = LocalAlarms(LocalDb(path), DyingQueue(die=True), clock, exact=exact)
    alarms.arm("s1", clock.now() + 30)
    clock.advance(180)  # past any moment the alarm may fire at
    with pytest.raises(Died):
        alarms.fire_due()
    # A new process on the same file: the alarm is still there and fires.
    queue = DyingQueue(die=False)
    restarted = LocalAlarms(LocalDb(path), queue, clock, exact=exact)
    assert [a.session_id for a in restarted.alarms()] == ["s1"]
    assert restarted.fire_due() == ["s1"]
    assert queue.woken and set(queue.woken) == {"s1"}
    assert restarted.alarms() == []
