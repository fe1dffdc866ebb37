"""`collect --compare BASELINE`: this collection against an earlier sweep, a results directory, or
InferenceX aggregate JSON files, point by point, with a noise-aware verdict per metric.

Points match on what decides what ran (model, hardware, framework, precision, parallelism, spec
decoding, KV offload and its backend, concurrency), never on run ids, sweep ids or the image. A
metric's verdict comes from its ratio interval (stats.py): within noise when it contains 1. Without
repeats on either side there is no measured noise, and a change within the tolerance (the
--fail-on-regression threshold, else 5 %) counts as within noise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slurmx.collect import collect as col
from slurmx.collect.repeats import METRICS, Metric, PointAggregate, aggregate
from slurmx.collect.repeats import ratio as aggregate_ratio
from slurmx.collect.stats import Estimate, Ratio, Verdict
from slurmx.errors import UserError
from slurmx.results import gate
from slurmx.results.schema import Result
from slurmx.store.targets import find_sweeps
from slurmx.store.tree import SWEEP_JSON, ResultsTree, SweepDir

DEFAULT_TOLERANCE = 0.05
Identity = tuple[Any, ...]


def identity(result: Result) -> Identity:
    """What makes two results the same point, whichever run, sweep or image they came from."""
    return (
        result.infmax_model_prefix, result.model, result.hw, result.framework, result.precision,
        result.scenario_type, result.is_multinode, result.disagg, result.spec_decoding, result.tp, result.ep,
        result.dp_attention.lower(), result.pp or 1, result.dcp_size or 1, result.pcp_size or 1,
        result.kv_offloading, result.backend_name, result.conc,
    )  # fmt: skip


def describe(agg: PointAggregate) -> str:
    v, r = agg.first, agg.result
    return f"{r.infmax_model_prefix} {r.precision} {r.hw} {v.parallelism} {v.arm} conc {v.conc}"


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05; anything else is a one-line error."""
    raw = text.strip().removesuffix("%")
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"--fail-on-regression {text!r}: expected a percentage such as 5%") from None
    if not 0 <= value < 1000:
        raise UserError(f"--fail-on-regression {text!r}: expected a percentage between 0 and 1000")
    return value / 100.0


# ---------------------------------------------------------------- the baseline


@dataclass
class Baseline:
    label: str
    rows: list[col.Row]
    sweeps: list[SweepDir] = field(default_factory=list)  # those in a results tree (left out of "current")
    skipped: list[col.Skipped] = field(default_factory=list)


def load_baseline(specs: list[str], tree: ResultsTree) -> Baseline:
    """An earlier sweep (KEY, SWEEP or KEY/SWEEP in `tree`), a results directory, or InferenceX files."""
    paths = [Path(s) for s in specs]
    if all(p.is_file() for p in paths):
        rows = [row for p in paths for row in inferencex_rows(p)]
        return Baseline(", ".join(str(p) for p in paths), rows)
    if len(paths) == 1 and paths[0].is_dir():
        sweeps = sweeps_under(paths[0])
        label = str(paths[0])
    else:
        for p in paths:
            if p.suffix == ".json" and not p.exists():
                raise UserError(f"--compare: {p}: no such file")
        sweeps, missing = find_sweeps(tree, specs)
        if missing:
            raise UserError(
                f"--compare: no sweep, results directory or file named {', '.join(missing)} (in {tree.root})"
            )
        label = ", ".join(f"{s.config_key}/{s.sweep_id}" for s in sweeps)
    if not sweeps:
        raise UserError(f"--compare: no sweep under {label}")
    collection = col.collect(sweeps)
    return Baseline(label, collection.rows, sweeps, collection.skipped)


def sweeps_under(path: Path) -> list[SweepDir]:
    """A sweep directory, a config key's directory, or a results root."""
    if (path / SWEEP_JSON).exists():
        return [SweepDir(path)]
    key_sweeps = list(ResultsTree(path.parent).sweeps(path.name))
    return key_sweeps or list(ResultsTree(path).sweeps())


