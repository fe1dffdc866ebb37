"""report.html beside a sweep's summary: one self-contained page (jinja2 template, matplotlib PNGs embedded
as base64), readable without a network: the arms table with intervals and each point's frontier mark, the
Pareto plot (E2E-normalized interactivity P90 by default) with its North Star frontier and the winners
table, TTFT against concurrency, invalid points with their reasons, the versions that ran, and the
comparison when asked.

jinja2 and matplotlib are optional (extra `report`); `available()` says whether both import.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import time
from dataclasses import dataclass
from typing import Any

from slurmx import __version__
from slurmx.collect import frontier, plots
from slurmx.collect.collect import SweepResults, arm_order, sorted_rows
from slurmx.collect.compare import Comparison, describe
from slurmx.collect.repeats import METRIC, METRICS, PointAggregate
from slurmx.collect.stats import Estimate, Ratio
from slurmx.store import atomic
from slurmx.store.state import read_state
from slurmx.store.tree import REPEATS, SweepDir

TEMPLATE = "report.html.j2"


def available() -> bool:
    try:
        import jinja2  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Problem:
    where: str
    reason: str


def problems(sr: SweepResults) -> list[Problem]:
    """Result files not counted, and repeats that ended without a result (their state's reason)."""
    out = [Problem(str(s.path.relative_to(sr.sweep.path)), s.reason) for s in sr.skipped if s.kind == "invalid"]
    for point in sr.sweep.points():
        dirs = [point, *(point.repeat_dir(int(d.name)) for d in sorted((point.path / REPEATS).glob("[0-9]*")))]
        for run in dirs:
            state = read_state(run.state_json)
            if state is not None and state.stage in ("failed", "cancelled") and not run.result_json.exists():
                where = point.point_id + (f" repeat {run.repeat}" if run.repeat > 1 else "")
                out.append(Problem(where, f"{state.stage}: {state.reason or 'no reason recorded'}"))
    return out


def lock_facts(sr: SweepResults) -> list[tuple[str, str]]:
    """What ran: slurmx, the image, engine, KV tier and aiperf versions, recipe fingerprints."""
    facts: dict[str, set[str]] = {}

    def add(name: str, value: object) -> None:
        if value not in (None, ""):
            facts.setdefault(name, set()).add(str(value))

    try:
        sweep = json.loads(sr.sweep.sweep_json.read_text(encoding="utf-8"))
        add("slurmx (submit)", sweep.get("slurmx_version"))
        add("cluster", sweep.get("cluster_label"))
    except (OSError, ValueError):
        pass
    add("slurmx (collect)", __version__)
    for row in sr.rows:
        r = row.parsed()
        add("image", r.image)
        add("model", r.model)
        add("framework", r.framework)
        add("recipe fingerprint", r.recipe_fingerprint[:16] if r.recipe_fingerprint else None)
        if r.slurmx is not None:
            add("engine version", r.slurmx.engine_version)
            add(f"{r.backend_name} version", r.slurmx.backend_version)
            add("aiperf version", r.slurmx.aiperf_version)
            add("nodes", r.slurmx.node)
    return [(name, ", ".join(sorted(values))) for name, values in facts.items()]


# ---------------------------------------------------------------- plots


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _err(est: Estimate | None) -> tuple[float, float]:
    if est is None or est.lo is None or est.hi is None:
        return (0.0, 0.0)
    return (est.mean - est.lo, est.hi - est.mean)


def _series(aggs: list[PointAggregate]) -> dict[str, list[PointAggregate]]:
    parallelisms = {a.first.parallelism for a in aggs}
    out: dict[str, list[PointAggregate]] = {}
    for a in sorted(aggs, key=lambda a: (arm_order(a.first.arm), a.first.parallelism, a.first.conc)):
        v = a.first
        out.setdefault(v.arm if len(parallelisms) == 1 else f"{v.arm} · {v.parallelism}", []).append(a)
    return out


def _groups(aggs: list[PointAggregate]) -> list[str]:
    return sorted({a.first.arm for a in aggs}, key=arm_order)


def pareto_caption(aggs: list[PointAggregate], view: frontier.View) -> str:
    groups = _groups(aggs)
    legends = [plots.frontier_legend(view, g if len(groups) > 1 else "") for g in groups]
    return (
        f"Throughput per GPU against {view.label} (means, 95% intervals as error bars); "
        f"in gold with stars: {', '.join(legends)}"
    )


def plot_images(aggs: list[PointAggregate], title: str, x_metric: str = frontier.DEFAULT_VIEW) -> list[tuple[str, str]]:
    """(caption, data URI) of the Pareto plot with its frontier and TTFT p90 against concurrency, means with
    95 % error bars."""
    import matplotlib

    matplotlib.use("Agg")
    view = frontier.view_named(x_metric)
    series = _series(aggs)
    images = []
    for caption, draw in (
        (pareto_caption(aggs, view), functools.partial(_pareto, view)),
        ("TTFT p90 against concurrency per arm (means, 95% intervals as error bars)", _ttft),
    ):
        images.append((caption, plots.drawn(draw, series, title, "arm", (8, 5), 100, _png)))
    return images


def _on(a: PointAggregate, view: frontier.View) -> bool:
    return view.key in a.first.frontier_views.split(";")


def _pareto(view: frontier.View, ax: Any, series: dict[str, list[PointAggregate]]) -> None:
    for i, (label, members) in enumerate(series.items()):
        pts = [(a.estimates.get(view.key), a.estimates.get("tput_per_gpu"), a.first.conc) for a in members]
        pts2 = sorted(((x, y, c) for x, y, c in pts if x is not None and y is not None), key=lambda p: p[0].mean)
        if not pts2:
            continue
        xs, ys = [p[0].mean for p in pts2], [p[1].mean for p in pts2]
        xerr = list(zip(*(_err(p[0]) for p in pts2)))
        yerr = list(zip(*(_err(p[1]) for p in pts2)))
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, label=label, color=f"C{i % 10}", marker="o", capsize=3, linewidth=1.5)
        for x, y, (_, _, conc) in zip(xs, ys, pts2):
            ax.annotate(f"c{conc}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color="0.3")
    aggs = [a for members in series.values() for a in members]
    groups = _groups(aggs)
    for group in groups:
        winners = sorted(
            (ex.mean, ey.mean)
            for a in aggs
            if a.first.arm == group
            and _on(a, view)
            and (ex := a.estimates.get(view.key)) is not None
            and (ey := a.estimates.get("tput_per_gpu")) is not None
        )
        if winners:
            legend = plots.frontier_legend(view, group if len(groups) > 1 else "")
            ax.plot(*zip(*winners), color=plots.FRONTIER_COLOUR, linewidth=2.5, marker="*", markersize=11, label=legend)
    plots.frontier_axes(ax, view)


def _ttft(ax: Any, series: dict[str, list[PointAggregate]]) -> None:
    concs: set[int] = set()
    for i, (label, members) in enumerate(series.items()):
        pts = sorted(
            ((a.first.conc, a.estimates["ttft_p90_s"]) for a in members if "ttft_p90_s" in a.estimates),
            key=lambda p: p[0],
        )
        if not pts:
            continue
        concs.update(p[0] for p in pts)
        yerr = list(zip(*(_err(p[1]) for p in pts)))
        ax.errorbar(
            [p[0] for p in pts],
            [p[1].mean for p in pts],
            yerr=yerr,
            label=label,
            color=f"C{i % 10}",
            marker="o",
            capsize=3,
            linewidth=1.5,
        )
    plots.ttft_axes(ax, concs)


# ---------------------------------------------------------------- the page


def _cell(est: Estimate | None, spec: str) -> dict[str, str]:
    if est is None:
        return {"mean": "-", "interval": ""}
    if est.lo is None or est.hi is None:
        return {"mean": format(est.mean, spec), "interval": f"n={est.n}"}
    return {
        "mean": format(est.mean, spec),
        "interval": f"[{format(est.lo, spec)}, {format(est.hi, spec)}] ±{est.half_width_pct:.1f}%",
    }


def _ratio_cell(r: Ratio | None) -> dict[str, Any]:
    if r is None:
        return {"text": "-", "ci": "", "noise": False}
    if r.lo is None or r.hi is None:
        return {"text": f"{r.value:.2f}x", "ci": f"n={r.n}", "noise": False}
    ci = f"[{r.lo:.2f}, {r.hi:.2f}]{' paired' if r.paired else ''}"
    return {
        "text": "within noise" if r.within_noise else f"{r.value:.2f}x",
        "ci": f"{r.value:.2f}x {ci}" if r.within_noise else ci,
        "noise": r.within_noise,
    }


def frontier_mark(a: PointAggregate, view: frontier.View) -> str:
    """The arms table's frontier cell: on the shown view's frontier, a North Star winner only, or dominated."""
    if _on(a, view):
        return "North Star" if view.key == frontier.NORTH_STAR.key else f"North Star, {view.short}"
    return "North Star only" if a.first.north_star else "dominated"


def winners(aggs: list[PointAggregate], view: frontier.View) -> list[dict[str, Any]]:
    """The winners table: each comparison group's points on the shown view's frontier, by x."""
    out = []
    for group in _groups(aggs):
        members = [a for a in aggs if a.first.arm == group and _on(a, view)]
        members.sort(key=lambda a: e.mean if (e := a.estimates.get(view.key)) else 0.0)
        for a in members:
            r = a.result
            out.append(
                {
                    "group": f"{r.model} · {r.hw} · {r.precision} · {group}",
                    "point_id": a.first.point_id,
                    "parallelism": a.first.parallelism,
                    "conc": a.first.conc,
                    "x": _cell(a.estimates.get(view.key), METRIC[view.key].spec),
                    "y": _cell(a.estimates.get("tput_per_gpu"), METRIC["tput_per_gpu"].spec),
                }
            )
    return out


def _table(aggs: list[PointAggregate], view: frontier.View) -> list[dict[str, Any]]:
    rows = []
    for a in aggs:
        v = a.first
        rows.append(
            {
                "parallelism": v.parallelism,
                "arm": v.arm,
                "conc": v.conc,
                "point_id": v.point_id,
                "n": f"{a.n}/{a.repeats_planned}",
                "mode": a.repeat_mode or "-",
                "cells": [_cell(a.estimates.get(m.key), m.spec) for m in METRICS],
                "ratios": [_ratio_cell(a.ratios.get(key)) for key in ("tput_per_gpu", "ttft_p90_s")],
                "frontier": frontier_mark(a, view),
            }
        )
    return rows


def _comparison(comparison: Comparison, aggs: list[PointAggregate]) -> dict[str, Any]:
    mine = {id(a) for a in aggs}
    return {
        "summary": comparison.summary_line(),
        "points": [
            {
                "point": describe(p.current),
                "verdict": p.verdict,
                "changes": [
                    {
                        "metric": c.metric.label,
                        "change": f"{c.change_pct:+.1f}%",
                        "verdict": c.verdict,
                        "ratio": c.ratio.text(),
                    }
                    for c in p.changes
                ],
            }
            for p in comparison.points
            if id(p.current) in mine
        ],
        "only_current": [describe(a) for a in comparison.only_current if id(a) in mine],
        "only_baseline": [describe(a) for a in comparison.only_baseline],
        "regressions": [
            f"{describe(p.current)}: {c.metric.label} {c.change_pct:+.1f}%"
            for p, c in comparison.regressions()
            if id(p.current) in mine
        ],
    }


def certification(sr: SweepResults) -> dict[str, Any]:
    """The certification section: the rule(s) the points were certified with, and each valid point whose sample
    does not support a reported percentile (or whose TTFT p90 ratio has an uncertified side)."""
    rules = set()
    uncertified = []
    for row in sorted_rows(r for r in sr.rows if r.valid):
        meta = row.parsed().slurmx
        cert = meta.certification if meta is not None else None
        if cert is None:
            rules.add("none recorded (written before slurmx certified percentiles)")
            continue
        width = f", ±{100 * cert.rel_width:g}%" if cert.rel_width is not None else ""
        rules.add(f"{cert.method} at {100 * cert.confidence:g}% confidence{width}")
        if row.uncertified or row.ratio_uncertified:
            uncertified.append(
                {
                    "point": f"{row.parallelism} {row.arm} conc {row.conc}"
                    + (f" repeat {row.repeat}" if row.repeat > 1 else ""),
                    "point_id": row.point_id,
                    "marks": row.uncertified or "all certified",
                    "ratio": row.ratio_uncertified or "",
                }
            )
    return {"rules": sorted(rules), "uncertified": uncertified}


def render(
    sr: SweepResults,
    aggs: list[PointAggregate],
    comparison: Comparison | None = None,
    x_metric: str = frontier.DEFAULT_VIEW,
) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("slurmx.collect", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    sweep = sr.sweep
    view = frontier.view_named(x_metric)
    title = f"{sweep.config_key}  (sweep {sweep.sweep_id})"
    return env.get_template(TEMPLATE).render(
        title=title,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        metrics=METRICS,
        ratio_metrics=[METRIC["tput_per_gpu"], METRIC["ttft_p90_s"]],
        rows=_table(aggs, view),
        view=view,
        north_star=frontier.NORTH_STAR,
        winners=winners(aggs, view),
        results=len(sr.rows),
        images=plot_images(aggs, title, x_metric) if aggs else [],
        problems=problems(sr),
        facts=lock_facts(sr),
        comparison=_comparison(comparison, aggs) if comparison is not None else None,
        certification=certification(sr),
    )


def write_report(sweep: SweepDir, html: str) -> None:
    atomic.write_text(sweep.report_html, html)
