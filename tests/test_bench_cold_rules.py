"""The cold-start bench's verdict rule (bench/bench_cold_start.py): the median ratio's
distribution-free confidence interval, and the goal's verdict from it."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import cold_stats as cold


def _coverage(n: int, k: int) -> float:
    """P(the k-th smallest <= median <= the k-th largest) for n independent draws."""
    below = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1 - 2 * below


@pytest.mark.parametrize(("n", "k"), [(15, 4), (31, 10), (41, 14)])
def test_the_interval_is_the_ranks_the_binomial_gives(n: int, k: int) -> None:
    # The published ranks for a 95% interval of a median, and each covers at least 95%
    # while the next rank inward would not.
    values = [float(v) for v in range(1, n + 1)]
    random.Random(n).shuffle(values)
    assert cold.median_interval(values) == (k, n - k + 1)
    assert _coverage(n, k) >= 0.95 > _coverage(n, k + 1)


def test_too_few_trials_are_refused() -> None:
    with pytest.raises(ValueError, match="too few"):
        cold.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])


def test_the_interval_covers_the_median_as_often_as_it_says() -> None:
    # Drawn from a skewed noise around a known median (1.2 times a lognormal of median 1):
    # the interval holds it in at least 95% of runs of 31 trials.
    rng = random.Random(7)
    runs, held = 2000, 0
    for _ in range(runs):
        draws = [1.2 * rng.lognormvariate(0, 0.15) for _ in range(31)]
        low, high = cold.median_interval(draws)
        held += low <= 1.2 <= high
    assert held / runs >= 0.94  # 95% nominal (97% exact at n=31), less sampling slack


def test_the_verdict_needs_the_whole_interval_on_one_side() -> None:
    assert cold.verdict(1.10, 1.30) == "met"
    assert cold.verdict(1.31, 1.50) == "not met"
    assert cold.verdict(1.20, 1.31) == "undecided (noise)"
