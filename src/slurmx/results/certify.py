"""Certified percentiles: whether a point's sample of requests can support the percentiles it reports.

Two rules, both distribution-free (they assume only independent requests from one continuous distribution):

- "order-statistics" (the default): a two-sided confidence interval for the q-quantile from the sample's
  order statistics (Hahn & Meeker, Statistical Intervals, 1991, sec. 5.3). With B ~ Binomial(n, q) the number of
  requests at or below the true quantile, [X_(l), X_(u)] covers it with probability F(u-1) - F(l-1), F the
  binomial CDF. slurmx takes the equal-tailed ranks: l - 1 the largest k with F(k) <= a, u - 1 the smallest k
  with F(k) >= 1 - a, a = (1 - confidence) / 2; a rank that does not exist (F(0) > a, or F(n-1) < 1 - a) leaves
  that end of the interval open. The percentile is *certified* when both ends exist and each lies within
  `rel_width` of the reported value. Defaults: 95 % confidence, +-10 % (DEFAULT_CONFIDENCE, DEFAULT_REL_WIDTH).
  `need` is the requests it would take: at least the fewest for which both ranks exist (min_count) and one more
  than now; where both ends exist, the count at which the widest relative half-width, shrinking as 1/sqrt(n),
  reaches the width (the relative half-width of the value, not of its inverse; an estimate from the sample, not
  a guarantee: a run until certified checks again).
- "loadgen": MLPerf LoadGen's early-stopping rule (mlcommons/inference, loadgen/early_stopping.cc and
  results.cc; confidence 0.99, tolerance 0). With t overlatency queries, h_min(t) is the fewest other queries
  for which P(Binomial(h + t, 1 - p + d) <= t) < 1 - c. A Server run with t queries over its target passes with
  h_min(t) + t queries (459 for p99 with t = 0); the SingleStream/MultiStream estimate needs at least h_min(1) + 1
  queries (64 for p90, 662 for p99) and is the t-th largest latency, t the largest count with h_min(t) + t <= n:
  a one-sided upper bound. Certified: n reaches that floor; `need` is the floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Method = Literal["order-statistics", "loadgen"]
DEFAULT_CONFIDENCE = 0.95
DEFAULT_REL_WIDTH = 0.10
LOADGEN_CONFIDENCE = 0.99  # LoadGen's EarlyStopping(): confidence = 0.99
LOADGEN_TOLERANCE = 0.0  # and tolerance = 0.0


@dataclass(frozen=True)
class Policy:
    """How a point's percentiles are certified (see the module docstring)."""

    confidence: float = DEFAULT_CONFIDENCE
    rel_width: float = DEFAULT_REL_WIDTH
    method: Method = "order-statistics"

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence {self.confidence}: must be between 0 and 1")
        if not self.rel_width > 0.0:
            raise ValueError(f"relative width {self.rel_width}: must be positive")


LOADGEN = Policy(confidence=LOADGEN_CONFIDENCE, method="loadgen")


# ---------------------------------------------------------------- the binomial


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed term by term from 12 standard deviations below the mean (the mass left out
    is under 1e-30; starting lower, the first term would underflow to 0 and the ratio recurrence with it)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    return math.fsum(_pmf_run(n, p, _low_start(n, p), k))


def _low_start(n: int, p: float) -> int:
    sd = math.sqrt(n * p * (1.0 - p))
    return max(0, int(n * p - 12.0 * sd - 20.0))


def _pmf_run(n: int, p: float, start: int, stop: int) -> list[float]:
    """pmf(start) .. pmf(stop): the first from lgamma, the rest by the ratio pmf(k+1)/pmf(k)."""
    log = math.lgamma(n + 1) - math.lgamma(start + 1) - math.lgamma(n - start + 1)
    term = math.exp(log + start * math.log(p) + (n - start) * math.log1p(-p))
    odds = p / (1.0 - p)
    out = []
    for k in range(start, stop + 1):
        out.append(term)
        term *= (n - k) / (k + 1) * odds
    return out


# ---------------------------------------------------------------- order-statistic intervals


@dataclass(frozen=True)
class Ranks:
    """The interval's ranks (1 = the smallest value) and its exact coverage; None: that end does not exist."""

    lower: int | None
    upper: int | None
    coverage: float


