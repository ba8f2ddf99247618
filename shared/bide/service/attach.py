"""The one way a service request opens a session: a harness over the deployment's store,
app, clock, ids and harness services, attached without running anything."""

from __future__ import annotations

from ..engine.harness import Harness
from .deps import Deps


async def attach(deps: Deps, session_id: str) -> Harness:
    """A harness attached to ``session_id`` (read the head and live tasks; run nothing)."""
    harness = Harness(
        deps.store,
        session_id,
        deps.app.task_kinds(),
        clock=deps.clock,
        ids=deps.ids,
        services=deps.harness_services(),
    )
    await harness.attach()
    return harness
