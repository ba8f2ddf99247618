"""The repository's CDK app: one BideStack deploying the example agent (the construct is
``bide.cdk.BideService``; your own app imports it from there, see docs/deploy.md).

    npx cdk synth                      # cdk.json runs this file
    CDK_OUTDIR=out python infra/app.py # the same without the CLI

Context flags (``-c name=value`` or cdk.json): ``bide:skipBundling`` (template only, not
deployable), ``bide:tracing`` (X-Ray), ``bide:retainData`` (false: the table and buckets are
deleted with the stack, for development). The stack is environment-agnostic: nothing here
looks anything up in an AWS account.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

import aws_cdk as cdk  # noqa: E402
from bide_stack import DEFAULT_APP_MODULE, BideStack  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from bide.cdk import FEATURE_FLAGS, context_flag  # noqa: E402


def build_app() -> cdk.App:
    """The default app with cdk-nag's AwsSolutions checks as a synthesis-time validation."""
    app = cdk.App(context=dict(FEATURE_FLAGS))
    BideStack(
        app,
        "Bide",
        app_module=DEFAULT_APP_MODULE,
        app_paths=[ROOT / "examples"],
        service_options={
            "tracing": context_flag(app, "bide:tracing"),
            "retain_data": context_flag(app, "bide:retainData", default=True),
        },
    )
    # Synthesis fails (ValidationFailed, report in the output folder) on any finding that is
    # not acknowledged with a reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app


if __name__ == "__main__":
    build_app().synth()
