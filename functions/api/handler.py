"""Lambda entry point of the api function: the handler of :mod:`bide.handlers.api`."""

from bide.handlers.api import handler

__all__ = ["handler"]
