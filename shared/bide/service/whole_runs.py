"""Which sessions this process has run whole: its first run of each is a full pass.

Design 001 ch. VIII: the gates installed now decide, and "the first pass after open wakes
calls parked at call": after a restart (new code may bring new gates) every call parked at its
gates is asked again. A targeted pass (a signal's wake, :mod:`bide.engine.partial`) opens on one
task, so it reruns that task's gates only. To keep the rule, a process runs each session whole
the first time it runs it. New code means a new process (a deploy starts new Lambda execution
environments; the local stack restarts), so after a deploy the first wake of every session
reruns the gates of all its parked calls, as a full open did; later signals run their task
alone.

Kept per store object (one per process on Lambda; a test's or a twin's own elsewhere) and
bounded: a session forgotten is run whole once more, never less.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

#: Sessions remembered per store; past it the least recently run is forgotten (and run whole
#: again on its next wake: a spare full pass, never a missed one).
MAX_SESSIONS = 10_000

_runs: weakref.WeakKeyDictionary[object, OrderedDict[str, None]] = weakref.WeakKeyDictionary()


def ran_whole(store: object, session_id: str) -> bool:
    """Whether this process ran ``session_id`` whole through ``store`` (and still remembers)."""
    sessions = _runs.get(store)
    if sessions is None or session_id not in sessions:
        return False
    sessions.move_to_end(session_id)
    return True


def mark_whole(store: object, session_id: str) -> None:
    """Remember that a pass over every live task of ``session_id`` ran through ``store``."""
    sessions = _runs.get(store)
    if sessions is None:
        sessions = _runs[store] = OrderedDict()
    sessions[session_id] = None
    sessions.move_to_end(session_id)
    while len(sessions) > MAX_SESSIONS:
        sessions.popitem(last=False)
