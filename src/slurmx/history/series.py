"""One key's history from the index: per point identity, every sweep's value of a metric (oldest first), its
95 % interval where the sweep ran repeats, the noise floor, and the changes beyond it (changes.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from slurmx.collect.repeats import Metric
from slurmx.collect.stats import Estimate, mean_interval
from slurmx.history import changes as ch
from slurmx.history.index import IDENTITY, results, sweeps

# what ran, compared between the two sweeps around a change
RAN = ("image", "image_digest", "engine_version", "backend_version", "recipe_fingerprint", "node", "cluster")


@dataclass
class SweepValue:
    sweep_id: str
    cluster: str | None
    root: str
    ran_at: float | None
    estimate: Estimate
    values: list[float]  # one per valid repeat
    ran: dict[str, str | None]  # RAN -> the value (several joined with ",")

    def json(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id,
            "cluster": self.cluster,
            "root": self.root,
            "ran_at": self.ran_at,
            **self.estimate.json(),
            "values": self.values,
            "ran": self.ran,
        }


@dataclass
class FlaggedChange:
    change: ch.Change
    sweep: SweepValue  # the first sweep after it
    previous: SweepValue
    verdict: str  # better | worse
    what_changed: dict[str, tuple[str | None, str | None]]

    def json(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep.sweep_id,
            "cluster": self.sweep.cluster,
            "previous_sweep_id": self.previous.sweep_id,
            "change_pct": self.change.pct,
            "z": self.change.z,
            "verdict": self.verdict,
            "what_changed": {k: {"before": a, "after": b} for k, (a, b) in self.what_changed.items()},
        }


@dataclass
class Series:
    identity: dict[str, Any]
    label: str
    parallelism: str  # TP8, DEP8 ...: the label its results recorded
    points: list[SweepValue]
    floor: ch.NoiseFloor
    flagged: list[FlaggedChange] = field(default_factory=list)

    def newest_regression(self, threshold: float) -> FlaggedChange | None:
        """The change at the newest sweep when it is worse beyond noise by more than `threshold` (a fraction)."""
        for f in self.flagged:
            if f.sweep is self.points[-1] and f.verdict == "worse" and abs(f.change.ratio - 1.0) > threshold:
                return f
        return None

    def json(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "point": self.label,
            "noise_floor": {"sigma_log": self.floor.sigma, "pct": self.floor.pct, "source": self.floor.source},
            "sweeps": [p.json() for p in self.points],
            "changes": [f.json() for f in self.flagged],
        }


def _label(ident: dict[str, Any], parallelism: str) -> str:
    return f"{ident['infmax_model_prefix']} {ident['precision']} {ident['hw']} {parallelism} {ident['arm']} conc {ident['conc']}"


@dataclass(frozen=True)
class Only:
    """Which results of a key a history follows: one point id, and/or identity columns equal to a value."""

    point_id: str | None = None
    columns: tuple[tuple[str, str | int], ...] = ()  # (a column of FILTERS, its value)

    def clauses(self) -> list[sa.ColumnElement[bool]]:
        out = [results.c[name] == value for name, value in self.columns]
        if self.point_id is not None:
            out.append(results.c.point_id == self.point_id)
        return out

    def text(self) -> str:
        given = ([f"point {self.point_id}"] if self.point_id else []) + [f"{n} {v}" for n, v in self.columns]
        return ", ".join(given)


# the identity columns `history` filters on (option name = the column with "-" for "_")
FILTERS: tuple[tuple[str, type[str] | type[int]], ...] = (
    ("parallelism", str), ("arm", str), ("conc", int), ("spec_decoding", str), ("hw", str),
    ("precision", str), ("framework", str), ("model", str), ("kv_offloading", str),
)  # fmt: skip


def history(engine: Engine, config_key: str, metric: Metric, only: Only | None = None) -> list[Series]:
    """Every identity of `config_key` in the index with its series of `metric` (valid results only), of the
    results `only` selects."""
    value = results.c[metric.key]
    query = (
        sa.select(
            *(results.c[name] for name in IDENTITY),
            results.c.parallelism,
            value.label("value"),
            *(results.c[name] for name in RAN if name != "cluster"),
            results.c.sweep,
            sweeps.c.sweep_id,
            sweeps.c.cluster,
            sweeps.c.root,
            sweeps.c.ran_at,
        )
        .join(sweeps, results.c.sweep == sweeps.c.id)
        .where(
            results.c.config_key == config_key,
            results.c.valid.is_(True),
            value.is_not(None),
            *(only or Only()).clauses(),
        )
    )
    groups: dict[tuple[Any, ...], dict[int, list[Any]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(query):
            groups.setdefault(tuple(getattr(r, n) for n in IDENTITY), {}).setdefault(r.sweep, []).append(r)
    out = []
    for ident_values, by_sweep in groups.items():
        ident = dict(zip(IDENTITY, ident_values))
        points = [_sweep_value(rows) for rows in by_sweep.values()]
        points.sort(key=lambda p: (p.ran_at if p.ran_at is not None else math.inf, p.sweep_id))
        first_rows = next(iter(by_sweep.values()))
        par = first_rows[0].parallelism
        series = Series(ident, _label(ident, par), par, points, ch.NoiseFloor(None, "no values"))
        _judge(series, metric)
        out.append(series)
    return sorted(out, key=lambda s: (s.identity["arm"] != "none", s.identity["arm"], s.label, s.identity["conc"]))


def _sweep_value(rows: list[Any]) -> SweepValue:
    values = [float(r.value) for r in rows]
    first = rows[0]
    ran = {}
    for name in RAN:
        seen = sorted({str(v) for r in rows if (v := getattr(r, name)) is not None})
        ran[name] = ",".join(seen) or None
    return SweepValue(first.sweep_id, first.cluster, first.root, first.ran_at, mean_interval(values), values, ran)


def _judge(series: Series, metric: Metric) -> None:
    positive = [p for p in series.points if p.estimate.mean > 0]
    if len(positive) != len(series.points):  # a zero or negative mean has no log: judged on none of it
        series.floor = ch.NoiseFloor(None, "a sweep's mean is not positive")
        return
    means = [p.estimate.mean for p in series.points]
    series.floor = ch.noise_floor(means, [p.values for p in series.points])
    for c in ch.changes(means, series.floor):
        after, before = series.points[c.index], series.points[c.index - 1]
        up = c.ratio > 1.0
        verdict = "better" if up == metric.higher_is_better else "worse"
        diff = {k: (before.ran[k], after.ran[k]) for k in RAN if before.ran[k] != after.ran[k]}
        series.flagged.append(FlaggedChange(c, after, before, verdict, diff))
