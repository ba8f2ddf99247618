"""What every CLI command shares, kept below :mod:`bide.cli` so the command modules of
:mod:`bide.local` can use it: the exit codes, the failure that ends a command with one, and
the default wait for one HTTP answer.

Exit codes: 0 done; 1 the server refused the request; 2 bad usage; 3 the server could not be
reached or the request could not be made; 4 ``bide watch`` reached its ``--timeout`` before the
session went idle (the whole table is in :mod:`bide.cli`).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_TIMEOUT = 4

#: Seconds a command waits for one HTTP answer unless ``--timeout`` says otherwise.
HTTP_TIMEOUT_SECONDS = 30.0


class CommandFailed(Exception):
    """Ends a command with a message on stderr and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
