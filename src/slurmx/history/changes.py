"""Change points in one identity's series of sweep means, flagged only beyond the measured noise floor.

Method (on the log scale, so a change is relative and the noise of a throughput and a latency compare alike):

- The noise floor sigma is the standard deviation of one sweep's mean, measured two ways and the larger taken:
  from the series itself, the robust spread of successive differences (1.4826 * median |y[k] - y[k-1]| / sqrt 2,
  which one step barely moves), when it has at least MIN_HISTORY sweeps; and from the repeats, the pooled
  within-sweep standard deviation over sqrt(repeats per sweep), where sweeps ran repeats. With neither there is
  no floor and nothing is flagged ("too little history").
- At each sweep k, the mean of up to WINDOW sweeps from k on is compared with the mean of up to WINDOW sweeps
  before it: z = (after - before) / (sigma * sqrt(1/a + 1/b)). The largest |z| at or over Z_CRIT is a change
  (at least MIN_BEFORE sweeps before it); the series is then split there and each side searched again, so a
  step is flagged once, at the sweep where it happened, and windows never straddle a change already found.
- False alarms: on noise-only series of 30 sweeps (Gaussian on the log scale, any noise level), at most 1 %
  of series carry any flag (tests/history/test_changes.py measures it on 2,000 generated series).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

WINDOW = 8  # sweeps on each side of a candidate change
Z_CRIT = 5.0  # |z| over which a change is flagged: series-wide false-alarm rate <= 1 % over 30 sweeps
MIN_HISTORY = 5  # sweeps before the series' own spread counts as a noise floor
MIN_BEFORE = 3  # sweeps before a candidate: the first sweeps cannot be a change
_MAD_TO_SD = 1.4826
_MIN_SIGMA = 1e-9  # identical values (a synthetic tree): any change is beyond noise


@dataclass(frozen=True)
class NoiseFloor:
    sigma: float | None  # sd of one sweep's mean, log scale (~ relative); None: not measurable
    source: str  # "history" | "repeats" | "history and repeats" | why there is none

    @property
    def pct(self) -> float | None:
        return None if self.sigma is None else 100.0 * (math.exp(self.sigma) - 1.0)


@dataclass(frozen=True)
class Change:
    index: int  # the first sweep after the change
    ratio: float  # geometric mean after / before
    z: float

    @property
    def pct(self) -> float:
        return 100.0 * (self.ratio - 1.0)


def noise_floor(means: Sequence[float], repeats: Sequence[Sequence[float]] = ()) -> NoiseFloor:
    """The floor of a series of positive sweep means, with each sweep's repeat values where it has any."""
    logs = [math.log(m) for m in means]
    from_history = None
    if len(logs) >= MIN_HISTORY:
        diffs = [abs(b - a) for a, b in zip(logs, logs[1:])]
        from_history = _MAD_TO_SD * statistics.median(diffs) / math.sqrt(2.0)
    from_repeats = _repeat_sigma(repeats)
    found = [s for s in (from_history, from_repeats) if s is not None]
    if not found:
        return NoiseFloor(None, f"too little history (fewer than {MIN_HISTORY} sweeps, no repeats)")
    source = " and ".join(n for n, s in (("history", from_history), ("repeats", from_repeats)) if s is not None)
    return NoiseFloor(max(max(found), _MIN_SIGMA), source)


def _repeat_sigma(repeats: Sequence[Sequence[float]]) -> float | None:
    """Pooled within-sweep sd of the log repeat values over sqrt(the typical repeat count): one mean's sd."""
    ss, df, counts = 0.0, 0, []
    for values in repeats:
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
            counts.append(len(logs))
    if df < 2:
        return None
    return math.sqrt(ss / df) / math.sqrt(statistics.median(counts))


def changes(means: Sequence[float], floor: NoiseFloor) -> list[Change]:
    """The changes in a series of positive sweep means (oldest first), in order."""
    if floor.sigma is None or len(means) <= MIN_BEFORE:
        return []
    sigma = floor.sigma
    logs = [math.log(m) for m in means]
    cuts = [0, len(logs)]
    found: list[Change] = []
    while True:
        best: Change | None = None
        for lo, hi in zip(cuts, cuts[1:]):
            for k in range(lo + MIN_BEFORE, hi):
                before = logs[max(lo, k - WINDOW) : k]
                after = logs[k : min(hi, k + WINDOW)]
                diff = statistics.fmean(after) - statistics.fmean(before)
                z = diff / (sigma * math.sqrt(1.0 / len(after) + 1.0 / len(before)))
                if abs(z) >= Z_CRIT and (best is None or abs(z) > abs(best.z)):
                    best = Change(k, math.exp(diff), z)
        if best is None:
            return sorted(found, key=lambda c: c.index)
        found.append(best)
        cuts = sorted({*cuts, best.index})
