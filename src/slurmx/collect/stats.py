"""Means, 95 % confidence intervals and ratio intervals over a point's repeats.

Student's t quantile is computed here (regularized incomplete beta, continued fraction as in Numerical
Recipes, then bisection), so collect needs no scipy; tests check it against table values.

- A mean's interval is t-based for n >= 3 (mean +- t(0.975, n-1) * s / sqrt(n)); below that there is
  no interval and the estimate says "n=1" (or "n=2").
- A ratio A/B is estimated on the log scale. Paired (repeat i of A ran beside repeat i of B): the
  t interval of the mean log ratio, exponentiated. Unpaired: log(mean A / mean B) with the delta-method
  variance s_A^2/(n_A mean_A^2) + s_B^2/(n_B mean_B^2) and Welch-Satterthwaite degrees of freedom.
  When only one side has n >= 3 (a baseline run once), that side's relative spread stands for the
  other's too: the single run is taken as one draw with the same noise.
- A ratio whose interval contains 1 is "within noise", never a win or a loss.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

LEVEL = 0.95
MIN_N = 3  # fewer repeats give no interval

Verdict = Literal["better", "worse", "within noise", "n=1"]


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df (possibly fractional) degrees of freedom."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0 (p={p}, df={df})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Estimate:
    """A mean over n repeats, with its 95 % interval when n >= 3."""

    mean: float
    n: int
    lo: float | None = None
    hi: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width as % of the mean: the run-to-run noise at this n."""
        if self.lo is None or self.hi is None or self.mean == 0:
            return None
        return 100.0 * (self.hi - self.lo) / 2.0 / abs(self.mean)

    def text(self, spec: str) -> str:
        if self.lo is None or self.hi is None:
            return f"{format(self.mean, spec)} (n={self.n})"
        pct = self.half_width_pct
        return f"{format(self.mean, spec)} ±{pct:.1f}%" if pct is not None else format(self.mean, spec)

    def json(self) -> dict[str, float | int | None]:
        return {
            "mean": self.mean,
            "n": self.n,
            "ci95_lo": self.lo,
            "ci95_hi": self.hi,
            "ci95_half_width_pct": self.half_width_pct,
        }


def mean_interval(values: list[float], level: float = LEVEL) -> Estimate:
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval of no values")
    mean = statistics.fmean(values)
    if n < MIN_N:
        return Estimate(mean, n)
    half = t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Estimate(mean, n, mean - half, mean + half)


@dataclass(frozen=True)
class Ratio:
    """A / B with its 95 % interval (None below three repeats on both sides)."""

    value: float
    n: int  # pairs when paired, else the smaller side's count
    paired: bool
    lo: float | None = None
    hi: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def within_noise(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= 1.0 <= self.hi

    def verdict(self, higher_is_better: bool, tolerance: float = 0.0) -> Verdict:
        """better / worse / within noise; without an interval, a change within `tolerance` counts as
        noise, and with no tolerance there is no verdict ("n=1")."""
        if self.lo is not None and self.hi is not None:
            if self.lo <= 1.0 <= self.hi:
                return "within noise"
            up = self.lo > 1.0
        elif tolerance > 0:
            if abs(self.value - 1.0) <= tolerance:
                return "within noise"
            up = self.value > 1.0
        else:
            return "n=1"
        return "better" if up == higher_is_better else "worse"

    def text(self) -> str:
        if self.lo is None or self.hi is None:
            return f"{self.value:.2f}x (n={self.n})"
        core = f"{self.value:.2f}x [{self.lo:.2f}, {self.hi:.2f}]"
        return f"{core} within noise" if self.within_noise else core

    def json(self) -> dict[str, float | int | bool | None]:
        return {
            "ratio": self.value,
            "n": self.n,
            "paired": self.paired,
            "ci95_lo": self.lo,
            "ci95_hi": self.hi,
            "within_noise": self.within_noise if self.has_interval else None,
        }


def ratio_paired(a: list[float], b: list[float], level: float = LEVEL) -> Ratio | None:
    """Ratio of paired repeats (a[i] ran beside b[i]): the geometric mean of a[i]/b[i] and its interval."""
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0]
    if not logs:
        return None
    est = mean_interval(logs, level)
    if est.lo is None or est.hi is None:
        return Ratio(math.exp(est.mean), est.n, True)
    return Ratio(math.exp(est.mean), est.n, True, math.exp(est.lo), math.exp(est.hi))


def ratio_unpaired(a: list[float], b: list[float], level: float = LEVEL) -> Ratio | None:
    """mean(a) / mean(b), its interval on the log scale by the delta method with Welch's degrees of freedom."""
    if not a or not b:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if ma <= 0 or mb <= 0:
        return None
    na, nb = len(a), len(b)
    value = ma / mb
    if na < MIN_N and nb < MIN_N:
        return Ratio(value, min(na, nb), False)
    # relative variance of one draw (cv^2) per side; a side with too few runs borrows the other's
    cv2a = statistics.variance(a) / ma**2 if na >= MIN_N else None
    cv2b = statistics.variance(b) / mb**2 if nb >= MIN_N else None
    va = (cv2a if cv2a is not None else cv2b or 0.0) / na
    vb = (cv2b if cv2b is not None else cv2a or 0.0) / nb
    if cv2a is not None and cv2b is not None:
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)) if va + vb > 0 else float(na + nb - 2)
    else:
        df = float((na if cv2a is not None else nb) - 1)
    half = t_quantile(0.5 + level / 2.0, df) * math.sqrt(va + vb)
    log_value = math.log(value)
    return Ratio(value, min(na, nb), False, math.exp(log_value - half), math.exp(log_value + half))
