"""Cost per million signal-resumed waits: Bide (counted) vs Step Functions and Lambda durable
functions (their published per-transition / per-operation prices).

Bide's figures price the requests that ``bench_aws_requests.py`` counts on moto in this same
run (its function is imported). The peers are priced from what one wait costs them by their
own pricing pages; their request counts are not measured here. List prices, us-east-1, USD,
without free tiers; sources and the date they were found are in PRICES and in
docs/performance.md. A price that could not be found is left out and said so.

Run from the repository root:  PYTHONPATH=shared python bench/bench_cost.py
"""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import dataclass
from typing import Any

from bench_aws_requests import SCENARIOS, Tally, measure_requests

FOUND_ON = "2026-11-30"
MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    usd: float  # per unit
    unit: str
    source: str


PRICES: dict[str, Price] = {
    "dynamodb_wru": Price(
        0.625 / MILLION,
        "on-demand write request unit",
        "airbyte.com/data-engineering-resources/dynamodb-pricing (2025-07-21: after the "
        "Nov 2024 on-demand price cut); unit rules: docs.aws.amazon.com/whitepapers/latest/"
        "how-aws-pricing-works/dynamodb.html",
    ),
    "dynamodb_rru": Price(0.125 / MILLION, "on-demand read request unit", "as above"),
    "sqs_fifo": Price(
        0.50 / MILLION,
        "SQS FIFO request (per 64 KB chunk)",
        "cloudburn.io/blog/amazon-sqs-pricing (March 2026); factualminds.com/blog/"
        "amazon-sqs-pricing-64kb-rule-fifo-vs-standard (June 2026)",
    ),
    "sqs_standard": Price(0.40 / MILLION, "SQS standard request", "as above"),
    "scheduler_invocation": Price(
        1.00 / MILLION,
        "EventBridge Scheduler invocation",
        "cloudburn.io/blog/amazon-eventbridge-pricing (March 2026; 14M/month free not applied)",
    ),
    "lambda_request": Price(
        0.20 / MILLION,
        "Lambda request",
        "aws.amazon.com/lambda/pricing as transcribed by api-evangelist/aws-lambda "
        "plans/aws-lambda-plans-pricing.yml (read 2026-09-20)",
    ),
    "lambda_arm_gb_s": Price(
        0.0000133334,
        "Lambda GB-second, Arm (the stack's architecture)",
        "git.mcrn.ar/mariano/lambda_local_runner docs/lambdas-md/lambda-13-cost.md "
        "(2026-05-11; x86 $0.0000166667 matches the AWS page transcription above)",
    ),
    "sfn_transition": Price(
        0.025 / 1000,
        "Step Functions Standard state transition",
        "aws.amazon.com/step-functions/pricing/ (US East (N. Virginia) $0.0250 per 1,000)",
    ),
    "durable_operation": Price(
        8.00 / MILLION,
        "Lambda durable functions operation",
        "aws.amazon.com/lambda/pricing as transcribed by api-evangelist/aws-lambda "
        "(read 2026-09-20, labelled 'Durable Functions operations (example rate) $8.00/M')",
    ),
}
NOT_FOUND = (
    "Lambda durable functions' charges for data written and data retained (per GB) were not "
    "found in the sources searched: they are left out, so the durable-function rows are a "
    "lower bound. Step Functions' SendTaskSuccess and Lambda's "
    "SendDurableExecutionCallbackSuccess calls carry no listed per-call price and are not priced."
)

# Stated assumptions (not measured): how long each function runs per invocation, at the stack's
# default memory sizes (bide/cdk/service.py: worker 1024 MB, signal/api 512 MB).
DURATION_MS = {"worker": 150, "signal": 50, "api": 50}
MEMORY_MB = {"worker": 1024, "signal": 512, "api": 512}
# A durable function's resume invocation is priced like Bide's worker (same memory and
# duration), though it replays its whole history (see bench_durable_sdk.py).
DURABLE_MEMORY_MB, DURABLE_DURATION_MS = 1024, 150


def lambda_cost(function: str, invocations: float) -> float:
    gb_s = MEMORY_MB[function] / 1024 * DURATION_MS[function] / 1000
    return invocations * (PRICES["lambda_request"].usd + gb_s * PRICES["lambda_arm_gb_s"].usd)


def bide_cost(tally: Tally) -> dict[str, float]:
    """USD per one scenario run, by service."""
    sqs = scheduler = lam = 0.0
    for (_, operation), n in tally.requests.items():
        service, _, name = operation.partition(":")
        if service == "sqs":
            sqs += n * PRICES["sqs_fifo"].usd
        elif operation == "scheduler:Invocation":
            scheduler += n * PRICES["scheduler_invocation"].usd
        elif service == "lambda":
            lam += lambda_cost(name.split()[0], n)
    dynamodb = tally.wru * PRICES["dynamodb_wru"].usd + tally.rru * PRICES["dynamodb_rru"].usd
    return {"DynamoDB": dynamodb, "SQS": sqs, "Scheduler": scheduler, "Lambda": lam}


