"""The CDK construct that deploys bide: :class:`BideService`, for any CDK app.

Install with the ``cdk`` extra (``pip install 'bide[cdk]'``: aws-cdk-lib, constructs,
cdk-nag). One ``BideService`` is the whole serverless shape (DynamoDB, S3, SQS FIFO,
EventBridge Scheduler, three Lambda functions, an HTTP API, alarms) pointed at one app::

    import aws_cdk as cdk
    from bide.cdk import FEATURE_FLAGS, BideService

    app = cdk.App(context=dict(FEATURE_FLAGS))
    stack = cdk.Stack(app, "MyAgent")
    BideService(stack, "Bide", app_module="my_agent.app:app", app_paths=["my_agent"])
    app.synth()

The functions are bundled from the ``bide`` package this module belongs to, whether it runs
from a checkout of the repository or from an installed wheel (see :mod:`bide.cdk.bundling`).
Nothing here is imported by the rest of bide, and nothing of it is shipped to Lambda.
"""

from __future__ import annotations

try:
    from .bundling import SKIP_BUNDLING_CONTEXT, SKIP_BUNDLING_ENV, context_flag
    from .service import BideService
except ModuleNotFoundError as missing:
    # Say what to install rather than only which module the first import missed.
    if missing.name not in {"aws_cdk", "constructs", "jsii"}:
        raise
    raise ModuleNotFoundError(
        f"bide.cdk needs the cdk extra ({missing.name} is not installed): "
        "pip install 'bide[cdk]' (from a checkout of bide: pip install '.[cdk]')",
        name=missing.name,
    ) from missing

#: CDK feature flags the construct is written for (set them on your ``cdk.App``).
FEATURE_FLAGS = {
    # Grant S3 server access log delivery by bucket policy, not by ACL.
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
}

__all__ = [
    "FEATURE_FLAGS",
    "SKIP_BUNDLING_CONTEXT",
    "SKIP_BUNDLING_ENV",
    "BideService",
    "context_flag",
]
