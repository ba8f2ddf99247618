"""The repository's default stack, :class:`BideStack`: one :class:`bide.cdk.BideService` and
its outputs. The construct itself lives in the package (``from bide.cdk import BideService``);
this package keeps the names the repository's app and older code import from here. ``bide``
must be importable (the repository's ``shared/`` folder on ``sys.path``, or bide installed);
when it is not, the copy in this repository is used."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# A CDK app that vendors this repository need not put shared/ on the path itself.
if importlib.util.find_spec("bide") is None:  # pragma: no cover - depends on the caller
    sys.path.append(str(Path(__file__).resolve().parents[2] / "shared"))

from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT, SKIP_BUNDLING_ENV, BideService

from .stack import DEFAULT_APP_MODULE, BideStack

__all__ = [
    "DEFAULT_APP_MODULE",
    "FEATURE_FLAGS",
    "SKIP_BUNDLING_CONTEXT",
    "SKIP_BUNDLING_ENV",
    "BideService",
    "BideStack",
]
