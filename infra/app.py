"""The repository's CDK app: one BideStack deploying the example agent (the construct is
``bide.cdk.BideService``; your own app imports it from there, see docs/deploy.md).

    npx cdk synth                      # cdk.json runs this file
    CDK_OUTDIR=out python infra/app.py # the same without the CLI

Settings come from CDK context (``cdk.json`` holds the defaults, ``-c name=value`` overrides
one): the stack name (``bide:stackName``), its environment (``bide:account``,
``bide:region``; unset: environment-agnostic, nothing looked up in an AWS account) and the
BideService props (``bide:tracing``, ``bide:retainData``, ``bide:modelAccess``, ...; the
list is :mod:`bide_stack.context`, described in docs/deploy.md). A bad or unknown ``bide:``
key stops synthesis with a message naming it. ``bide:skipBundling`` synthesizes a template
only (not deployable).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

import aws_cdk as cdk  # noqa: E402
from bide_stack import DEFAULT_APP_MODULE, BideStack  # noqa: E402
from bide_stack.context import ContextError, context_key_of, read_settings  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from bide.cdk import FEATURE_FLAGS  # noqa: E402


def build_app(context: Mapping[str, Any] | None = None) -> cdk.App:
    """The default app with cdk-nag's AwsSolutions checks as a synthesis-time validation.
    ``context`` is added to the app's own (the CLI's ``-c`` values and cdk.json arrive
    through the environment). Raises :class:`ContextError` naming a bad ``bide:`` key."""
    app = cdk.App(context={**FEATURE_FLAGS, **(context or {})})
    settings = read_settings(app.node.get_all_context())
    try:
        BideStack(
            app,
            settings.stack_name,
            env=settings.env,
            app_module=DEFAULT_APP_MODULE,
            app_paths=[ROOT / "examples"],
            service_options=settings.service_options,
        )
    except ValueError as exc:
        # The construct names its prop; say which context key set it.
        prop = str(exc).split(" ", 1)[0].split("[", 1)[0].rstrip(":")
        key = context_key_of(prop) if prop in settings.service_options else None
        if key is None:
            raise
        raise ContextError(f"context {key}: {exc}") from None
    # Synthesis fails (ValidationFailed, report in the output folder) on any finding that is
    # not acknowledged with a reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app


if __name__ == "__main__":
    try:
        build_app().synth()
    except ContextError as exc:
        print(f"bide: {exc}", file=sys.stderr)
        sys.exit(2)
