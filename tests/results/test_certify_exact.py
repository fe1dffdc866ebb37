"""results/certify.py against a second method: the binomial summed exactly (math.comb and fractions, no floating
point), the ranks and floors found by plain search from their definitions (module docstring), not by the recurrence,
log formula or bisection certify.py uses; and certify()'s certificates on samples whose order statistics are their
own ranks (x_(i) = i), so each figure is read off by hand."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import pytest

from slurmx.results import certify, requests
from slurmx.results.schema import Certification, PercentileCertificate


def exact_cdfs(n: int, q: Fraction) -> list[Fraction]:
    """P(Binomial(n, q) <= k) for k = 0..n, exactly: the pmf summed term by term."""
    out, total = [], Fraction(0)
    for i in range(n + 1):
        total += math.comb(n, i) * q**i * (1 - q) ** (n - i)
        out.append(total)
    return out


def exact_cdf(k: int, n: int, q: Fraction) -> Fraction:
    return exact_cdfs(n, q)[k] if k >= 0 else Fraction(0)


def exact_ranks(n: int, pct: int, confidence: float) -> tuple[int | None, int | None, float]:
    """The module docstring's ranks: l - 1 the largest k with F(k) <= a, u - 1 the smallest k with F(k) >= 1 - a,
    an end that does not exist (F(0) > a; u - 1 = n) is None; the coverage F(u - 1) - F(l - 1). q and the
    confidence are the exact values of the floats certify.py is given, so a tie sits where the floats put it."""
    q, a = Fraction(pct / 100), (1 - Fraction(confidence)) / 2
    cdf = exact_cdfs(n, q)
    below = [k for k in range(n + 1) if cdf[k] <= a]
    lower = max(below) + 1 if below else None
    up = min(k for k in range(n + 1) if cdf[k] >= 1 - a)
    upper = up + 1 if up <= n - 1 else None
    high = cdf[upper - 1] if upper is not None else Fraction(1)
    low = cdf[lower - 1] if lower is not None else Fraction(0)
    return lower, upper, float(high - low)


CONFIDENCES = (0.9, 0.95, 0.99)


@pytest.mark.parametrize("confidence", CONFIDENCES)
@pytest.mark.parametrize("pct", [50, 75, 90, 95, 99])
def test_ranks_and_coverage_are_the_exact_binomials(pct: int, confidence: float) -> None:
    for n in [*range(1, 41), 59, 60, 77, 120]:
        lower, upper, coverage = exact_ranks(n, pct, confidence)
        r = certify.ranks(n, pct / 100, confidence)
        assert (r.lower, r.upper) == (lower, upper), (n, pct, confidence)
        assert r.coverage == pytest.approx(coverage, rel=1e-9, abs=1e-12), (n, pct, confidence)


def test_binomial_cdf_is_the_exact_sum_over_every_k() -> None:
    for n, pct in ((1, 50), (9, 10), (30, 90), (64, 99), (200, 75), (250, 5)):
        cdf = exact_cdfs(n, Fraction(pct / 100))
        for k in range(-2, n + 2):
            exact = float(cdf[min(k, n)]) if k >= 0 else 0.0
            assert certify.binom_cdf(k, n, pct / 100) == pytest.approx(exact, rel=1e-9, abs=1e-15), (n, pct, k)
    assert certify.binom_cdf(3, 10, 0.0) == 1.0 and certify.binom_cdf(3, 10, 1.0) == 0.0
    assert certify.binom_cdf(0, 10, 1.0) == 0.0 and certify.binom_cdf(10, 10, 1.0) == 1.0


def test_ranks_refuse_what_has_no_interval() -> None:
    for n, q in ((0, 0.5), (-3, 0.5), (10, 0.0), (10, 1.0), (10, 1.5)):
        with pytest.raises(ValueError, match=r"ranks need n >= 1 and 0 < q < 1"):
            certify.ranks(n, q)


@pytest.mark.parametrize("confidence", CONFIDENCES)
def test_min_count_is_the_first_count_with_both_ends(confidence: float) -> None:
    """The fewest n with q^n <= a and (1 - q)^n <= a, found by counting up (the floor's definition), and the
    first count at which both exact ranks exist."""
    a = (1 - Fraction(confidence)) / 2
    for pct in range(1, 100):
        q = Fraction(pct / 100)
        n = 1
        while max(q**n, (1 - q) ** n) > a:
            n += 1
        assert certify.min_count(pct / 100, confidence) == n, (pct, confidence)
        if pct in (50, 90):
            assert None in exact_ranks(n - 1, pct, confidence)[:2] if n > 1 else True
            assert None not in exact_ranks(n, pct, confidence)[:2]


def h_min(t: int, p: float, c: float) -> int:
    """LoadGen's h_min(t), counting up: the fewest h with P(Binomial(h + t, 1 - p) <= t) < 1 - c, the binomial's
    t + 1 terms summed exactly (r and 1 - c the exact values of the floats certify.py computes)."""
    r, limit = Fraction(1.0 - p), Fraction(1.0 - c)
    h = 1
    while sum(math.comb(h + t, i) * r**i * (1 - r) ** (h + t - i) for i in range(t + 1)) >= limit:
        h += 1
    return h


def test_loadgens_early_stopping_counts_are_the_exact_search() -> None:
    for t in range(0, 4):
        assert certify.loadgen_min_passing(t, 0.9) == h_min(t, 0.9, 0.99), t
        assert certify.loadgen_min_queries(t, 0.9) == h_min(t, 0.9, 0.99) + t, t
    assert certify.loadgen_min_passing(2, 0.9, 0.95) == h_min(2, 0.9, 0.95)
    assert certify.loadgen_floor(0.9, 0.95) == h_min(1, 0.9, 0.95) + 1
    floors = {t: h_min(t, 0.9, 0.99) + t for t in range(1, 12)}
    for n in (63, 64, 65, 80, 95, 96, 97, 110, 130):
        fits = [t for t, need in floors.items() if need <= n]
        assert certify.loadgen_estimate_rank(n, 0.9) == (n - max(fits) + 1 if fits else None), n


def _sample(n: int) -> list[float]:
    """x_(i) = i, in a shuffled order: the i-th smallest value is the rank itself."""
    return [float((7 * i) % n + 1) for i in range(n)]


def test_a_certified_percentile_reads_its_interval_off_the_ranks() -> None:
    # 100 values 10_001..10_100, p50 at 95 %: the exact ranks, the estimate 10_050.5 (inclusive interpolation);
    # shifted so that the interval is narrow relative to the value
    values = [v + 10_000 for v in _sample(100)]
    lower, upper, coverage = exact_ranks(100, 50, 0.95)
    assert lower is not None and upper is not None
    cert = certify.certify(values, 50)
    estimate = statistics.quantiles(values, n=100, method="inclusive")[49]
    assert estimate == 10_050.5
    assert (cert.count, cert.estimate, cert.lo_rank, cert.hi_rank) == (100, estimate, lower, upper)
    assert (cert.lo, cert.hi) == (10_000.0 + lower, 10_000.0 + upper)
    assert cert.coverage == pytest.approx(coverage, rel=1e-9)
    assert cert.certified and cert.need is None and cert.percentile == 50


def test_an_uncertified_percentile_projects_the_requests_it_would_need() -> None:
    # 100 values 1..100, p50: ranks 40 and 61 (exact, below), estimate 50.5; the wider side is 50.5 - 40 = 61 - 50.5
    # = 10.5, a relative half-width of 10.5 / 50.5 = 0.2079 > 0.10: not certified; it would need
    # ceil(100 x (0.2079 / 0.10)^2) = ceil(432.3) = 433 requests (more than the floor of 9 and than 101)
    assert exact_ranks(100, 50, 0.95)[:2] == (40, 61)
    cert = certify.certify(_sample(100), 50)
    assert (cert.estimate, cert.lo, cert.hi, cert.lo_rank, cert.hi_rank) == (50.5, 40.0, 61.0, 40, 61)
    assert not cert.certified and cert.need == 433
    # with +-25 % it is certified: 0.2079 <= 0.25
    wide = certify.certify(_sample(100), 50, certify.Policy(rel_width=0.25))
    assert wide.certified and wide.need is None
    # exactly at the width: 10.5 / 50.5 as the width certifies (<=), a hair less does not
    edge = certify.certify(_sample(100), 50, certify.Policy(rel_width=10.5 / 50.5))
    assert edge.certified
    below = certify.certify(_sample(100), 50, certify.Policy(rel_width=10.5 / 50.5 * (1 - 1e-9)))
    assert not below.certified and below.need == 101  # ceil(100 x (1 + 1e-9)^2) = 101: one more than now


def test_one_open_end_needs_the_floor() -> None:
    # 20 values, p90: the upper rank needs 0.9^n <= 0.025 (n >= 36); the lower exists. Not certified, need = 36
    lower, upper, _ = exact_ranks(20, 90, 0.95)
    assert upper is None and lower is not None
    cert = certify.certify(_sample(20), 90)
    assert (cert.hi, cert.hi_rank, cert.lo, cert.lo_rank) == (None, None, float(lower), lower)
    assert cert.estimate == pytest.approx(18.1)  # 18 + 0.1 x (19 - 18): k = 19 x 0.9 = 17.1, ranks 18 and 19
    assert not cert.certified and cert.need == 36 == certify.min_count(0.9)
    # the p99 of 100 values interpolates between the two largest: k = 99 x 0.99 = 98.01, ranks 99 and 100
    assert certify.certify(_sample(100), 99).estimate == pytest.approx(99.01, rel=1e-12)
    # at another confidence the floor is that confidence's: 0.9^n <= 0.005 first at n = 51 (0.9^50 = 0.00515)
    assert certify.certify([], 90, certify.Policy(confidence=0.99)).need == 51
    assert certify.certify(_sample(20), 90, certify.Policy(confidence=0.99)).need == 51
    # no values at all: nothing but the floor
    empty = certify.certify([], 90)
    assert empty == certify.Certificate(90, 0, None, None, None, None, None, None, False, 36)


def test_an_inverse_metric_reports_the_inverse_interval_and_judges_it_in_its_own_units() -> None:
    # values 1..100 as seconds per token, p50 reported as tokens per second: 1 / 50.5, interval [1/61, 1/40]
    cert = certify.certify(_sample(100), 50, inverse=True)
    assert cert.estimate == pytest.approx(1 / 50.5) and cert.lo == pytest.approx(1 / 61) and cert.hi == 1 / 40
    assert (cert.lo_rank, cert.hi_rank) == (40, 61)
    # relative to 1 / 50.5: 1/40 is 26.25 % above, 1/61 17.2 % below; certified at 30 %, not at 20 %
    assert certify.certify(_sample(100), 50, certify.Policy(rel_width=0.30), inverse=True).certified
    assert not certify.certify(_sample(100), 50, certify.Policy(rel_width=0.20), inverse=True).certified
    # the same +-20 % holds for the plain values' 20.8 %? no: 10.5 / 50.5 = 0.2079 > 0.20 either way
    assert not certify.certify(_sample(100), 50, certify.Policy(rel_width=0.20)).certified
    # 0.2079 < 0.2100 < 0.2625: the inverse's wider upper side is judged in its own units
    assert certify.certify(_sample(100), 50, certify.Policy(rel_width=0.21)).certified
    assert not certify.certify(_sample(100), 50, certify.Policy(rel_width=0.21), inverse=True).certified


def test_zero_and_negative_values_certify_nothing() -> None:
    # a p50 of 0 or an interval reaching 0 has no relative width
    zeros = certify.certify([0.0] * 50, 50)
    assert not zeros.certified and zeros.estimate == 0.0 and zeros.need == 51
    mixed = certify.certify([0.0] * 10 + [1.0] * 90, 50, certify.Policy(rel_width=5.0))
    assert mixed.lo == 1.0 and mixed.certified  # ranks 40..61 all hold 1.0
    low = certify.certify([0.0] * 45 + [1.0] * 55, 50, certify.Policy(rel_width=5.0))
    assert low.lo == 0.0 and not low.certified and low.need == 101
    inverse = certify.certify([0.0] * 50, 50, inverse=True)
    assert inverse.estimate is None and inverse.lo is None and inverse.hi is None


def test_the_loadgen_rule_bounds_from_above_and_names_its_floor() -> None:
    values = _sample(100)
    rank = certify.loadgen_estimate_rank(100, 0.9)
    assert rank is not None
    cert = certify.certify(values, 90, certify.LOADGEN)
    assert cert.certified and cert.need is None
    assert (cert.lo, cert.lo_rank, cert.hi, cert.hi_rank, cert.coverage) == (None, None, float(rank), rank, None)
    assert cert.estimate == pytest.approx(90.1)  # k = 99 x 0.9 = 89.1: 90 + 0.1
    inverse = certify.certify(values, 90, certify.LOADGEN, inverse=True)
    assert (inverse.lo, inverse.hi, inverse.hi_rank) == (1 / rank, None, rank)
    assert inverse.estimate == pytest.approx(1 / 90.1)
    short = certify.certify(values[:63], 90, certify.LOADGEN)
    assert not short.certified and short.need == 64 and short.hi is None
    assert certify.certify([], 90, certify.LOADGEN) == certify.Certificate(
        90, 0, None, None, None, None, None, None, False, 64
    )


def test_a_policy_refuses_confidences_and_widths_outside_their_range() -> None:
    for confidence in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=f"confidence {confidence}: must be between 0 and 1"):
            certify.Policy(confidence=confidence)
    for width in (0.0, -0.1):
        with pytest.raises(ValueError, match=f"relative width {width}: must be positive"):
            certify.Policy(rel_width=width)
    assert certify.Policy(confidence=0.5, rel_width=1e-9).confidence == 0.5
    assert (certify.LOADGEN.confidence, certify.LOADGEN.method) == (0.99, "loadgen")


def test_the_certified_estimates_are_the_percentiles_result_json_reports() -> None:
    """requests.certification over records: each headline metric's certified estimate is the percentile
    compute_request_metrics reports (its own interpolation), over the same profiled records; interactivity's the
    inverse of the latency's."""
    records = [
        {
            "metrics": {
                "time_to_first_token": {"value": 10.0 + (37 * i) % 101},
                "request_latency": {"value": 900.0 + i},
                "inter_token_latency": {"value": 5.0 + (i % 7)},
                "output_sequence_length": {"value": 1 + i % 5},
            }
        }
        for i in range(120)
    ]
    cert = requests.certification(records)
    latency = requests.compute_request_metrics(records, {}).latency
    assert (cert.method, cert.confidence, cert.rel_width) == ("order-statistics", 0.95, 0.10)
    for pct in (50, 75, 90, 95):
        assert cert.metrics["ttft"][f"p{pct}"].estimate == pytest.approx(getattr(latency.ttft, f"p{pct}"), rel=1e-12)
        assert cert.metrics["e2el"][f"p{pct}"].estimate == pytest.approx(getattr(latency.e2el, f"p{pct}"), rel=1e-12)
        intvty = cert.metrics["intvty"][f"p{pct}"]
        assert intvty.estimate == pytest.approx(getattr(latency.intvty, f"p{pct}"), rel=1e-12)
        norm = cert.metrics["e2e_norm_intvty"][f"p{pct}"]
        assert norm.estimate == pytest.approx(getattr(latency.e2e_norm_intvty, f"p{pct}"), rel=1e-12)
    assert set(cert.metrics["ttft"]) == {"p50", "p75", "p90", "p95", "p99"}
    # each certificate is certify's over the same per-request seconds, field by field
    ttft = [(10.0 + (37 * i) % 101) / 1000 for i in range(120)]
    for pct in (50, 99):
        theirs = certify.certify(ttft, pct)
        mine = cert.metrics["ttft"][f"p{pct}"]
        assert (mine.count, mine.lo, mine.hi, mine.lo_rank, mine.hi_rank) == (
            theirs.count,
            theirs.lo,
            theirs.hi,
            theirs.lo_rank,
            theirs.hi_rank,
        )
        assert (mine.coverage, mine.certified, mine.need) == (theirs.coverage, theirs.certified, theirs.need)
    assert cert.metrics["ttft"]["p50"].lo is not None and cert.metrics["ttft"]["p50"].coverage is not None
    loadgen = requests.certification(records, certify.LOADGEN)
    assert (loadgen.method, loadgen.confidence, loadgen.rel_width) == ("loadgen", 0.99, None)


def test_an_inverse_metric_is_judged_on_its_slow_side_too() -> None:
    # 100 values: rank 40 is 7.5, ranks 41..60 are 8, rank 61 is 16; the p50 is 8 with the interval [7.5, 16]
    values = [1.0] * 39 + [7.5] + [8.0] * 20 + [16.0] + [30.0] * 39
    # as tokens per second the interval is [1/16, 1/7.5] around 1/8: 1 - 8/16 = 0.5 below, 8/7.5 - 1 = 0.067 above
    assert certify.certify(values, 50, certify.Policy(rel_width=0.5), inverse=True).certified
    assert not certify.certify(values, 50, certify.Policy(rel_width=0.49), inverse=True).certified
    # as seconds: (16 - 8) / 8 = 1.0 above, (8 - 7.5) / 8 = 0.0625 below
    assert certify.certify(values, 50, certify.Policy(rel_width=1.0)).certified
    assert not certify.certify(values, 50, certify.Policy(rel_width=0.99)).certified


def test_the_projected_need_of_values_under_one() -> None:
    # the 100 values 0.01..1.00 (seconds): the p50 0.505 in [0.40, 0.61], 0.105 / 0.505 = 0.2079 relative: as for
    # 1..100, ceil(100 x (0.2079 / 0.10)^2) = 433 requests
    cert = certify.certify([v / 100 for v in _sample(100)], 50)
    assert cert.estimate == pytest.approx(0.505) and not cert.certified and cert.need == 433


def test_loadgens_uncertified_inverse_names_its_floor() -> None:
    short = certify.certify(_sample(63), 90, certify.LOADGEN, inverse=True)
    assert not short.certified and short.need == 64 and short.lo is None and short.hi_rank is None


@pytest.mark.parametrize("p", [0.5, 0.75, 0.9])
def test_loadgens_min_passing_is_the_exact_search_for_many_counts(p: float) -> None:
    for confidence in (0.9, 0.99):
        for t in range(0, 7):
            assert certify.loadgen_min_passing(t, p, confidence) == h_min(t, p, confidence), (p, confidence, t)


def test_a_percentile_is_certified_for_the_stop_only_when_every_metric_has_it_certified() -> None:
    yes, no = PercentileCertificate(count=9, certified=True), PercentileCertificate(count=9)
    cert = Certification(confidence=0.95, metrics={"ttft": {"p90": yes, "p50": yes}, "e2el": {"p90": yes, "p50": no}})
    assert requests.certified_by_percentile(cert, ("ttft", "e2el")) == {"p50": False, "p90": True}
    # a metric the block lacks certifies nothing, after one that is certified
    assert requests.certified_by_percentile(cert, ("ttft", "e2e_norm_intvty")) == {"p50": False, "p90": False}
    assert requests.certified_by_percentile(Certification(confidence=0.95)) == {}
