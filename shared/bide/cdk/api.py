"""How callers reach a BideService: the HTTP API, its routes, authorization and throttling.

One HTTP API fronts the signal and API functions: capability webhooks (the token in the path
is the credential), SigV4-signed signal deliveries and the sessions API. Its ``$default``
stage is throttled and writes an access log that never records the path (it would hold the
webhook token). The API is made in two steps because the functions need its URL (their
webhook base URL) and the routes need the functions. The resources are created directly in
the BideService's scope (not in a child construct) so their logical ids survive a change of
how this code is laid out.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import jsii
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

# Access log fields. No $context.path: on /hooks/{token} it would write the capability
# token (a credential) into the logs; the route key names the route without it.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "requestTime": "$context.requestTime",
        "routeKey": "$context.routeKey",
        "status": "$context.status",
        "sourceIp": "$context.identity.sourceIp",
        "caller": "$context.identity.userArn",
        "responseLength": "$context.responseLength",
        "latencyMs": "$context.responseLatency",
        "integrationError": "$context.integrationErrorMessage",
    },
    separators=(",", ":"),
)
DEFAULT_THROTTLE = apigw.ThrottleSettings(rate_limit=100, burst_limit=200)
#: The webhook route's own limits: callers are unauthenticated, so they get less than the
#: IAM routes and cannot use up the stage's budget. Route-level throttling overrides the
#: stage's default for that route
#: (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-protect.html;
#: the stage's RouteSettings are keyed by route key:
#: https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-apigatewayv2-stage-routesettings.html).
DEFAULT_WEBHOOK_THROTTLE = apigw.ThrottleSettings(rate_limit=20, burst_limit=40)
WEBHOOK_ROUTE_KEY = "POST /hooks/{token}"
#: The webhook's failure form (bide.service.failure_body): unauthenticated too, same limits.
WEBHOOK_FAILURE_ROUTE_KEY = "POST /hooks/{token}/failure"
#: A heartbeat on a webhook's key: unauthenticated like the webhook, with its limits.
WEBHOOK_BEAT_ROUTE_KEY = "POST /hooks/{token}/heartbeat"


@jsii.implements(apigw.IAccessLogSettings)
class _AccessLogSettings:
    def __init__(self, destination: apigw.IAccessLogDestination, log_format: str) -> None:
        self._destination = destination
        self._format = apigw_v1.AccessLogFormat.custom(log_format)

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw_v1.AccessLogFormat:
        return self._format


class Api:
    """The HTTP API (``HttpApi``); :meth:`add_routes` adds its stage (``DefaultStage``, logging
    to ``ApiAccessLogs``) and its routes once the functions exist."""

    def __init__(self, scope: Construct) -> None:
        self._scope = scope
        self.http_api = apigw.HttpApi(
            scope,
            "HttpApi",
            description="bide: capability webhooks, signals and the sessions API",
            create_default_stage=False,
        )

    def add_routes(
        self,
        *,
        signal_function: lambda_.IFunction,
        api_function: lambda_.IFunction,
        log_retention: logs.RetentionDays,
        removal: cdk.RemovalPolicy,
        throttle: apigw.ThrottleSettings | None,
        webhook_throttle: apigw.ThrottleSettings = DEFAULT_WEBHOOK_THROTTLE,
    ) -> tuple[apigw.HttpStage, apigw.HttpRoute]:
        """The ``$default`` stage and the eight routes; returns the stage and the webhook's (its
        failure form is :attr:`webhook_failure_route`, its heartbeat :attr:`webhook_beat_route`).
        ``throttle`` is the stage's default (the IAM routes); ``webhook_throttle`` the webhook
        route's own."""
        access_logs = logs.LogGroup(
            self._scope, "ApiAccessLogs", retention=log_retention, removal_policy=removal
        )
        stage = apigw.HttpStage(
            self._scope,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            access_log_settings=_AccessLogSettings(
                apigw.LogGroupLogDestination(access_logs), ACCESS_LOG_FORMAT
            ),
            throttle=throttle or DEFAULT_THROTTLE,
        )
        signal = integrations.HttpLambdaIntegration("Signal", signal_function)
        sessions = integrations.HttpLambdaIntegration("Sessions", api_function)
        iam_auth = authorizers.HttpIamAuthorizer()
        # The capability webhook: the unguessable token in the path is the credential (the
        # signal function resolves it to one session/task/signal/key), so callers that cannot
        # sign SigV4 requests (CI systems, SaaS webhooks) can deliver.
        (webhook_route,) = self.http_api.add_routes(
            path="/hooks/{token}",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=apigw.HttpNoneAuthorizer(),
        )
        (self.webhook_failure_route,) = self.http_api.add_routes(
            path="/hooks/{token}/failure",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=apigw.HttpNoneAuthorizer(),
        )
        # More specific than /sessions/{proxy+}, so API Gateway routes them (a value, and a
        # failure instead of one) to the signal function.
        for suffix in ("", "/failure"):
            self.http_api.add_routes(
                path="/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}" + suffix,
                methods=[apigw.HttpMethod.POST],
                integration=signal,
                authorizer=iam_auth,
            )
        # Heartbeats (bide.service.beats): the same two paths ending in /heartbeat, each
        # authorised like the path it extends.
        (self.webhook_beat_route,) = self.http_api.add_routes(
            path="/hooks/{token}/heartbeat",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=apigw.HttpNoneAuthorizer(),
        )
        self.http_api.add_routes(
            path="/sessions/{session_id}/tasks/{task_id}/signals/{signal}/{key}/heartbeat",
            methods=[apigw.HttpMethod.POST],
            integration=signal,
            authorizer=iam_auth,
        )
        for path in ("/sessions", "/sessions/{proxy+}"):
            self.http_api.add_routes(
                path=path, methods=[apigw.HttpMethod.ANY], integration=sessions, authorizer=iam_auth
            )
        # The L2 stage has no per-route settings: set them on its CloudFormation resource.
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        limits = {
            "ThrottlingBurstLimit": webhook_throttle.burst_limit,
            "ThrottlingRateLimit": webhook_throttle.rate_limit,
        }
        cfn_stage.route_settings = {
            WEBHOOK_ROUTE_KEY: limits,
            WEBHOOK_FAILURE_ROUTE_KEY: limits,
            WEBHOOK_BEAT_ROUTE_KEY: limits,
        }
        # A stage's RouteSettings may only name routes that exist when it is deployed.
        cfn_stage.node.add_dependency(webhook_route)
        cfn_stage.node.add_dependency(self.webhook_failure_route)
        cfn_stage.node.add_dependency(self.webhook_beat_route)
        return stage, webhook_route
