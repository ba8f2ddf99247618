"""Pricing and printing for ``bench_cost.py``: USD per million waits by component, for each
route and history size, and the same for Lambda durable functions' ``create_callback``."""

from __future__ import annotations

import textwrap

import cost_floor
import cost_model as cm
from cost_meter import Round

P = cm.PRICES
# Notes under the tables: indented, wrapped at 100 columns.
SAY = textwrap.TextWrapper(width=100, initial_indent="    ", subsequent_indent="      ")
COMPONENTS = (
    "API Gateway",
    "Lambda requests",
    "Lambda duration",
    "DynamoDB writes",
    "DynamoDB index writes",
    "DynamoDB reads",
    "SQS",
    "Scheduler",
    "S3",
    "Secrets Manager",
    "CloudWatch Logs",
    "durable operations",
)
# A durable function deployed as Lambda's defaults have it (Text log format, so no system log
# level filtering) writes START, END and REPORT for each invocation: about 260 bytes
# (cost_model.platform_log in Text format). Bide's stack turns its own off
# (bide.cdk.functions.LOGGING_CONFIG); a durable function's deployer could do the same, which
# would take about $0.12 per million off the durable column.
PLATFORM_LOG_BYTES = 260


def bide_usd(r: Round, memory: dict[str, int]) -> dict[str, float]:
    """USD for one wait, by component."""
    ops = r.requests
    invocations = sum(n for k, n in ops.items() if k.startswith("lambda:"))
    duration = sum(
        cm.lambda_usd(0, cm.billed_ms(cpu, memory[f]), memory[f]) for f, cpu in r.cpu_s.items()
    )
    s3_put = sum(n for k, n in ops.items() if k.split(":")[1] in ("PutObject", "ListObjectsV2"))
    s3_other = sum(n for k, n in ops.items() if k.startswith("s3:")) - s3_put
    return {
        "API Gateway": r.apigw * P["apigw_http"].usd,
        "Lambda requests": invocations * P["lambda_request"].usd,
        "Lambda duration": duration,
        "DynamoDB writes": r.wru * P["dynamodb_wru"].usd,
        "DynamoDB index writes": r.wru_index * P["dynamodb_wru"].usd,
        "DynamoDB reads": r.rru * P["dynamodb_rru"].usd,
        "SQS": r.sqs_chunks * P["sqs_fifo"].usd,
        "Scheduler": ops["scheduler:Invocation"] * P["scheduler_invocation"].usd,
        "S3": s3_put * P["s3_put"].usd + s3_other * P["s3_get"].usd,
        "Secrets Manager": sum(n for k, n in ops.items() if k.startswith("secretsmanager:"))
        * P["secrets_api"].usd,
        "CloudWatch Logs": r.log_bytes * P["logs_ingest"].usd,
    }


def durable_usd(cpu_s: float, memory_mb: int) -> dict[str, float]:
    """``create_callback`` + ``result()``: one operation and one resume invocation whose
    duration is the measured CPU time, billed as Bide's are."""
    return {
        "Lambda requests": P["lambda_request"].usd,
        "Lambda duration": cm.lambda_usd(0, cm.billed_ms(cpu_s, memory_mb), memory_mb),
        "CloudWatch Logs": PLATFORM_LOG_BYTES * P["logs_ingest"].usd,
        "durable operations": P["durable_operation"].usd,
    }


