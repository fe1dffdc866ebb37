"""`slurmx collect`'s repeats, comparison and report: aggregates.json and report.html beside each sweep,
the intervals table, and the comparison against --compare's baseline. Parsing stays in collect.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from slurmx.results import collect as col
from slurmx.results.compare import Baseline, Comparison, compare, describe
from slurmx.results.repeats import METRICS, PointAggregate, aggregate
from slurmx.results.stats import Estimate
from slurmx.store import atomic


@dataclass
class Extras:
    aggregates: dict[Path, list[PointAggregate]] = field(default_factory=dict)  # sweep path -> its points
    comparison: Comparison | None = None
    report_note: str | None = None

    @property
    def all(self) -> list[PointAggregate]:
        return [a for aggs in self.aggregates.values() for a in aggs]

    @property
    def regressed(self) -> bool:
        return self.comparison is not None and bool(self.comparison.regressions())

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"aggregates": [a.json() for a in self.all]}
        if self.comparison is not None:
            out["comparison"] = self.comparison.json()
        if self.report_note:
            out["report_note"] = self.report_note
        return out


def finish(
    collection: col.Collection,
    written: list[Path],
    baseline: Baseline | None,
    threshold: float | None,
    *,
    report: bool,
    write: bool = True,
) -> Extras:
    """Aggregate each sweep's repeats, compare with the baseline, write aggregates.json and report.html
    (nothing is written with write=False: a read-only tree still gets the comparison)."""
    extras = Extras()
    for sr in collection.sweeps:
        if sr.rows:
            extras.aggregates[sr.sweep.path] = aggregate(sr.rows)
    if baseline is not None:
        extras.comparison = compare(extras.all, baseline, threshold)
    for sr in collection.sweeps if write else []:
        aggs = extras.aggregates.get(sr.sweep.path, [])
        if not sr.rows and not sr.skipped:
            continue
        atomic.write_json(sr.sweep.aggregates_json, {"config_key": sr.sweep.config_key, "sweep_id": sr.sweep.sweep_id,
                                                      "points": [a.json() for a in aggs]})  # fmt: skip
        written.append(sr.sweep.aggregates_json)
    if report:
        extras.report_note = _reports(collection, extras, written)
    return extras


def _reports(collection: col.Collection, extras: Extras, written: list[Path]) -> str | None:
    from slurmx.results import report

    if not report.available():
        return "report.html skipped: jinja2 or matplotlib is not installed (pip install 'slurmx[report]')"
    for sr in collection.sweeps:
        if not sr.rows and not sr.skipped:
            continue
        html = report.render(sr, extras.aggregates.get(sr.sweep.path, []), extras.comparison)
        report.write_report(sr.sweep, html)
        written.append(sr.sweep.report_html)
    return None


# ---------------------------------------------------------------- printing


def _est(est: Estimate | None, spec: str) -> str:
    return "-" if est is None else est.text(spec)


def print_intervals(aggs: list[PointAggregate]) -> None:
    """One row per point over its repeats: mean ±95 % half-width (as % of the mean), ratios with intervals."""
    console = Console(width=None if sys.stdout.isatty() else 220)
    by_key: dict[str, list[PointAggregate]] = {}
    for a in aggs:
        by_key.setdefault(a.first["config_key"], []).append(a)
    for key, members in by_key.items():
        title = f"{key}: {len(members)} points, means over repeats with 95% intervals (±% of the mean)"
        table = Table(title=title, title_justify="left")
        for name in ("parallelism", "arm", "conc", "repeats", *(m.label for m in METRICS),
                     "tput vs base", "TTFT p90 vs base"):  # fmt: skip
            table.add_column(name, justify="left" if name in ("parallelism", "arm") else "right", no_wrap=True)
        previous = None
        for a in members:
            v = a.first
            if previous is not None and (v["parallelism"], v["arm"]) != previous:
                table.add_section()
            previous = (v["parallelism"], v["arm"])
            ratios = [a.ratios[k].text() if k in a.ratios else "-" for k in ("tput_per_gpu", "ttft_p90_s")]
            table.add_row(v["parallelism"], v["arm"], str(v["conc"]), f"{a.n}/{a.repeats_planned}",
                          *(_est(a.estimates.get(m.key), m.spec) for m in METRICS), *ratios)  # fmt: skip
        console.print(table)
        modes = sorted({a.repeat_mode for a in members if a.repeat_mode})
        bases = sorted({a.baseline_arm for a in members if a.baseline_arm})
        if bases:
            how = (
                "paired by repeat" if modes == ["separate-tasks"] else "unpaired (repeats ran back to back per server)"
            )
            sys.stdout.write(
                f"  ratios over the {' / '.join(bases)} arm, {how}; an interval containing 1 is within noise\n"
            )
    sys.stdout.flush()


def print_comparison(comparison: Comparison) -> None:
    console = Console(width=None if sys.stdout.isatty() else 220)
    table = Table(title=f"compared with {comparison.label}", title_justify="left")
    table.add_column("point", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for m in METRICS:
        table.add_column(m.label, justify="right", no_wrap=True)
    style = {"better": "green", "worse": "red", "within noise": "dim"}
    for p in comparison.points:
        changes = {c.metric.key: c for c in p.changes}
        cells = []
        for m in METRICS:
            c = changes.get(m.key)
            cells.append("-" if c is None else f"[{style.get(c.verdict, '')}]{c.change_pct:+.1f}% {c.verdict}[/]")
        table.add_row(describe(p.current), f"[{style.get(p.verdict, '')}]{p.verdict}[/]", *cells)
    console.print(table)
    for a in comparison.only_current:
        console.print(f"  only here: {describe(a)}", markup=False, highlight=False)
    for a in comparison.only_baseline:
        console.print(f"  only in the baseline: {describe(a)}", markup=False, highlight=False)
    for p, c in comparison.regressions():
        console.print(f"  regression: {describe(p.current)}: {c.metric.label} {c.change_pct:+.1f}% ({c.ratio.text()})",
                      markup=False, highlight=False)  # fmt: skip
    console.print(comparison.summary_line(), markup=False, highlight=False)
