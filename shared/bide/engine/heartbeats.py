"""Heartbeats: a beat moves a sleep's ``beat_by`` forward, as a pure rule.

A sleep that names a ``heartbeat`` (seconds) must hear a beat on one of its listed keys at
least that often, or it wakes with :class:`~bide.engine.state.WakeHeartbeat` and its open
keys expire (:func:`~bide.engine.rules.sleep_wakeup`). A beat is not a value: it never
occupies the key, so the value that ends the wait can still come on it.

:func:`decide_beat` answers with the results of a signal value
(:class:`~bide.engine.signals.SignalResult`), checked in this order (the same checks as a
value's, :func:`~bide.engine.rules.refuse_key`):

* ``not_found``: no such task;
* ``closed``: the task ended, is ending or is abort-marked;
* ``duplicate``: the key already holds a value: the wait it served is over (or about to be);
* ``closed``: the key expired, or the deadline of a sleep on the key (``until`` or
  ``beat_by``) has passed. As for a value, the key is then marked expired, so nothing later
  can contradict the answer;
* ``delivered``: for a sleep on the key with a heartbeat, ``beat_by`` becomes
  ``now + heartbeat`` (the record to write); otherwise nothing is written: the heartbeat
  clock starts when the sleep parks, so a beat before that (or for a wait without a
  heartbeat) has nothing to move and is simply acknowledged.

A key ending in ``.*`` is taken as written (no stream member is chosen): a sleep never
lists a stream key, so a beat to one is acknowledged and moves nothing.
"""

from __future__ import annotations

from .records import TaskRecord
from .rules import SignalDecision, bump, refuse_key, sleeping_on
from .signals import SignalResult, slot_name
from .slots import SlotLookup
from .state import Sleeping


def decide_beat(
    record: TaskRecord | None, signal: str, key: str, now: float, *, moved: SlotLookup
) -> SignalDecision:
    """What a beat on ``signal``/``key`` of ``record`` does at ``now`` (see the module)."""
    if record is None:
        return SignalDecision(SignalResult.NOT_FOUND)
    name = slot_name(signal, key)
    refused = refuse_key(record, name, now, moved=moved)  # a value's checks and answers
    if refused is not None:
        return refused
    state = record.state
    if isinstance(state, Sleeping) and state.heartbeat is not None and sleeping_on(record, name):
        moved_on = state.replace(beat_by=now + state.heartbeat)
        return SignalDecision(SignalResult.DELIVERED, bump(record, state=moved_on))
    return SignalDecision(SignalResult.DELIVERED)