def print_report(
    results: dict[tuple[str, int], Round],
    durable_cpu: dict[int, float],
    memory: dict[str, int],
    history: tuple[int, ...],
    routes: tuple[str, ...],
    rounds: int,
) -> None:
    cols = [(route, n) for route in routes for n in history if (route, n) in results]
    costs = {col: bide_usd(results[col], memory) for col in cols}
    durable = {n: durable_usd(durable_cpu[n], memory["worker"]) for n in history}
    print(f"USD per million signal-resumed waits; us-east-1 list prices found {cm.FOUND_ON};")
    print("no free tier. Columns: route / waits of history.")
    print()
    head = "".join(f"{f'{r[:4]} {n:,}':>11}" for r, n in cols) + "".join(
        f"{f'dur {n:,}':>11}" for n in history
    )
    print(f"    {'':<24}{head}")
    for comp in COMPONENTS:
        cells = [costs[col].get(comp, 0.0) for col in cols] + [
            durable[n].get(comp, 0.0) for n in history
        ]
        print(f"    {comp:<24}" + "".join(f"{v * cm.MILLION:>11.3f}" for v in cells))
    totals = [sum(costs[col].values()) for col in cols]
    dtotals = [sum(durable[n].values()) for n in history]
    print(f"    {'total':<24}" + "".join(f"{v * cm.MILLION:>11.2f}" for v in totals + dtotals))
    ratios = [t / dtotals[history.index(n)] for t, (_, n) in zip(totals, cols, strict=True)]
    print(f"    {'/ create_callback':<24}" + "".join(f"{v:>11.2f}" for v in ratios))
    print(f"    {'/ $10.20 (docs figure)':<24}" + "".join(
        f"{t * cm.MILLION / 10.20:>11.2f}" for t in totals))  # fmt: skip
    print_floor(cols, dtotals, history)
    check_above_floor(cols, totals)
    print_verdict(cols, ratios, dtotals, history)
    print()
    print("    measured per wait:")
    for col in cols:
        r = results[col]
        cpu = ", ".join(
            f"{f} {s * 1000:.1f} ms CPU -> {cm.billed_ms(s, memory[f])} ms billed at {memory[f]} MB"
            for f, s in r.cpu_s.items()
        )
        aws = ", ".join(f"{k} {v}" for k, v in sorted(r.requests.items()))
        print(SAY.fill(
            f"{col[0]} {col[1]:,}: {cpu}; DynamoDB {r.wru:g} WRU + {r.wru_index:g} index WRU, "
            f"{r.rru:g} RRU; SQS {r.sqs_chunks} chunks; logs {r.log_bytes} bytes; "
            f"requests: {aws}"
        ))  # fmt: skip
    for n in history:
        print(SAY.fill(
            f"durable {n:,}: resume invocation {durable_cpu[n] * 1000:.1f} ms CPU -> "
            f"{cm.billed_ms(durable_cpu[n], memory['worker'])} ms billed at "
            f"{memory['worker']} MB (the worker's size)"
        ))  # fmt: skip
    print()
    notes = [
        f"Counted rounds per cell: {rounds} (request counts equal; CPU the median). CPU was "
        "measured on this machine's core and scaled by 1769 / memory MB (Lambda's CPU share); "
        "Graviton's speed differs, and wall time waiting on AWS (billed, not CPU) is not "
        "included: Lambda duration is a lower bound for both systems.",
        "Not included: data transfer out, DynamoDB and S3 storage, CloudWatch Logs storage, "
        "SQS idle polling by the event source mapping (per queue, not per wait), the durable "
        "functions' data written and retained (no price found), the durable side's way in for "
        "an external caller (its SendDurableExecutionCallbackSuccess has no listed price; a "
        "webhook in front of it would add API Gateway and a Lambda invocation).",
        "busy: an extra, labelled shape, not the goal's: the IAM route with ten sessions "
        "signalled before one poll hands all ten wakes to one worker run (the event source "
        "mapping's largest FIFO batch), divided by ten; compare it with the floor's batches "
        "of 10, not with the quiet-queue columns.",
    ]
    for note in notes:
        print(SAY.fill(note))
    print()
    print("    Prices:")
    for price in P.values():
        print(SAY.fill(f"{price.unit}: ${price.usd * cm.MILLION:.6g} per million [{price.source}]"))


def print_floor(
    cols: list[tuple[str, int]], dtotals: list[float], history: tuple[int, ...]
) -> None:
    """The floor of the shape (``cost_floor``): its total in every column, its ratio to
    ``create_callback`` at the column's history, and its lines."""
    print()
    for batch, label in ((1, "quiet queue"), (10, "batches of 10")):
        total = sum(cost_floor.floor_usd(batch).values())
        ratios = [total / dtotals[history.index(n)] for _, n in cols]
        print(f"    {'floor, ' + label:<24}" + "".join(
            f"{total * cm.MILLION:>11.2f}" for _ in cols))  # fmt: skip
        print(f"    {'  / create_callback':<24}" + "".join(f"{v:>11.2f}" for v in ratios))
    lines = "; ".join(
        f"{line.why} {line.units:g} {cost_floor.UNIT_NAMES[line.price]}"
        for line in cost_floor.floor_lines()
    )
    print(SAY.fill(
        "floor: a lower bound for any layout on this shape with design 001's semantics, "
        "everything else granted free (durations, logs, the worker's read; bench/cost_floor.py): "
        f"{lines}; with batches of 10 the worker run and the mapping's two SQS requests are "
        "shared by ten waits."
    ))  # fmt: skip


def check_above_floor(cols: list[tuple[str, int]], totals: list[float]) -> None:
    """A measured column below the floor means the meter lost something: no layout pays less.
    The busy column is held to the floor with batches of 10, every other to a quiet queue's."""
    for (route, n), total in zip(cols, totals, strict=True):
        floor = sum(cost_floor.floor_usd(10 if route == "busy" else 1).values())
        if total < floor:
            raise RuntimeError(
                f"{route} {n}: measured ${total * cm.MILLION:.2f} per million waits, under the "
                f"floor's ${floor * cm.MILLION:.2f}: the meter or the floor is wrong"
            )


GOAL = 0.5  # issue 12, goal 4: at most half of create_callback, at every history size


def print_verdict(
    cols: list[tuple[str, int]], ratios: list[float], dtotals: list[float], history: tuple[int, ...]
) -> None:
    """Goal 4's verdict on the goal's columns (every route but the busy one) and whether the
    quiet queue's floor itself is under the goal's line at each history size."""
    goal = [r for (route, _), r in zip(cols, ratios, strict=True) if route != "busy"]
    quiet = sum(cost_floor.floor_usd(1).values())
    floor = [quiet / dtotals[history.index(n)] for n in history]
    met = "MET" if max(goal) <= GOAL else "NOT MET"
    print()
    print(
        f"    goal 4 (<= {GOAL}x create_callback at {', '.join(f'{n:,}' for n in history)} waits): "
        f"{met}, {min(goal):.2f}-{max(goal):.2f}x"
    )
    reachable = [f"{n:,}" for n, f in zip(history, floor, strict=True) if f <= GOAL]
    print(SAY.fill(
        f"the floor, quiet queue: {min(floor):.2f}-{max(floor):.2f}x; under the line at "
        + (", ".join(reachable) if reachable else "no history size")
        + " (no layout on this shape can meet the goal where the floor is above it)"
    ))  # fmt: skip
