"""What a path parameter of the HTTP routes may hold: shared by the sessions API's models
(:mod:`bide.service.api_models`) and the signal routes, which must not import those models."""

from __future__ import annotations

SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:@=+-]{1,128}$"
MAX_NAME = 256  # task ids, signal names and keys in a path
