"""A point's repeats -> one aggregate: every repeat's values, the mean and 95 % interval of each metric,
and the ratios to the baseline arm at the same parallelism and concurrency, with their own intervals."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from slurmx.collect.collect import Row, arm_order
from slurmx.collect.stats import MIN_N, Estimate, Ratio, mean_interval, ratio_paired, ratio_unpaired
from slurmx.results.schema import Result


@dataclass(frozen=True)
class Metric:
    key: str  # the Row value it reads
    label: str
    higher_is_better: bool
    spec: str  # format of its numbers


METRICS = (
    Metric("tput_per_gpu", "tok/s/GPU", True, ".1f"),
    Metric("e2e_norm_intvty_p90", "E2E-norm tok/s/user p90", True, ".1f"),  # the headline (North Star) metric
    Metric("intvty_p50", "tok/s/user", True, ".1f"),
    Metric("ttft_p50_s", "TTFT p50 s", False, ".3f"),
    Metric("ttft_p90_s", "TTFT p90 s", False, ".3f"),
    Metric("e2el_p90_s", "e2e p90 s", False, ".2f"),
)
METRIC = {m.key: m for m in METRICS}


@dataclass
class PointAggregate:
    """One point over its valid repeats."""

    rows: list[Row]  # one per repeat, in repeat order
    estimates: dict[str, Estimate] = field(default_factory=dict)
    baseline_arm: str | None = None
    ratios: dict[str, Ratio] = field(default_factory=dict)  # over the baseline arm's aggregate

    @property
    def first(self) -> Row:
        return self.rows[0]

    @property
    def result(self) -> Result:
        return self.rows[0].parsed()

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def repeats_planned(self) -> int:
        return max(self.first.planned_repeats, self.n)

    @property
    def repeat_mode(self) -> str | None:
        return self.first.repeat_mode

    def values(self, metric: str) -> dict[int, float]:
        """repeat -> value, for the repeats that have the metric."""
        return {r.repeat: value for r in self.rows if (value := r.metric(metric)) is not None}

    def json(self) -> dict[str, Any]:
        v = self.first
        return {
            "config_key": v.config_key,
            "sweep_id": v.sweep_id,
            "point_id": v.point_id,
            "exp_name": v.exp_name,
            "parallelism": v.parallelism,
            "arm": v.arm,
            "conc": v.conc,
            "repeats": self.n,
            "repeats_planned": self.repeats_planned,
            "repeat_mode": self.repeat_mode,
            "metrics": {
                key: {**est.json(), "values": {str(r): x for r, x in self.values(key).items()}}
                for key, est in self.estimates.items()
            },
            "baseline_arm": self.baseline_arm,
            "ratios": {key: ratio.json() for key, ratio in self.ratios.items()},
        }


def point_key(row: Row) -> tuple[str, str]:
    return (row.config_key, row.point_id)


def aggregate(rows: Iterable[Row], key: Callable[[Row], Hashable] = point_key) -> list[PointAggregate]:
    """Rows grouped by `key` (the point, by default), each group's estimates computed, arm ratios added."""
    groups: dict[Hashable, list[Row]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    out = []
    for members in groups.values():
        members.sort(key=lambda r: r.repeat)
        agg = PointAggregate(members)
        for metric in METRICS:
            values = list(agg.values(metric.key).values())
            if values:
                agg.estimates[metric.key] = mean_interval(values)
        out.append(agg)
    add_arm_ratios(out)
    return sorted(out, key=_order)


def _order(a: PointAggregate) -> tuple[Any, ...]:
    v = a.first
    return (v.config_key, v.parallelism, arm_order(v.arm), v.conc)


def paired(a: PointAggregate, b: PointAggregate) -> bool:
    """Repeat i of each ran beside the other's repeat i: both as separate tasks, round by round."""
    return a.repeat_mode == b.repeat_mode == "separate-tasks" and a.n >= MIN_N and b.n >= MIN_N


def ratio(a: PointAggregate, b: PointAggregate, metric: str, pair: bool) -> Ratio | None:
    va, vb = a.values(metric), b.values(metric)
    if pair:
        common = sorted(set(va) & set(vb))
        if len(common) >= MIN_N:
            return ratio_paired([va[r] for r in common], [vb[r] for r in common])
    return ratio_unpaired(list(va.values()), list(vb.values()))


def add_arm_ratios(aggs: list[PointAggregate]) -> None:
    """Per config key, parallelism and concurrency: each arm over the no-offload arm (else the first arm)."""
    groups: dict[tuple[str, str, int], list[PointAggregate]] = {}
    for agg in aggs:
        v = agg.first
        groups.setdefault((v.config_key, v.parallelism, v.conc), []).append(agg)
    for members in groups.values():
        arms = sorted({m.first.arm for m in members}, key=arm_order)
        if len(arms) < 2:
            continue
        base = next(m for m in members if m.first.arm == arms[0])
        for agg in members:
            agg.baseline_arm = arms[0]
            if agg is base:
                continue
            pair = paired(agg, base)
            for metric in METRICS:
                r = ratio(agg, base, metric.key, pair)
                if r is not None:
                    agg.ratios[metric.key] = r


def rows_have_repeats(rows: Iterable[Row]) -> bool:
    """Whether some point's aggregate has n > 1 or repeats planned > 1, without aggregating: a point of a sweep
    with two rows, or a row whose point planned more than one repeat."""
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        key = (r.config_key, r.sweep_id, r.point_id)
        if r.planned_repeats > 1 or key in seen:
            return True
        seen.add(key)
    return False


def noise_pct(aggs: Iterable[PointAggregate], metric: str) -> list[float]:
    """Each point's interval half-width as % of its mean (points with an interval only)."""
    return [p for a in aggs if (e := a.estimates.get(metric)) is not None and (p := e.half_width_pct) is not None]
