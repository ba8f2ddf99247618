"""The floor of one signal-resumed wait: the least any implementation of design 001 on the
brief's AWS shape can pay, priced from the same table as the measured rows.

The shape (BRIEF section 2) fixes the requests a signal makes on its way to the next wait: the
caller reaches the signal function through API Gateway, the signal function stores the value
and re-arms the session through the SQS FIFO queue, and Lambda's event source mapping hands the
wake to one worker run, which reads the session, runs the task and parks it. Design 001 fixes
what the park must write: the key that woke the task is consumed (it refuses a second wait, and
its value stays readable until the task ends), and a sleep on a consumed key is refused, so the
park proves its next key was never consumed.

Everything else is granted at its best: Lambda durations and logs are free, every item fits
1 KB, no item is in an index, and the session's live state is one item. The floor keeps only
what no layout can avoid:

- a durable write for the signal (one item, not transactional: 1 WRU);
- one strongly consistent read of the session (1 RRU);
- the park: the task's next wait and the consumed key's record in one transaction. The
  record cannot live on the task's own item: it would grow with every wait (issue 12, goal 1),
  so it is a second item, and two items written together are a transaction (2 WRU each);
- the check of the next key, made once the run has chosen it: the cheapest serializable read
  of it is one ``TransactGetItems`` of the head and the key's item (2 RRU each; a
  ``ConditionCheck`` inside the park would cost 2 WRU).

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
        Line("DynamoDB writes", "dynamodb_wru", 1, "the signal's write: one item, 1 KB"),
        Line("DynamoDB reads", "dynamodb_rru", 1, "the worker's read of the session: one item"),
        Line("DynamoDB writes", "dynamodb_wru", 4, "the park: two items in one transaction"),
        Line("DynamoDB reads", "dynamodb_rru", 4, "the next key's check: TransactGetItems of 2"),
    ]


def floor_usd(batch: int = 1) -> dict[str, float]:
    """The floor in USD per wait, by report component."""
    usd: dict[str, float] = {}
    for line in floor_lines(batch):
        usd[line.component] = usd.get(line.component, 0.0) + line.units * P[line.price].usd
    return usd
