"""The local stack on the embedded default: SQLite file, local alarm clock, in-process worker
and an HTTP server on 127.0.0.1 that feeds the same handlers as the Lambda functions.

Start it with ``python -m bide dev`` or :class:`LocalStack` in code.
"""

from .alarms import Alarm, LocalAlarms
from .db import LocalDb
from .queue import LocalWakeQueue
from .stack import DEFAULT_DB, DEFAULT_PORT, LocalStack, LocalStackError
from .thread import BackgroundStack

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_PORT",
    "Alarm",
    "BackgroundStack",
    "LocalAlarms",
    "LocalDb",
    "LocalStack",
    "LocalStackError",
    "LocalWakeQueue",
]
