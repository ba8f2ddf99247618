"""CDK constructs that deploy bide: :class:`BideService` for your own app, :class:`BideStack`
for a stack of its own. ``bide`` itself must be importable (the repository's ``shared/``
folder on ``sys.path``); when it is not, the copy next to this package is used."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# The construct reads bide's constants and table layout; a user's CDK app that vendors this
# repository need not put shared/ on the path itself.
if importlib.util.find_spec("bide") is None:  # pragma: no cover - depends on the caller
    sys.path.append(str(Path(__file__).resolve().parents[2] / "shared"))

from .bundling import SKIP_BUNDLING_CONTEXT, SKIP_BUNDLING_ENV
from .service import BideService
from .stack import DEFAULT_APP_MODULE, BideStack

#: CDK feature flags the stack is written for (infra/app.py and cdk.json set them).
FEATURE_FLAGS = {
    # Grant S3 server access log delivery by bucket policy, not by ACL.
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
}

__all__ = [
    "DEFAULT_APP_MODULE",
    "FEATURE_FLAGS",
    "SKIP_BUNDLING_CONTEXT",
    "SKIP_BUNDLING_ENV",
    "BideService",
    "BideStack",
]
