"""Lambda entry point of the api function: the handler of :mod:`bide.handlers.api`."""

from bide.handlers import load

handler = load("api")  # the collector paused while it imports

__all__ = ["handler"]
