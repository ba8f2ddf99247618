"""Finishing the end of a session in a store that expires ended sessions.

The commit that ends a session (:data:`~bide.engine.store.base.SESSION_ENDED_KEY`) gives it
an expiry and stamps what it writes; what was written before, and the session's entry in its
owner's listing (:mod:`bide.service.owners`, another partition), is stamped afterwards by
:meth:`~bide.aws.ports.EndedSessions.stamp_ended`: too many items for one commit or one API
request's time. :func:`finish_end` runs at the end of every worker run (the end route wakes
the session's worker after its commit); for a session that does not need it, it costs
nothing (the store knows from the run's own reads). A crash or timeout midway fails the
run, and the wake's retry finishes the rest (stamping skips what is already stamped).
"""

from __future__ import annotations

from .deps import Deps
from .owners import index_entry


def finish_end(deps: Deps, session_id: str) -> int:
    """Stamp the ended session's items and owner index entry with its expiry when the store
    expires sessions and some may be left; how many items were stamped (0: nothing to do)."""
    ended = deps.ended_sessions
    if ended is None or not ended.needs_stamping(session_id):
        return 0
    entry = index_entry(deps.store, session_id)
    return ended.stamp_ended(session_id, [entry] if entry is not None else [])
