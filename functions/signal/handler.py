"""Lambda entry point of the signal function: the handler of :mod:`bide.handlers.signal`."""

from bide.handlers import load

handler = load("signal")  # the collector paused while it imports

__all__ = ["handler"]
