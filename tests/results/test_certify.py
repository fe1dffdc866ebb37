"""results/certify.py: order-statistic intervals against a published table and simulation, LoadGen's figures.

The median table: "Table A.7: Confidence Intervals for the Population Median" (a textbook table reproduced at
https://www.coursehero.com/file/5646626/A7/), which lists [x(l), x(u)] and its exact confidence level per n; at
95 % the interval is the narrowest one listed at or above 95 %. LoadGen's figures are its reference values
(mlcommons/inference loadgen/early_stopping.cc with results.cc's confidence 0.99, tolerance 0; the same values
mlcommons/endpoints PR #417 validates its port against: 459 for a p99 with no overlatency query, floors of 64
queries for a p90 and 662 for a p99).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from slurmx.results import certify

# n -> (l, u, confidence level in %) as Table A.7 prints it: the narrowest listed interval at >= 95 %
MEDIAN_TABLE = {
    6: (1, 6, 96.9),
    9: (2, 8, 96.1),
    10: (2, 9, 97.9),
    14: (3, 12, 98.7),
    15: (4, 12, 96.5),
    17: (5, 13, 95.1),
    18: (5, 14, 96.9),
    20: (6, 15, 95.9),
}


@pytest.mark.parametrize("n", sorted(MEDIAN_TABLE))
def test_median_ranks_and_levels_equal_the_published_table(n: int) -> None:
    lower, upper, level = MEDIAN_TABLE[n]
    r = certify.ranks(n, 0.5, 0.95)
    assert (r.lower, r.upper) == (lower, upper)
    assert round(100 * r.coverage, 1) == level


def test_five_values_cannot_bound_a_median_at_95_percent() -> None:
    # the table's only interval for n = 5 is [x(1), x(5)] at 93.8 %: below 95 %, so no rank exists
    assert certify.ranks(5, 0.5, 0.95) == certify.Ranks(None, None, 1.0)
    assert round(100 * (1 - 2 * 0.5**5), 1) == 93.8
    assert certify.min_count(0.5, 0.95) == 6


def test_the_tail_floor_is_where_the_upper_rank_first_exists() -> None:
    # an upper rank for the p99 exists once 0.99^n <= 2.5 %: n = 368 (0.99^367 = 0.02501)
    assert certify.min_count(0.99, 0.95) == 368
    assert certify.ranks(367, 0.99).upper is None
    assert certify.ranks(368, 0.99).upper == 368


def test_loadgen_reference_values() -> None:
    assert certify.loadgen_min_queries(0, 0.99) == 459  # Server: a p99 with no overshoot
    assert certify.loadgen_floor(0.90) == 64
    assert certify.loadgen_floor(0.99) == 662
    # the floor is the first count with an estimate; the estimate at the floor is the largest latency
    assert certify.loadgen_estimate_rank(63, 0.90) is None
    assert certify.loadgen_estimate_rank(64, 0.90) == 64
    assert certify.loadgen_estimate_rank(661, 0.99) is None


def test_loadgen_estimate_rank_is_the_largest_t_loadgen_would_find() -> None:
    # results.cc: t is the largest i with h_min(i) + i <= n; checked the slow way for a few counts
    for n in (64, 100, 250):
        t = max(i for i in range(1, n) if certify.loadgen_min_passing(i, 0.9) + i <= n)
        assert certify.loadgen_estimate_rank(n, 0.9) == n - t + 1


Draw = Callable[[random.Random], float]
DISTRIBUTIONS: dict[str, tuple[Draw, Callable[[float], float]]] = {
    # name -> (one draw, the true q-quantile)
    "exponential": (lambda rng: rng.expovariate(1.0), lambda q: -math.log1p(-q)),
    "uniform": (lambda rng: rng.random(), lambda q: q),
    "pareto(3)": (lambda rng: rng.paretovariate(3.0), lambda q: (1.0 - q) ** (-1.0 / 3.0)),
}
REPS = 1500
SIGMA = math.sqrt(0.95 * 0.05 / REPS)  # Monte Carlo standard error of an estimated 95 % coverage: 0.0056


@pytest.mark.parametrize(
    ("n", "dist", "quantiles"),
    [(50, "exponential", (0.5, 0.9)), (200, "pareto(3)", (0.5, 0.9)), (1000, "uniform", (0.5, 0.9, 0.99))],
)
def test_coverage_on_known_distributions(n: int, dist: str, quantiles: tuple[float, ...]) -> None:
    """The interval covers the true quantile at the exact rate its ranks promise (>= 95 %), within 4 Monte Carlo
    standard errors, over REPS samples of n values."""
    draw, true_quantile = DISTRIBUTIONS[dist]
    rng = random.Random(20261203 + n)
    plan = {q: certify.ranks(n, q) for q in quantiles}
    hits = dict.fromkeys(quantiles, 0)
    for _ in range(REPS):
        sample = sorted(draw(rng) for _ in range(n))
        for q, r in plan.items():
            assert r.lower is not None and r.upper is not None
            hits[q] += sample[r.lower - 1] <= true_quantile(q) <= sample[r.upper - 1]
    for q, r in plan.items():
        observed = hits[q] / REPS
        sigma = math.sqrt(r.coverage * (1 - r.coverage) / REPS)
        assert r.coverage >= 0.95
        assert abs(observed - r.coverage) <= 4 * sigma, (n, q, observed, r.coverage)
        assert observed >= 0.95 - 4 * SIGMA


def test_binomial_cdf_is_exact_for_small_n() -> None:
    for n, k, p in ((10, 3, 0.5), (20, 1, 0.1), (7, 6, 0.9)):
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert certify.binom_cdf(k, n, p) == pytest.approx(exact, rel=1e-12)


def test_certify_names_the_interval_and_what_is_needed() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(0.0, 0.5) for _ in range(115)]
    p99 = certify.certify(values, 99)
    assert p99.count == 115 and not p99.certified
    assert p99.hi is None and p99.hi_rank is None  # 115 requests cannot bound a p99 from above
    assert p99.need is not None and p99.need >= 368
    tight = [1.0 + 0.001 * i / 1000 for i in range(1000)]  # within 0.1 %: any interval is within 10 %
    p90 = certify.certify(tight, 90)
    assert p90.certified and p90.need is None
    assert p90.lo is not None and p90.hi is not None and p90.estimate is not None
    assert p90.lo <= p90.estimate <= p90.hi
    assert (p90.lo_rank, p90.hi_rank) == (certify.ranks(1000, 0.9).lower, certify.ranks(1000, 0.9).upper)


def test_an_inverse_metric_inverts_the_interval() -> None:
    rng = random.Random(3)
    itl = [rng.uniform(0.02, 0.03) for _ in range(500)]
    plain = certify.certify(itl, 90)
    inverse = certify.certify(itl, 90, inverse=True)
    assert plain.lo is not None and plain.hi is not None and plain.estimate is not None
    assert inverse.lo == pytest.approx(1 / plain.hi) and inverse.hi == pytest.approx(1 / plain.lo)
    assert inverse.estimate == pytest.approx(1 / plain.estimate)
    assert (inverse.lo_rank, inverse.hi_rank) == (plain.lo_rank, plain.hi_rank)


def test_loadgen_policy_certifies_at_its_floor() -> None:
    values = [float(i) for i in range(1, 663)]
    assert certify.certify(values[:661], 99, certify.LOADGEN).need == 662
    at_floor = certify.certify(values, 99, certify.LOADGEN)
    assert at_floor.certified and at_floor.hi == 662.0  # the estimate at the floor: the largest value


@pytest.mark.parametrize(("n", "q"), [(3000, 0.5), (100_000, 0.9), (20_000, 0.99)])
def test_large_counts_give_ranks_around_the_quantile(n: int, q: float) -> None:
    # the equal-tailed ranks sit about 1.96 binomial standard deviations either side of n q
    r = certify.ranks(n, q)
    sd = math.sqrt(n * q * (1 - q))
    assert r.lower is not None and r.upper is not None
    assert abs((n * q - r.lower) / sd - 1.96) < 0.1 and abs((r.upper - n * q) / sd - 1.96) < 0.1
    assert 0.95 <= r.coverage < 0.96


def test_until_certified_parses_percentiles_and_refuses_others() -> None:
    assert certify.parse_percentiles("p90, P99") == ("p90", "p99")
    for bad in ("", "p98", "90", "p90,,x"):
        with pytest.raises(ValueError, match="--until-certified"):
            certify.parse_percentiles(bad)


def test_stop_reason_waits_for_the_floor_then_stops_on_certified_or_budget() -> None:
    ok, not_yet = {"p90": True, "p99": False}, {"p90": False}
    assert certify.stop_reason(ok, ["p90"], 100.0, max_s=3600, min_duration_s=600) == "continue"
    assert certify.stop_reason(ok, ["p90"], 600.0, max_s=3600, min_duration_s=600) == "certified"
    assert certify.stop_reason(ok, ["p90", "p99"], 700.0, max_s=3600) == "continue"
    assert certify.stop_reason(not_yet, ["p90"], 3600.0, max_s=3600) == "budget"
    assert certify.stop_reason(ok, ["p90"], 3600.0, max_s=3600, min_duration_s=600) == "certified"
