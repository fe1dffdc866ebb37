"""The dashboard: one self-contained HTML page over the index (jinja2, matplotlib PNGs embedded as base64, nothing
fetched), per key: its sweeps with their clusters and reports, trend plots of the headline metric and throughput
per arm over time (95 % intervals where repeats ran, flagged changes marked), the newest sweep's North Star
frontier, and every change beyond noise linked to the two sweeps' report.html files.

`build` reads the index into plain data (tested without a browser); `render` draws and lays it out.
"""

from __future__ import annotations

import base64
import datetime
import io
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from slurmx.collect import frontier
from slurmx.collect.collect import arm_order
from slurmx.collect.repeats import METRIC, Metric
from slurmx.history.index import results, sweeps
from slurmx.history.series import FlaggedChange, Series, SweepValue, history
from slurmx.store.tree import SweepDir

TEMPLATE = "dashboard.html.j2"
PAGE = "index.html"
# what each key's trend plots follow: the headline (North Star) metric, then throughput
TRENDS = (METRIC[frontier.NORTH_STAR.key], METRIC[frontier.Y_METRIC])
_VIEW_METRICS = (frontier.Y_METRIC, *frontier.VIEWS)


@dataclass(frozen=True)
class SweepRow:
    sweep_id: str
    cluster: str | None
    root: str
    ran_at: float | None
    results: int  # valid results in the index
    report: Path  # its report.html (collect writes it)


@dataclass(frozen=True)
class Winner:
    arm: str
    group: str  # model, hardware, precision
    sweep: SweepRow  # the newest sweep that ran this group
    point_id: str
    parallelism: str
    conc: int
    headline: float | None  # mean over the point's valid repeats
    tput: float | None


@dataclass(frozen=True)
class Flag:
    metric: Metric
    series: Series
    flagged: FlaggedChange
    before: SweepRow
    after: SweepRow


@dataclass(frozen=True)
class KeyView:
    key: str
    sweeps: list[SweepRow]  # oldest first
    trends: dict[str, list[Series]]  # metric key -> its series (every identity)
    frontier: list[Winner]  # each comparison group's newest North Star winners
    flags: list[Flag]

    @property
    def arms(self) -> list[str]:
        return sorted({s.identity["arm"] for series in self.trends.values() for s in series}, key=arm_order)

    @property
    def clusters(self) -> list[str]:
        return sorted({s.cluster or "-" for s in self.sweeps})


def keys_in(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(sweeps.c.config_key).distinct()).scalars())


def build(engine: Engine, keys: list[str]) -> list[KeyView]:
    """Each key's view from the index, in the order given."""
    return [_key_view(engine, key) for key in keys]


def _when(row: SweepRow | Any) -> tuple[float, str]:
    return (row.ran_at if row.ran_at is not None else float("inf"), row.sweep_id)


def _key_view(engine: Engine, key: str) -> KeyView:
    valid = sa.func.sum(sa.case((results.c.valid.is_(True), 1), else_=0))
    query = (
        sa.select(sweeps.c.id, sweeps.c.sweep_id, sweeps.c.cluster, sweeps.c.root, sweeps.c.ran_at, valid.label("n"))
        .select_from(sweeps.outerjoin(results, results.c.sweep == sweeps.c.id))
        .where(sweeps.c.config_key == key)
        .group_by(sweeps.c.id, sweeps.c.sweep_id, sweeps.c.cluster, sweeps.c.root, sweeps.c.ran_at)
    )
    with engine.connect() as conn:
        found = sorted(conn.execute(query), key=_when)
    rows = {
        (r.root, r.sweep_id): SweepRow(
            r.sweep_id,
            r.cluster,
            r.root,
            r.ran_at,
            int(r.n or 0),
            SweepDir(Path(r.root) / key / r.sweep_id).report_html,
        )
        for r in found
    }
    trends = {m.key: history(engine, key, m) for m in TRENDS}
    flags = [
        Flag(m, s, f, rows[(f.previous.root, f.previous.sweep_id)], rows[(f.sweep.root, f.sweep.sweep_id)])
        for m in TRENDS
        for s in trends[m.key]
        for f in s.flagged
    ]
    flags.sort(key=lambda f: (_when(f.after), f.metric.key, f.series.label))
    return KeyView(key, list(rows.values()), trends, _frontier(engine, key, rows), flags)