def durable_ops_per_wait(waits: int = 3) -> float:
    """Operations the SDK checkpoints per ``context.wait_for_callback`` (its local runner)."""
    from aws_durable_execution_sdk_python import DurableContext, durable_execution
    from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner

    holder: dict[str, Any] = {}

    def submit(callback_id: str, _ctx: Any) -> None:
        holder["runner"].send_callback_success(callback_id, b"1")

    @durable_execution
    def loop(event: Any, context: DurableContext) -> int:
        for i in range(event["waits"]):
            context.wait_for_callback(submit, name=f"w{i}")
        return int(event["waits"])

    with DurableFunctionTestRunner(handler=loop) as runner:
        holder["runner"] = runner
        result = runner.run(input=json.dumps({"waits": waits}), execution_timeout=60)
    return len(result.get_all_operations()) / waits


def peer_rows(ops_per_wait: float) -> dict[str, dict[str, float]]:
    """USD per wait for the peers, by line item."""
    resume = DURABLE_MEMORY_MB / 1024 * DURABLE_DURATION_MS / 1000
    invocation = PRICES["lambda_request"].usd + resume * PRICES["lambda_arm_gb_s"].usd
    handler = lambda_cost("signal", 1)  # a 512 MB, 50 ms function that handles one result
    return {
        "SFN: waitForTaskToken, 1 transition": {
            "Step Fn": PRICES["sfn_transition"].usd,
            "SQS": PRICES["sqs_standard"].usd,
        },
        "SFN: + Lambda on result + Choice, 3 tr.": {
            "Step Fn": 3 * PRICES["sfn_transition"].usd,
            "SQS": PRICES["sqs_standard"].usd,
            "Lambda": handler,
        },
        "durable: create_callback, 1 op": {
            "durable": PRICES["durable_operation"].usd,
            "Lambda": invocation,
        },
        f"durable: wait_for_callback, {ops_per_wait:g} ops": {
            "durable": ops_per_wait * PRICES["durable_operation"].usd,
            "Lambda": invocation,
        },
    }


COLUMNS = ("DynamoDB", "SQS", "Scheduler", "Lambda", "Step Fn", "durable")
LEGEND = (
    "Bide: signal -> next wait: a long-lived task resumed by a signal sleeps on its next key "
    "(signal function + worker). webhook -> result: a parked tool call resumed by its "
    "webhook ends. whole call via webhook: the call created through the API, run until it "
    "mints a webhook and parks, then that. timed wake -> re-park: an alarm fires, the task "
    "sleeps again (alarm re-armed).",
    "SFN: a Standard workflow Task with .waitForTaskToken whose token goes out by an SQS "
    "message (one transition per wait), or with a Lambda task handling each result and a "
    "Choice looping back (three). durable: one resume invocation per wait plus the "
    "operations checkpointed (create_callback: one; wait_for_callback: context, step, "
    "callback).",
)


def main() -> None:
    began = time.perf_counter()
    counts = measure_requests()
    ops = durable_ops_per_wait()
    rows: dict[str, dict[str, float]] = {
        "Bide: signal -> next wait": bide_cost(counts["signal -> wait"]),
        "Bide: webhook -> result": bide_cost(counts["webhook -> result"]),
    }
    start, hook = bide_cost(counts["tool start"]), bide_cost(counts["webhook -> result"])
    rows["Bide: whole call via webhook"] = {k: start[k] + hook[k] for k in start}
    rows["Bide: timed wake -> re-park"] = bide_cost(counts["timed -> re-park"])
    rows.update(peer_rows(ops))
    base = sum(rows["Bide: signal -> next wait"].values())

    say = textwrap.TextWrapper(
        width=96,
        initial_indent="    ",
        subsequent_indent="      ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    print(f"USD per million waits: list prices, us-east-1, no free tier, found on {FOUND_ON}")
    print("(sources below). Bide: the requests bench_aws_requests.py counted in this run.")
    print()
    width = max(len(r) for r in rows) + 1
    head = "".join(f"{c:>10}" for c in COLUMNS) + f"{'total':>9}{'/ Bide':>8}"
    print(f"    {'':<{width}}{head}")
    for label, items in rows.items():
        total = sum(items.values())
        cells = "".join(f"{items.get(c, 0.0) * MILLION:>10.2f}" for c in COLUMNS)
        print(f"    {label:<{width}}{cells}{total * MILLION:>9.2f}{total / base:>8.2f}")
    print()
    for line in LEGEND:
        print(say.fill(line))
    durations = ", ".join(f"{f} {DURATION_MS[f]} ms at {MEMORY_MB[f]} MB" for f in DURATION_MS)
    print(
        say.fill(
            f"Assumptions (stated, not measured): Lambda durations {durations}; a durable "
            f"function's resume {DURABLE_DURATION_MS} ms at {DURABLE_MEMORY_MB} MB; Arm prices; "
            "SQS event source polling while idle not included; DynamoDB capacity estimated "
            "from item sizes (local index writes not included). Scheduler API calls (create, "
            "delete schedule) carry no listed price and are not priced."
        )
    )
    print(say.fill(f"Operations per wait_for_callback (the SDK's local runner): {ops:g}."))
    print(say.fill(f"Not priced: {NOT_FOUND}"))
    print()
    print("    Prices:")
    for price in PRICES.values():
        print(say.fill(f"{price.unit}: ${price.usd * MILLION:g} per million [{price.source}]"))
    missing = [s for s in SCENARIOS if s not in counts]
    if missing:
        print(f"    (scenarios without counts: {missing})")
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
