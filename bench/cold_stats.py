"""The cold-start bench's statistics (``bench_cold_start.py``): the goal, the quartiles that
show the machine's noise and the verdict from the median ratio's confidence interval."""

from __future__ import annotations

import math
import statistics

GOAL = 1.3  # issue 12, goal 7: import and first client at most 1.3x the baseline's
# The verdict's confidence: the median ratio's distribution-free interval at this level.
CONFIDENCE = 0.95


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """The first quartile, the median and the third quartile."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of what ``values`` sample: the
    k-th smallest and k-th largest value, k the largest rank such that fewer than k of n draws
    fall below the median with probability at most (1 - confidence) / 2 (each draw does with
    probability 1/2: the binomial). It assumes nothing of the noise's shape, only that trials
    are independent; it narrows as trials are added, where the quartiles do not."""
    n = len(values)
    tail = (1 - confidence) / 2
    below = 0.0  # P(fewer than k draws below the median)
    k = 0
    while True:
        nxt = below + math.comb(n, k) / 2**n
        if nxt > tail:
            break
        below, k = nxt, k + 1
    if k == 0:
        raise ValueError(f"{n} trials are too few for a {confidence:.0%} interval of the median")
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def verdict(low: float, high: float) -> str:
    """Goal 7 by the median ratio's confidence interval, not by one figure noise can move."""
    if high <= GOAL:
        return "met"
    if low > GOAL:
        return "not met"
    return "undecided (noise)"
