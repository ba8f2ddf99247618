"""The CDK stack as a whole: cdk-nag AwsSolutions (every acknowledgment specific and with a
reason), cfn-lint on the synthesized app, and the construct in a user's own app.

Everything synthesizes with ``bide:skipBundling`` (no installs, no network) and nothing here
talks to AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import ManualArgs, lint_file
from infra_kit import ROOT
from infra_kit import app as _app
from infra_kit import example_stack as _stack
from infra_kit import logical_id as _id
from infra_kit import resource as _resource

from bide import constants as c
from bide.cdk import BideService
from infra.bide_stack import BideStack


@pytest.fixture(scope="module")
def stack() -> BideStack:
    return _stack()


@pytest.fixture(scope="module")
def dev_stack() -> BideStack:
    """The other switches: X-Ray tracing on, data deleted with the stack."""
    return _stack(tracing=True, retain_data=False)


# --- a user's own app ------------------------------------------------------------------------


def test_the_construct_in_a_users_own_app(tmp_path):
    tools = tmp_path / "my_tools"
    tools.mkdir()
    (tools / "app.py").write_text("from bide.app import App\napp = App()\n")
    stack = cdk.Stack(_app(), "Mine")
    service = BideService(
        stack,
        "Agents",
        app_module="my_tools.app:app",
        app_paths=[tools],
        environment={"MODEL_ID": "some-model"},
    )
    template = Template.from_stack(stack)
    env = _resource(template, _id(stack, service.worker))["Properties"]["Environment"]
    assert env["Variables"][c.ENV_APP] == "my_tools.app:app"
    assert env["Variables"]["MODEL_ID"] == "some-model"
    warnings = Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp("appModule")
    )
    assert warnings == []


def test_app_module_must_be_importable_from_the_bundle(tmp_path):
    with pytest.raises(ValueError, match="module:app"):
        BideService(cdk.Stack(_app(), "A"), "S", app_module="no_attribute")
    stack = cdk.Stack(_app(), "B")
    BideService(stack, "S", app_module="elsewhere.app:app", app_paths=[tmp_path])
    warnings = Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp("cannot import it")
    )
    assert len(warnings) == 1


# --- cdk-nag and cfn-lint --------------------------------------------------------------------


def _unacknowledged(stack: cdk.Stack) -> list[str]:
    report = AwsSolutionsChecks(verbose=True).validate_scope(stack)
    return [
        f"{violation.rule_name} at {resource.construct_path}: {violation.description}"
        for violation in report.violations
        for resource in violation.violating_resources
    ]


def test_cdk_nag_has_no_unacknowledged_findings(stack, dev_stack):
    assert _unacknowledged(stack) == []
    assert _unacknowledged(dev_stack) == []


def _acknowledgments(scope: cdk.Stack) -> dict[str, str]:
    """rule finding -> reason, for every acknowledgment in the stack."""
    found: dict[str, str] = {}
    for construct in scope.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                found.update(entry.data)
    return found


def test_every_acknowledgment_is_specific_and_has_a_reason(stack, dev_stack):
    group = _id(stack, stack.service.schedule_group)
    bucket = _id(stack, stack.service.bucket)
    expected = {
        "AwsSolutions-L1",
        "AwsSolutions-APIG4",
        "AwsSolutions-SQS3",  # the schedules' dead-letter queue
        "AwsSolutions-SMG4",
        f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/*]",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:"
        f"<AWS::AccountId>:schedule/<{group}>/*]",
    }
    for scope, rules in (
        (stack, expected),
        (dev_stack, {*expected, "AwsSolutions-IAM5[Resource::*]"}),
    ):
        acknowledged = _acknowledgments(scope)
        assert {key.removeprefix("Annotation::") for key in acknowledged} == rules
        for reason in acknowledged.values():
            assert len(reason) >= 60, reason


def test_cdk_nag_reports_what_is_not_acknowledged():
    stack = _stack()
    stack.service.worker.add_to_role_policy(
        cdk.aws_iam.PolicyStatement(actions=["s3:*"], resources=["*"])
    )
    findings = _unacknowledged(stack)
    assert any("AwsSolutions-IAM5[Action::s3:*]" in f for f in findings)
    assert any("AwsSolutions-IAM5[Resource::*]" in f for f in findings)


def test_the_app_synthesizes_and_passes_cfn_lint(tmp_path):
    env = {
        **os.environ,
        "CDK_OUTDIR": str(tmp_path),
        "BIDE_SKIP_BUNDLING": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    # The app runs cdk-nag as a synthesis validation: any unacknowledged finding fails here.
    synth = subprocess.run(
        [sys.executable, str(ROOT / "infra" / "app.py")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert synth.returncode == 0, synth.stderr[-4000:]
    template = tmp_path / "Bide.template.json"
    assert template.is_file()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    # cfn-lint flags CDK's own W3005 (redundant DependsOn); every other rule applies.
    matches = lint_file(template, config=ManualArgs(ignore_checks=["W3005"]))
    assert [str(m) for m in matches] == []
