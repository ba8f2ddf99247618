"""BideStack: a stack holding one :class:`bide.cdk.BideService` and its outputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from bide.cdk import BideService

#: The example agent the repository's own app deploys.
DEFAULT_APP_MODULE = "examples.agent_app:app"


class BideStack(cdk.Stack):
    """One BideService (``construct id "Bide"``) with outputs for its API URL, table and queue.

    ``service_options`` are passed to :class:`BideService`; the remaining keyword arguments
    go to :class:`aws_cdk.Stack` (description, env, tags, ...).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        app_module: str = DEFAULT_APP_MODULE,
        app_paths: Sequence[str | Path] = (),
        service_options: dict[str, Any] | None = None,
        **stack_options: Any,
    ) -> None:
        stack_options.setdefault(
            "description", "bide: durable agent sessions (DynamoDB, SQS FIFO, Scheduler, Lambda)"
        )
        super().__init__(scope, construct_id, **stack_options)
        self.service = BideService(
            self, "Bide", app_module=app_module, app_paths=app_paths, **(service_options or {})
        )
        cdk.CfnOutput(self, "ApiUrl", value=self.service.api_url, description="HTTP API base URL")
        cdk.CfnOutput(
            self, "TableName", value=self.service.table.table_name, description="Sessions table"
        )
        cdk.CfnOutput(
            self, "QueueUrl", value=self.service.queue.queue_url, description="Wake queue (FIFO)"
        )
