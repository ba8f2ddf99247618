"""Creating a task: the record a new task starts as, or the task a key already names.

Kept apart from ``harness.py`` (which calls it for ``Harness.create_task`` and for tasks a
phase or a hook creates: ``Kernel.new_task``) so the harness stays its public face.
"""

from __future__ import annotations

from typing import Any

from .errors import DefinitionError, KeyReuseError, UnknownTaskKind
from .ids import keyed_id
from .kernel import Draft, Kernel, require_json
from .records import TaskRecord
from .state import Pending
from .tasks import TaskDefinition


def new_task(
    h: Kernel,
    d: Draft,
    kind: TaskDefinition,
    input: Any,
    *,
    key: str | None,
    owner: str | None,
    background: bool,
) -> str:
    """Stage a new task of ``kind`` in ``d`` and return its id; with ``key``, the task that
    key already names when it has this kind and input (another raises KeyReuseError)."""
    if h._defs.get((kind.name, kind.version)) is not kind:
        raise UnknownTaskKind(
            f"task kind {kind.name!r} v{kind.version} is not registered with this harness"
        )
    value = kind.validate_input(input)
    require_json(value, f"input of task kind {kind.name!r}")
    if key is not None:
        task_id = keyed_id("t-", h.session_id, owner or "", key)
        existing = d.find(task_id)
        if existing is not None:
            if existing.kind != kind.name or existing.input != value:
                raise KeyReuseError(
                    f"key {key!r} already names a {existing.kind!r} task with other input"
                )
            return task_id
    else:
        task_id = h.ids.new_id("t-")
        for _ in range(8):  # an id source that repeats (e.g. after a restart) never overwrites
            if d.find(task_id) is None:
                break
            task_id = h.ids.new_id("t-")
        else:
            raise DefinitionError(f"the id source keeps returning used ids ({task_id!r})")
    checkpoint = kind.initial(value)
    d.put(
        TaskRecord(
            id=task_id,
            session_id=h.session_id,
            kind=kind.name,
            version=kind.version,
            input=value,
            owner=owner,
            background=background,
            key=key,
            state=Pending(checkpoint=checkpoint),
            created_at=h.clock.now(),
        )
    )
    return task_id