def _frontier(engine: Engine, key: str, rows: dict[tuple[str, str], SweepRow]) -> list[Winner]:
    """Per comparison group (model, hardware, precision, arm), the North Star winners of the newest sweep that ran
    it, on each point's means over its valid repeats: collect's own frontier functions, over the index's rows."""
    query = (
        sa.select(
            sweeps.c.root, sweeps.c.sweep_id, results.c.point_id, results.c.arm, results.c.model, results.c.hw,
            results.c.precision, results.c.parallelism, results.c.conc, *(results.c[m] for m in _VIEW_METRICS),
        )
        .join(sweeps, results.c.sweep == sweeps.c.id)
        .where(results.c.config_key == key, results.c.valid.is_(True))
    )  # fmt: skip
    groups: dict[tuple[str, str, str, str], dict[tuple[str, str], dict[str, list[Any]]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(query):
            group = groups.setdefault((r.model, r.hw, r.precision, r.arm), {})
            group.setdefault((r.root, r.sweep_id), {}).setdefault(r.point_id, []).append(r)
    out = []
    for (model, hw, precision, arm), by_sweep in groups.items():
        newest = max(by_sweep, key=lambda ref: _when(rows[ref]))
        points = by_sweep[newest]
        coords = [{m: _mean(members, m) for m in _VIEW_METRICS} for members in points.values()]
        for members, views, c in zip(points.values(), frontier.frontiers(coords), coords):
            if frontier.NORTH_STAR.key in views:
                first = members[0]
                out.append(
                    Winner(
                        arm,
                        f"{model} {hw} {precision}",
                        rows[newest],
                        first.point_id,
                        first.parallelism,
                        first.conc,
                        c[frontier.NORTH_STAR.key],
                        c[frontier.Y_METRIC],
                    )  # fmt: skip
                )
    return sorted(out, key=lambda w: (arm_order(w.arm), w.group, w.headline or 0.0))


def _mean(rows: list[Any], metric: str) -> float | None:
    values = [v for r in rows if (v := getattr(r, metric)) is not None]
    return statistics.fmean(values) if values else None


# ---------------------------------------------------------------- drawing


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
FLAG_COLOUR = "#d62728"  # a change beyond noise: a red ring around the sweep where it happened


def _x(p: SweepValue, i: int) -> Any:
    return datetime.datetime.fromtimestamp(p.ran_at, tz=datetime.UTC) if p.ran_at is not None else i


def trend_image(view: KeyView, arm: str) -> str:
    """One arm's trend figure: headline metric above, throughput below; a line per identity, a marker shape per
    cluster, 95 % intervals as error bars, flagged changes ringed in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    marker = {c: _MARKERS[i % len(_MARKERS)] for i, c in enumerate(view.clusters)}
    shown = [s for s in view.trends[TRENDS[0].key] + view.trends[TRENDS[1].key] if s.identity["arm"] == arm]
    ran = {p.cluster or "-" for s in shown for p in s.points}
    fig, axes = plt.subplots(len(TRENDS), 1, figsize=(9, 3.2 * len(TRENDS)), dpi=90, sharex=True, squeeze=False)
    try:
        for ax, metric in zip(axes[:, 0], TRENDS):
            for colour, s in enumerate(x for x in view.trends[metric.key] if x.identity["arm"] == arm):
                name = f"{s.identity['hw']} {s.parallelism} conc {s.identity['conc']}"
                xs = [_x(p, i) for i, p in enumerate(s.points)]
                ax.plot(xs, [p.estimate.mean for p in s.points], color=f"C{colour % 10}", lw=1.2, label=name)
                for x, p in zip(xs, s.points):
                    e = p.estimate
                    err = [[e.mean - e.lo], [e.hi - e.mean]] if e.lo is not None and e.hi is not None else None
                    ax.errorbar([x], [e.mean], yerr=err, fmt=marker[p.cluster or "-"], color=f"C{colour % 10}",
                                ms=4, capsize=2, lw=0.8)  # fmt: skip
                for f in s.flagged:
                    x = xs[s.points.index(f.sweep)]
                    ax.plot([x], [f.sweep.estimate.mean], "o", ms=13, mfc="none", mec=FLAG_COLOUR, mew=2)
            ax.set_ylabel(metric.label, fontsize=9)
            ax.grid(True, alpha=0.3)
        handles, _ = axes[0, 0].get_legend_handles_labels()
        handles += [
            Line2D([], [], ls="", marker=marker[c], color="#555", label=f"cluster {c}") for c in marker if c in ran
        ]
        handles.append(Line2D([], [], ls="", marker="o", ms=9, mfc="none", mec=FLAG_COLOUR, mew=2, label="change"))
        axes[0, 0].legend(handles=handles, fontsize=7, loc="best")
        axes[0, 0].set_title(f"{view.key} · arm {arm}", fontsize=10)
        fig.autofmt_xdate()
        fig.tight_layout()
        return _png(fig)
    finally:
        plt.close(fig)


def _link(target: Path, out: Path) -> str:
    """The report's address from the page: relative where the two share a filesystem root, else absolute."""
    try:
        return Path(os.path.relpath(target, out)).as_posix()
    except ValueError:
        return target.as_uri()


def render(views: list[KeyView], out: Path, database: str) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("slurmx.history", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = lambda t: (
        "-" if t is None else datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M")
    )
    env.filters["link"] = lambda p: _link(p, out)
    env.filters["num"] = lambda v, spec=".1f": "-" if v is None else format(v, spec)
    keys = [
        {"view": v, "images": [(arm, trend_image(v, arm)) for arm in v.arms], "reports_exist": _exists(v)}
        for v in views
    ]
    return env.get_template(TEMPLATE).render(
        keys=keys,
        trends=TRENDS,
        database=database,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        north_star=frontier.NORTH_STAR,
    )


def _exists(view: KeyView) -> dict[Path, bool]:
    return {s.report: s.report.is_file() for s in view.sweeps}