def ranks(n: int, q: float, confidence: float = DEFAULT_CONFIDENCE) -> Ranks:
    """Equal-tailed distribution-free ranks of a confidence interval for the q-quantile of n values."""
    if n < 1 or not 0.0 < q < 1.0:
        raise ValueError(f"ranks need n >= 1 and 0 < q < 1 (n={n}, q={q})")
    a = (1.0 - confidence) / 2.0
    start = _low_start(n, q)
    cdf = 0.0
    lower_k: int | None = None  # the largest k with F(k) <= a
    upper_k: int | None = None  # the smallest k with F(k) >= 1 - a
    for k, term in enumerate(_pmf_run(n, q, start, n), start):
        cdf += term
        if cdf <= a:
            lower_k = k
        if cdf >= 1.0 - a:
            upper_k = k
            break
    lower = lower_k + 1 if lower_k is not None else None
    upper = upper_k + 1 if upper_k is not None and upper_k <= n - 1 else None
    # the coverage from fsum'd CDFs, not the running sum
    f_upper = binom_cdf(upper - 1, n, q) if upper is not None else 1.0
    f_low = binom_cdf(lower - 1, n, q) if lower is not None else 0.0
    return Ranks(lower, upper, f_upper - f_low)


def min_count(q: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest values for which both ends of the interval exist: (1-q)^n <= a and q^n <= a."""
    a = (1.0 - confidence) / 2.0
    n = max(math.ceil(math.log(a) / math.log(q)), math.ceil(math.log(a) / math.log1p(-q)), 1)
    while n > 1 and max(q ** (n - 1), (1.0 - q) ** (n - 1)) <= a:  # ceil of a float quotient may overshoot
        n -= 1
    while max(q**n, (1.0 - q) ** n) > a:
        n += 1
    return n


# ---------------------------------------------------------------- LoadGen's early stopping


def loadgen_odds(h: int, t: int, p: float, d: float = LOADGEN_TOLERANCE) -> float:
    """P(at most t of h + t queries are over latency) when each is with probability 1 - p + d."""
    return binom_cdf(t, h + t, 1.0 - p + d)


def loadgen_min_passing(t: int, p: float, confidence: float = LOADGEN_CONFIDENCE, d: float = LOADGEN_TOLERANCE) -> int:
    """h_min(t): the fewest queries within latency for which the odds fall below 1 - confidence."""
    lo, hi = 1, 2
    while loadgen_odds(hi, t, p, d) >= 1.0 - confidence:  # odds fall as h grows
        lo, hi = hi + 1, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if loadgen_odds(mid, t, p, d) < 1.0 - confidence:
            hi = mid
        else:
            lo = mid + 1
    return lo


def loadgen_min_queries(overlatency: int, p: float, confidence: float = LOADGEN_CONFIDENCE) -> int:
    """Server scenario: the queries a run with `overlatency` queries over its target needs to pass."""
    return loadgen_min_passing(overlatency, p, confidence) + overlatency


def loadgen_floor(p: float, confidence: float = LOADGEN_CONFIDENCE) -> int:
    """SingleStream/MultiStream: the fewest queries for an early-stopping percentile estimate, h_min(1) + 1."""
    return loadgen_min_passing(1, p, confidence) + 1


def loadgen_estimate_rank(n: int, p: float, confidence: float = LOADGEN_CONFIDENCE) -> int | None:
    """The rank (1 = smallest) of the early-stopping estimate among n latencies, the t-th largest; None below the
    floor. h_min(t) + t <= n exactly when P(Binomial(n, 1 - p) <= t) < 1 - confidence (the odds fall with h)."""
    r = 1.0 - p + LOADGEN_TOLERANCE
    cdf, t = 0.0, 0
    for k, term in enumerate(_pmf_run(n, r, 0, n)):
        cdf += term
        if cdf >= 1.0 - confidence:
            break
        t = k
    return n - t + 1 if t >= 1 else None


# ---------------------------------------------------------------- certifying one percentile


@dataclass(frozen=True)
class Certificate:
    """One reported percentile of one metric: the count behind it, its interval and whether it is certified.

    Ranks are of the per-request values the metric is computed from (ascending); for a metric reported as an
    inverse (interactivity = 1 / ITL) the interval is the inverse of the values' interval."""

    percentile: float  # 90.0 for p90
    count: int
    estimate: float | None
    lo: float | None
    hi: float | None
    lo_rank: int | None
    hi_rank: int | None
    coverage: float | None
    certified: bool
    need: int | None  # requests it would need (an estimate, see the module docstring); None when certified


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (the same rule as results/requests.py's point estimates)."""
    k = (len(ordered) - 1) * (pct / 100.0)
    lo = int(k)
    if lo + 1 >= len(ordered):
        return ordered[lo]
    return ordered[lo] + (k - lo) * (ordered[lo + 1] - ordered[lo])


def certify(values: Sequence[float], pct: float, policy: Policy = Policy(), *, inverse: bool = False) -> Certificate:
    """Certify the `pct` percentile of `values` (reported as 1 / the percentile when `inverse`)."""
    q = pct / 100.0
    ordered = sorted(values)
    n = len(ordered)
    if policy.method == "loadgen":
        return _loadgen(ordered, pct, policy, inverse)
    floor = min_count(q, policy.confidence)
    if n == 0:
        return Certificate(pct, 0, None, None, None, None, None, None, False, floor)
    r = ranks(n, q, policy.confidence)
    est = percentile(ordered, pct)
    lo = ordered[r.lower - 1] if r.lower is not None else None
    hi = ordered[r.upper - 1] if r.upper is not None else None
    ok = _within(est, lo, hi, policy.rel_width, inverse)
    shown_lo, shown_hi = (_inv(hi), _inv(lo)) if inverse else (lo, hi)
    need = None if ok else _projected_need(n, est, lo, hi, policy.rel_width, floor)
    return Certificate(
        pct, n, _inv(est) if inverse else est, shown_lo, shown_hi, r.lower, r.upper, r.coverage, ok, need
    )


def _inv(value: float | None) -> float | None:
    return 1.0 / value if value is not None and value > 0 else None


def _within(est: float, lo: float | None, hi: float | None, width: float, inverse: bool) -> bool:
    """Both ends exist and lie within `width` of the estimate, in the units the metric is reported in."""
    if lo is None or hi is None or est <= 0 or lo <= 0:
        return False
    if inverse:  # 1/hi <= 1/est <= 1/lo
        return (1.0 / lo - 1.0 / est) * est <= width and (1.0 / est - 1.0 / hi) * est <= width
    return (est - lo) / est <= width and (hi - est) / est <= width


def _projected_need(n: int, est: float, lo: float | None, hi: float | None, width: float, floor: int) -> int:
    """At least the floor (and one more request than now); where both ends exist, the count at which the widest
    relative half-width, shrinking as 1/sqrt(n) (the order statistics' asymptotic rate), reaches the width."""
    need = max(floor, n + 1)
    if lo is None or hi is None or est <= 0:
        return need
    widest = max(est - lo, hi - est) / est
    return max(need, math.ceil(n * (widest / width) ** 2))


def _loadgen(ordered: list[float], pct: float, policy: Policy, inverse: bool) -> Certificate:
    q, n = pct / 100.0, len(ordered)
    floor = loadgen_floor(q, policy.confidence)
    rank = loadgen_estimate_rank(n, q, policy.confidence) if n else None
    est = percentile(ordered, pct) if n else None
    bound = ordered[rank - 1] if rank is not None else None
    ok = rank is not None
    if inverse:  # an upper bound on the values is a lower bound on their inverse
        return Certificate(pct, n, _inv(est), _inv(bound), None, None, rank, None, ok, None if ok else floor)
    return Certificate(pct, n, est, None, bound, None, rank, None, ok, None if ok else floor)


# ---------------------------------------------------------------- running a point until it is certified


CERTIFIABLE = (50, 75, 90, 95, 99)  # the percentiles result.json certifies (results/requests.py)


def parse_percentiles(text: str) -> tuple[str, ...]:
    """`--until-certified p90[,p99...]` -> ("p90", "p99"); a one-line error for anything else."""
    names = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    known = {f"p{p}" for p in CERTIFIABLE}
    bad = [name for name in names if name not in known]
    if not names or bad:
        raise ValueError(f"--until-certified {text!r}: expected percentiles among {', '.join(sorted(known))}")
    return names


StopReason = Literal["certified", "budget", "continue"]


def stop_reason(
    certified: dict[str, bool], wanted: Sequence[str], elapsed_s: float, *, max_s: float, min_duration_s: float = 0.0
) -> StopReason:
    """Whether a point replayed until certified stops: "certified" once every wanted percentile (name -> certified
    over every headline metric) is and the minimum duration has passed; "budget" once `max_s` is spent first;
    else "continue". The minimum duration is a floor (MLPerf's rule runs at least 600 s), never a budget."""
    if elapsed_s >= min_duration_s and all(certified.get(name, False) for name in wanted):
        return "certified"
    return "budget" if elapsed_s >= max_s else "continue"