def inferencex_rows(path: Path) -> list[col.Row]:
    """InferenceX's agg_<name>.json (a list of aggregates) or one aggregate object, as rows; entries with
    the same identity count as repeats of one point."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--compare: {path}: not a JSON file ({exc})") from None
    entries = data if isinstance(data, list) else [data]
    rows = []
    seen: dict[Identity, int] = {}
    fake_sweep = SweepDir(path.parent / path.stem)
    for index, entry in enumerate(entries):
        try:
            result = Result.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise UserError(
                f"--compare: {path}: entry {index}: not an InferenceX aggregate ({where}: {first['msg']})"
            ) from None
        reason = gate.check(result, max_error_rate=gate.threshold_of(result))
        if reason is not None:
            continue
        key = identity(result)
        seen[key] = seen.get(key, 0) + 1
        row = col.flatten(result, path, fake_sweep)
        rows.append(
            replace(row, config_key=path.name, point_id=f"{path.name}[{index}]", repeat=seen[key], repeat_mode=None)
        )
    return rows


# ---------------------------------------------------------------- comparing


@dataclass
class MetricChange:
    metric: Metric
    current: Estimate
    baseline: Estimate
    ratio: Ratio
    verdict: Verdict

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.ratio.value - 1.0)

    def regressed(self, threshold: float) -> bool:
        return self.verdict == "worse" and abs(self.ratio.value - 1.0) > threshold

    def json(self) -> dict[str, Any]:
        return {
            "metric": self.metric.key,
            "current": self.current.json(),
            "baseline": self.baseline.json(),
            "change_pct": self.change_pct,
            "ratio": self.ratio.json(),
            "verdict": self.verdict,
        }


@dataclass
class PointComparison:
    current: PointAggregate
    baseline: PointAggregate
    changes: list[MetricChange]

    @property
    def verdict(self) -> Verdict:
        verdicts = {c.verdict for c in self.changes}
        for v in ("worse", "better", "within noise"):
            if v in verdicts:
                return v
        return "n=1"


@dataclass
class Comparison:
    label: str
    points: list[PointComparison]
    only_current: list[PointAggregate]
    only_baseline: list[PointAggregate]
    tolerance: float
    threshold: float | None

    def regressions(self) -> list[tuple[PointComparison, MetricChange]]:
        if self.threshold is None:
            return []
        return [(p, c) for p in self.points for c in p.changes if c.regressed(self.threshold)]

    def counts(self) -> dict[str, int]:
        out = {"better": 0, "worse": 0, "within noise": 0}
        for p in self.points:
            out[p.verdict] = out.get(p.verdict, 0) + 1
        return out

    def summary_line(self) -> str:
        counts = self.counts()
        parts = [
            f"{len(self.points)} matched point(s): {counts['better']} better, {counts['worse']} worse, "
            f"{counts['within noise']} within noise"
        ]
        if self.only_current or self.only_baseline:
            parts.append(f"{len(self.only_current)} only here, {len(self.only_baseline)} only in the baseline")
        if self.threshold is not None:
            parts.append(f"{len(self.regressions())} regression(s) beyond {100 * self.threshold:g}%")
        return f"compared with {self.label}: " + "; ".join(parts)

    def json(self) -> dict[str, Any]:
        return {
            "baseline": self.label,
            "summary": self.summary_line(),
            "tolerance": self.tolerance,
            "fail_on_regression": self.threshold,
            "points": [
                {
                    "point": describe(p.current),
                    "point_id": p.current.first.point_id,
                    "baseline_point_id": p.baseline.first.point_id,
                    "verdict": p.verdict,
                    "changes": [c.json() for c in p.changes],
                }
                for p in self.points
            ],
            "only_current": [describe(a) for a in self.only_current],
            "only_baseline": [describe(a) for a in self.only_baseline],
            "regressions": [
                f"{describe(p.current)}: {c.metric.label} {c.change_pct:+.1f}%" for p, c in self.regressions()
            ],
        }


def by_identity(row: col.Row) -> Identity:
    return identity(row.parsed())


def compare(current: list[PointAggregate], baseline: Baseline, threshold: float | None = None) -> Comparison:
    tolerance = threshold if threshold else DEFAULT_TOLERANCE
    base = {identity(a.result): a for a in aggregate(baseline.rows, key=by_identity)}
    matched: list[PointComparison] = []
    only_current = []
    used: set[Identity] = set()
    for agg in current:
        key = identity(agg.result)
        other = base.get(key)
        if other is None or key in used:
            only_current.append(agg)
            continue
        used.add(key)
        changes = []
        for metric in METRICS:
            r = aggregate_ratio(agg, other, metric.key, pair=False)  # different runs: never paired
            cur, old = agg.estimates.get(metric.key), other.estimates.get(metric.key)
            if r is None or cur is None or old is None:
                continue
            changes.append(MetricChange(metric, cur, old, r, r.verdict(metric.higher_is_better, tolerance)))
        matched.append(PointComparison(agg, other, changes))
    only_baseline = [a for k, a in base.items() if k not in used]
    return Comparison(baseline.label, matched, only_current, only_baseline, tolerance, threshold)
