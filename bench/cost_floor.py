"""The floor of one signal-resumed wait: a lower bound on what any implementation of design
001 on the brief's AWS shape pays, priced from the same table as the measured rows.

The shape (BRIEF section 2) fixes the requests a signal makes on its way to the next wait: the
caller reaches the signal function through API Gateway, the signal function stores the value
and re-arms the session through the SQS FIFO queue, and Lambda's event source mapping hands the
wake to one worker run, which runs the task and parks it. Design 001 fixes what must be
durable: the signal is a commit on the session's line (its result, ``delivered`` or
``closed``, is decided against the task and the key's deadline in that commit), the park is
another, and the key that woke the task is consumed for good: it refuses a second wait, and
its value stays readable until the task ends.

Everything else is granted at its most generous, whether or not a sound design could reach
it: Lambda durations and logs are free; the session's whole live state is one item of at most
1 KB, so a commit is one conditional write of one item, outside any transaction; the worker
reads nothing (the state could travel in the wake message); the consumed key's record is its
own 1 KB item, written on its own (a session item holding every consumed key would grow with
every wait, against issue 12's goal 1); and the check that the next key was never consumed is
one strongly consistent GetItem of that record. What is left is what no layout avoids:

- the signal's commit: 1 WRU;
- the park's commit: 1 WRU;
- the consumed key's record: 1 WRU;
- the next key's check: 1 RRU.

With the event source mapping's batches of ten (a busy queue), its ReceiveMessage and
DeleteMessageBatch and the worker's invocation are shared by ten waits: the second row.
``tests/test_bench_cost_rules.py`` meters each DynamoDB line's request on moto and checks the
units here against the meter.
"""

from __future__ import annotations

from dataclasses import dataclass

import cost_model as cm

P = cm.PRICES
#: How the report names one unit of each price the floor uses.
UNIT_NAMES = {
    "apigw_http": "API Gateway request",
    "lambda_request": "Lambda request",
    "sqs_fifo": "SQS FIFO request",
    "dynamodb_wru": "WRU",
    "dynamodb_rru": "RRU",
}


@dataclass(frozen=True)
class Line:
    """One thing every wait pays: ``units`` of the price ``price`` (a key of
    :data:`cost_model.PRICES`), under a component of the report, for ``why``."""

    component: str
    price: str
    units: float
    why: str


def floor_lines(batch: int = 1) -> list[Line]:
    """The floor's lines when the event source mapping hands the worker ``batch`` wakes at a
    time (1: a quiet queue, as the measured rows run; 10: its largest FIFO batch)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return [
        Line("API Gateway", "apigw_http", 1, "the signal's request"),
        Line("Lambda requests", "lambda_request", 1, "the signal function"),
        Line("Lambda requests", "lambda_request", 1 / batch, "the worker run"),
        Line("SQS", "sqs_fifo", 1, "the wake's SendMessage"),
        Line("SQS", "sqs_fifo", 2 / batch, "the mapping's ReceiveMessage and DeleteMessageBatch"),
        Line("DynamoDB writes", "dynamodb_wru", 1, "the signal's commit: one 1 KB item"),
        Line("DynamoDB writes", "dynamodb_wru", 1, "the park's commit: one 1 KB item"),
        Line("DynamoDB writes", "dynamodb_wru", 1, "the consumed key's record: its own item"),
        Line("DynamoDB reads", "dynamodb_rru", 1, "the next key's check: one GetItem"),
    ]


def floor_usd(batch: int = 1) -> dict[str, float]:
    """The floor in USD per wait, by report component."""
    usd: dict[str, float] = {}
    for line in floor_lines(batch):
        usd[line.component] = usd.get(line.component, 0.0) + line.units * P[line.price].usd
    return usd
