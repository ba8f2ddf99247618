"""The repository app's settings from CDK context (``infra/bide_stack/context.py``) and the
Bedrock model access prop.

The app is synthesized the way the CDK CLI runs it: ``python infra/app.py`` with the context
in ``CDK_CONTEXT_JSON`` (cdk.json's values, then each ``-c key=value`` as a string), bundling
skipped. Nothing contacts AWS.
"""

from __future__ import annotations

import os

os.environ["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from bide.cdk import FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT, BideService
from bide.cdk.functions import MODEL_ACTIONS, model_arns
from infra.bide_stack import BideStack
from infra.bide_stack.context import ContextError, known_keys, read_settings

ROOT = Path(__file__).resolve().parents[1]
CDK_JSON = json.loads((ROOT / "cdk.json").read_text())["context"]
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"
PROFILE = "us.anthropic.claude-sonnet-4-20250514-v1:0"


def _synth_app(tmp_path: Path, **overrides: str) -> subprocess.CompletedProcess[str]:
    """``cdk synth -c key=value ...`` without the CLI: cdk.json's context, then the overrides
    as strings, in CDK_CONTEXT_JSON."""
    context = {**CDK_JSON, SKIP_BUNDLING_CONTEXT: True, **overrides}
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps(context)}
    env.pop("BIDE_SKIP_BUNDLING", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "infra" / "app.py")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def _of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _statements(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    found = []
    for policy in _of_type(template, "AWS::IAM::Policy").values():
        roles = [r["Ref"] for r in policy["Properties"]["Roles"]]
        if any(r.startswith(role_prefix) for r in roles):
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def test_context_overrides_reach_the_template(tmp_path):
    done = _synth_app(
        tmp_path,
        **{
            "bide:stackName": "SmokeTest",
            "bide:account": "123456789012",
            "bide:region": "eu-west-1",
            "bide:workerMaxConcurrency": "25",
            "bide:reservedConcurrency": "worker=30,api=3",
            "bide:adminPrincipals": "arn:aws:iam::123456789012:role/Ops",
            "bide:modelAccess": f"{HAIKU},{PROFILE}",
            "bide:retainData": "false",
            "bide:workerTimeoutSeconds": "120",
            "bide:logRetentionDays": "7",
            "bide:alarmEmail": "ops@example.com",
            "bide:sessionRetentionDays": "0",
        },
    )
    assert done.returncode == 0, done.stderr[-4000:]
    template = json.loads((tmp_path / "SmokeTest.template.json").read_text())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"]["SmokeTest"]["environment"] == "aws://123456789012/eu-west-1"

    (mapping,) = _of_type(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 25}
    functions = {
        str(r["Properties"].get("Description")).removeprefix("bide "): r["Properties"]
        for r in _of_type(template, "AWS::Lambda::Function").values()
    }
    assert functions["worker"]["Timeout"] == 120
    assert functions["worker"]["ReservedConcurrentExecutions"] == 30
    assert functions["api"]["ReservedConcurrentExecutions"] == 3
    assert "ReservedConcurrentExecutions" not in functions["signal"]
    variables = functions["worker"]["Environment"]["Variables"]
    assert variables["BIDE_ADMIN_PRINCIPALS"] == "arn:aws:iam::123456789012:role/Ops"
    (table,) = _of_type(template, "AWS::DynamoDB::Table").values()
    assert table["DeletionPolicy"] == "Delete"
    assert variables["BIDE_RETENTION_SECONDS"] == "0"  # ended sessions kept forever
    retention = {
        r["Properties"].get("RetentionInDays")
        for r in _of_type(template, "AWS::Logs::LogGroup").values()
    }
    assert retention == {7}
    (subscription,) = _of_type(template, "AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Endpoint"] == "ops@example.com"
    bedrock = [s for s in _statements(template, "Bideworkerrole") if "bedrock" in json.dumps(s)]
    assert len(bedrock) == 1 and sorted(bedrock[0]["Action"]) == sorted(MODEL_ACTIONS)
    assert len(bedrock[0]["Resource"]) == 3  # the model; the profile and the model it routes to


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("bide:workerMaxConcurency", "5", "unknown context key 'bide:workerMaxConcurency'"),
        ("bide:workerMaxConcurrency", "1", "bide:workerMaxConcurrency='1': must be from 2 to 1000"),
        ("bide:workerMaxConcurrency", "ten", "bide:workerMaxConcurrency='ten': must be a whole"),
        ("bide:retainData", "maybe", "bide:retainData='maybe': must be true or false"),
        ("bide:region", "Mars", "bide:region='Mars': must be an AWS region"),
        ("bide:stackName", "1bad name", "bide:stackName='1bad name': must be a stack name"),
        ("bide:reservedConcurrency", "worker:5", "bide:reservedConcurrency='worker:5': must look"),
        ("bide:logRetentionDays", "8", "bide:logRetentionDays='8': must be a CloudWatch Logs"),
        ("bide:alarmEmail", "ops", "bide:alarmEmail='ops': must be an e-mail address"),
        ("bide:sessionRetentionDays", "-1", "bide:sessionRetentionDays='-1': must be from 0"),
    ],
)
def test_a_bad_context_value_is_refused_naming_its_key(key, value, says):
    with pytest.raises(ContextError) as refused:
        read_settings({**CDK_JSON, key: value})
    assert says in str(refused.value)


