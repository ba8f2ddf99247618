"""Lambda entry point of the worker function: the handler of :mod:`bide.handlers.worker`."""

from bide.handlers import load

handler = load("worker")  # the collector paused while it imports

__all__ = ["handler"]
