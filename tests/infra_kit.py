"""Shared pieces of the CDK stack tests: the app with CDK's feature flags and no bundling,
the example stack, and logical-id lookups in a synthesized template."""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT
from infra.bide_stack import BideStack

ROOT = Path(__file__).resolve().parents[1]


def app() -> cdk.App:
    """An app with CDK's feature flags that synthesizes without bundling (no installs)."""
    return cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})


def example_stack(**service_options: Any) -> BideStack:
    """The project's stack around the examples' app, with ``service_options`` for BideService."""
    return BideStack(app(), "Bide", app_paths=[ROOT / "examples"], service_options=service_options)


def logical_id(stack: cdk.Stack, construct: Any) -> str:
    """Logical id of a construct's CloudFormation resource (or of a CfnResource itself)."""
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(element)


def resource(template: Template, logical_id: str) -> dict[str, Any]:
    """One resource of a synthesized template, by logical id."""
    return template.to_json()["Resources"][logical_id]