def test_a_bad_prop_value_from_context_names_the_key(tmp_path):
    # Checked by the construct (not the parser): the app names the context key that set it.
    done = _synth_app(tmp_path, **{"bide:reservedConcurrency": "workers=5"})
    assert done.returncode == 2
    assert "bide: context bide:reservedConcurrency: reserved_concurrency: 'workers'" in done.stderr
    done = _synth_app(tmp_path, **{"bide:modelAccess": "not a model"})
    assert done.returncode == 2
    assert "bide:modelAccess: model_access: 'not a model' is not a Bedrock model id" in done.stderr
    done = _synth_app(tmp_path, **{"bide:tracng": "true"})
    assert done.returncode == 2
    assert "unknown context key 'bide:tracng'" in done.stderr
    assert not (tmp_path / "Bide.template.json").exists()


def test_cdk_json_holds_the_defaults_the_code_has():
    assert {k for k in CDK_JSON if k.startswith("bide:")} <= set(known_keys())
    settings = read_settings(CDK_JSON)
    assert (settings.stack_name, settings.env) == ("Bide", None)

    def template(options: dict[str, Any]) -> dict[str, Any]:
        app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
        return Template.from_stack(BideStack(app, "Bide", service_options=options)).to_json()

    # cdk.json's values change nothing: they are the construct's own defaults.
    assert template(settings.service_options) == template({})


# --- Bedrock model access ----------------------------------------------------------------------


def _service(**options: Any) -> tuple[cdk.Stack, BideService]:
    app = cdk.App(context={**FEATURE_FLAGS, SKIP_BUNDLING_CONTEXT: True})
    stack = BideStack(app, "Bide", service_options=options)
    return stack, stack.service


def test_model_access_grants_invoke_on_those_models_to_the_worker_only():
    stack, _ = _service(
        model_access=[HAIKU, PROFILE, "arn:aws:bedrock:us-west-2::foundation-model/x.y-v1"]
    )
    template = Template.from_stack(stack).to_json()
    bedrock = [s for s in _statements(template, "Bideworkerrole") if "bedrock" in json.dumps(s)]
    assert len(bedrock) == 1
    statement = bedrock[0]
    assert sorted(statement["Action"]) == [
        "bedrock:InvokeModel",
        "bedrock:InvokeModelWithResponseStream",
    ]
    resources = [json.dumps(r) for r in statement["Resource"]]
    assert len(resources) == 4
    assert any(f"::foundation-model/{HAIKU}" in r and '"AWS::Region"' in r for r in resources)
    assert any(f":inference-profile/{PROFILE}" in r for r in resources)
    assert any(":bedrock:*::foundation-model/anthropic.claude-sonnet-4" in r for r in resources)
    assert '"arn:aws:bedrock:us-west-2::foundation-model/x.y-v1"' in resources
    assert "*" not in statement["Resource"]
    for other in ("Bidesignalrole", "Bideapirole"):
        assert "bedrock" not in json.dumps(_statements(template, other))


def test_no_model_access_by_default():
    stack, _ = _service()
    assert "bedrock" not in json.dumps(Template.from_stack(stack).to_json())


@pytest.mark.parametrize(
    "bad", ["", " anthropic.x-v1", "*", "arn:aws:s3:::bucket", "Model With Spaces"]
)
def test_model_access_refuses_what_is_not_a_model(bad):
    with pytest.raises(ValueError, match="model_access: "):
        model_arns([bad])
