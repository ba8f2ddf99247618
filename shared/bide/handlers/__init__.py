"""The Lambda entry points of a deployment: ``worker``, ``signal`` and ``api``.

Each module holds one ``handler(event, context)`` over :mod:`bide.service`. A function's code
bundle (built by :mod:`bide.cdk`) has a ``handler.py`` at its root that imports the handler
from here with :func:`load`, so Lambda's ``handler.handler`` finds it; the repository's
``functions/<name>/handler.py`` are those same files.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["load"]


def load(function: str) -> Callable[[dict[str, Any], Any], Any]:
    """The ``handler`` of ``bide.handlers.<function>``, imported with the cyclic garbage
    collector paused, what it allocated then frozen.

    An import allocates tens of thousands of long-lived objects (modules, classes,
    functions) and almost no garbage, yet each allocation counts towards the collector's
    thresholds: on a function's cold start the import of its modules set off a full
    (generation 2) collection that walked every object the runtime and the import had made,
    20-30 ms of CPU, a third of what the handlers' import costs (measured with
    ``gc.callbacks`` on the worker; ``make bench``'s cold-start rows). Pausing the collector
    for the import and then moving what it made to the permanent generation
    (``gc.freeze``: "ignore them in all the future collections",
    https://docs.python.org/3/library/gc.html#gc.freeze) spares that walk now and in every
    later collection of the warm function. The price is that garbage made by the import
    itself (rare: a few cycles) is never freed. The collector runs again afterwards, whether
    the import succeeded or not."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        module = importlib.import_module(f"{__name__}.{function}")
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
    handler: Callable[[dict[str, Any], Any], Any] = module.handler
    return handler
