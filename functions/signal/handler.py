"""Lambda entry point of the signal function: the handler of :mod:`bide.handlers.signal`."""

from bide.handlers.signal import handler

__all__ = ["handler"]
