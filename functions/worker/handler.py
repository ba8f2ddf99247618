"""Lambda entry point of the worker function: the handler of :mod:`bide.handlers.worker`."""

from bide.handlers.worker import handler

__all__ = ["handler"]
