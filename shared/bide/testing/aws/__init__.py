"""A strict twin of the AWS services Bide runs on, for testing apps in the deployed shape.

moto, DynamoDB Local and the local stack are all more forgiving than AWS: they deliver a FIFO
duplicate, fire a schedule on the second, never throttle. The twin models the documented edge
semantics instead (each rule cites its AWS page), in **simulated time** and with **seeded
randomness**, so hours of a deployment run in milliseconds and every run is reproducible.

The public API::

    from bide.testing.aws import AwsTwin, twin_config

    twin = AwsTwin(twin_config(template_json), seed=7, duplicate_rate=0.2)
    store = DynamoDBStore(table, client=twin.dynamodb(boto3_client), sleep=twin.clock.advance)
    deps = twin.deps(store, app)
    worker = twin.worker(deps)          # the real worker behind the event source mapping

    async def scenario():
        worker.start()
        ...                             # create a session, wake it
        await twin.clock.sleep(3 * 3600)   # three simulated hours

    twin.clock.run(scenario())

The parts are usable alone: :class:`SimClock` (a :class:`~bide.engine.clock.Clock` with
timers, ``advance`` and an async ``sleep``), :class:`SqsTwin`, :class:`SchedulerTwin`,
:class:`EventSourceMappingTwin`, :class:`DynamoDBTwin`, and :func:`twin_config` /
:func:`check_contract` on a synthesized CloudFormation template.
"""

from .clock import SimClock, SimulationStalled
from .dynamodb import DynamoDBTwin
from .errors import TwinUnsupported
from .lambda_esm import EventSourceMappingTwin, FunctionConfig, InvocationRecord, LambdaContext
from .scheduler import Invocation, SchedulerTwin
from .sqs import SqsTwin
from .stack import AwsTwin
from .template import (
    ContractBroken,
    QueueConfig,
    TwinConfig,
    check_contract,
    contract_problems,
    twin_config,
)

__all__ = [
    "AwsTwin",
    "ContractBroken",
    "DynamoDBTwin",
    "EventSourceMappingTwin",
    "FunctionConfig",
    "Invocation",
    "InvocationRecord",
    "LambdaContext",
    "QueueConfig",
    "SchedulerTwin",
    "SimClock",
    "SimulationStalled",
    "SqsTwin",
    "TwinConfig",
    "TwinUnsupported",
    "check_contract",
    "contract_problems",
    "twin_config",
]
