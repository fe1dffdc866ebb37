"""What `slurmx collect` writes beside each sweep once the rows are read: summary.csv/.json (and InferenceX's
agg_<key>.json), the plots, each point's repeats aggregated into aggregates.json, the comparison against
--compare's baseline, and report.html. `commands/collect.py` only parses and prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmx.collect import collect as col
from slurmx.collect import frontier
from slurmx.collect.compare import Baseline, Comparison, compare
from slurmx.collect.repeats import PointAggregate, aggregate
from slurmx.store import atomic


def _writing(collection: col.Collection, only: set[Path] | None) -> list[col.SweepResults]:
    """The sweeps whose files are written: all, or those of `only` (sweep paths: `collect --index`'s changed)."""
    return [sr for sr in collection.sweeps if only is None or sr.sweep.path in only]


def write_summaries(
    collection: col.Collection, written: list[Path], *, inferencex: bool, only: set[Path] | None = None
) -> None:
    """summary.csv and summary.json beside each sweep with anything collected (and agg_<key>.json)."""
    for sr in _writing(collection, only):
        if not sr.rows and not sr.skipped:
            continue
        col.write_summaries(sr)
        written += [sr.sweep.summary_csv, sr.sweep.summary_json]
        if inferencex:
            path = sr.sweep.inferencex_json
            atomic.write_json(path, col.inferencex_list(sr.rows))
            written.append(path)


def write_plots(
    collection: col.Collection,
    written: list[Path],
    x_metric: str = frontier.DEFAULT_VIEW,
    only: set[Path] | None = None,
) -> str | None:
    """Each sweep's plots of its valid rows (the Pareto view against `x_metric`), unless drawn from these very
    files already; a note without matplotlib."""
    from slurmx.collect import plots

    if not plots.available():
        return "plots skipped: matplotlib is not installed (pip install 'slurmx[plots]')"
    for sr in _writing(collection, only):
        inputs = [r.path for r in sr.rows] + [s.path for s in sr.skipped]
        if sr.rows and not plots.up_to_date(sr.sweep.plots, inputs, x_metric):
            title = f"{sr.sweep.config_key}  (sweep {sr.sweep.sweep_id}, {len(sr.rows)} points)"
            valid = [r for r in sr.rows if r.valid]  # an invalid point's figures are not data
            written += plots.write_sweep_plots(valid, sr.sweep.plots, title, inputs, x_metric)
    return None


@dataclass
class Extras:
    collection: col.Collection
    comparison: Comparison | None = None
    report_note: str | None = None
    _aggregates: dict[Path, list[PointAggregate]] = field(default_factory=dict)  # sweep path -> its points

    def aggregates(self, sr: col.SweepResults) -> list[PointAggregate]:
        """The sweep's points over their repeats, aggregated on first use (a table without repeats needs none)."""
        if sr.sweep.path not in self._aggregates:
            self._aggregates[sr.sweep.path] = aggregate(sr.rows) if sr.rows else []
        return self._aggregates[sr.sweep.path]

    @property
    def all(self) -> list[PointAggregate]:
        return [a for sr in self.collection.sweeps for a in self.aggregates(sr)]

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
    x_metric: str = frontier.DEFAULT_VIEW,
    only: set[Path] | None = None,
) -> Extras:
    """Aggregate each sweep's repeats, compare with the baseline, write aggregates.json and report.html
    (nothing is written with write=False: a read-only tree still gets the comparison)."""
    extras = Extras(collection)
    if baseline is not None:
        extras.comparison = compare(extras.all, baseline, threshold)
    for sr in _writing(collection, only) if write else []:
        aggs = extras.aggregates(sr)
        if not sr.rows and not sr.skipped:
            continue
        atomic.write_json(
            sr.sweep.aggregates_json,
            {"config_key": sr.sweep.config_key, "sweep_id": sr.sweep.sweep_id, "points": [a.json() for a in aggs]},
        )
        written.append(sr.sweep.aggregates_json)
    if report:
        extras.report_note = _reports(_writing(collection, only), extras, written, x_metric)
    return extras


def _reports(chosen: list[col.SweepResults], extras: Extras, written: list[Path], x_metric: str) -> str | None:
    from slurmx.collect import report

    if not report.available():
        return "report.html skipped: jinja2 or matplotlib is not installed (pip install 'slurmx[report]')"
    for sr in chosen:
        if not sr.rows and not sr.skipped:
            continue
        html = report.render(sr, extras.aggregates(sr), extras.comparison, x_metric)
        report.write_report(sr.sweep, html)
        written.append(sr.sweep.report_html)
    return None
