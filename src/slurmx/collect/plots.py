"""Per-sweep PNGs: the Pareto view (throughput per GPU against the chosen x metric, E2E-normalized
interactivity P90 by default, with its frontier drawn), the old throughput against 1/ITL p50 plot under its
own name, and TTFT p90 vs concurrency.

matplotlib is optional (extra `plots`); `available()` says whether it can be imported.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from slurmx.collect import frontier
from slurmx.collect.collect import Row, arm_order
from slurmx.store import atomic

PARETO_PNG = "tput_per_gpu_vs_interactivity.png"  # the 1/ITL p50 view, drawn before the North Star existed
TTFT_PNG = "ttft_p90_vs_conc.png"
ENERGY_PNG = "energy_vs_interactivity.png"  # only where points have power telemetry
_MARKERS = "osD^vP*X"
_DIGEST = ".inputs.sha256"
FRONTIER_COLOUR = "#e6a100"  # gold: in no arm's colour, so the frontier reads apart from the arms' lines
T = TypeVar("T")


def pareto_png(x_metric: str) -> str:
    """The Pareto view's file for an x metric: tput_per_gpu_vs_e2e_norm_intvty_p90.png by default."""
    return f"tput_per_gpu_vs_{x_metric}.png"


def frontier_legend(view: frontier.View, group: str) -> str:
    """The frontier's legend text (the report's caption repeats it)."""
    name = "North Star frontier" if view.key == frontier.NORTH_STAR.key else f"{view.short} frontier (North Star-gated)"
    return f"{name} · {group}" if group else name


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def inputs_digest(inputs: list[Path], x_metric: str = frontier.DEFAULT_VIEW) -> str:
    """Identity of the files a sweep's plots were drawn from (paths and mtimes), and of the x metric."""
    h = hashlib.sha256(x_metric.encode())
    for path in sorted(inputs):
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            stamp = -1
        h.update(f"{path}\0{stamp}\n".encode())
    return h.hexdigest()


def up_to_date(out_dir: Path, inputs: list[Path], x_metric: str = frontier.DEFAULT_VIEW) -> bool:
    """Every PNG exists and was drawn from exactly these inputs, so a re-run of collect can skip them."""
    if not all((out_dir / name).is_file() for name in (pareto_png(x_metric), PARETO_PNG, TTFT_PNG)):
        return False
    try:
        return (out_dir / _DIGEST).read_text(encoding="utf-8").strip() == inputs_digest(inputs, x_metric)
    except OSError:
        return False


def _save(path: Path, fig: Any) -> None:
    fig.savefig(path)


def drawn(
    draw: Callable[[Any, Any], None],
    data: Any,
    title: str,
    legend_title: str,
    size: tuple[float, float],
    dpi: int,
    save: Callable[[Any], T],
) -> T:
    """One figure in the house style (title, grid, legend): `draw` fills the axes, `save` keeps the figure
    (a file, PNG bytes); the figure is closed either way."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, dpi=dpi)
    try:
        draw(ax, data)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best", title=legend_title, title_fontsize=8)
        fig.tight_layout()
        return save(fig)
    finally:
        plt.close(fig)


def write_sweep_plots(
    rows: list[Row],
    out_dir: Path,
    title: str,
    inputs: list[Path] | None = None,
    x_metric: str = frontier.DEFAULT_VIEW,
) -> list[Path]:
    """The plots of one sweep into out_dir; [] when no row has the numbers to plot.

    `inputs` (the files the rows came from) are fingerprinted beside the PNGs for up_to_date()."""
    import matplotlib

    matplotlib.use("Agg")

    out_dir.mkdir(parents=True, exist_ok=True)
    series = _series(rows)
    if not series:
        return []
    drawings: list[tuple[str, Callable[[Any, dict[str, list[Row]]], None]]] = [
        (pareto_png(x_metric), functools.partial(_view, frontier.view_named(x_metric))),
        (PARETO_PNG, _pareto),
        (TTFT_PNG, _ttft),
    ]
    drawings = list(dict(drawings).items())  # --x-metric intvty_p50 names a file apart from PARETO_PNG
    if any(v.j_per_out_tok is not None for values in series.values() for v in values):
        drawings.append((ENERGY_PNG, _energy))
    written = []
    for name, draw in drawings:
        tmp = out_dir / f".{name}.tmp.png"
        drawn(draw, series, title, "arm · parallelism", (8, 5.5), 120, functools.partial(_save, tmp))
        tmp.replace(out_dir / name)  # a reader sees the old plot or the new one
        written.append(out_dir / name)
    if inputs is not None:
        atomic.write_text(out_dir / _DIGEST, inputs_digest(inputs, x_metric) + "\n")
    return written


_LINESTYLES = ("-", "--", ":", "-.")


def _style(label: str, series: dict[str, list[Row]]) -> dict[str, Any]:
    """One colour per arm, one line style (and marker) per parallelism, so arms compare at a glance."""
    arms = list(dict.fromkeys(v[0].arm for v in series.values()))
    pars = sorted({v[0].parallelism for v in series.values()})
    first = series[label][0]
    arm_i, par_i = arms.index(first.arm), pars.index(first.parallelism)
    return {
        "color": f"C{arm_i % 10}",
        "linestyle": _LINESTYLES[par_i % len(_LINESTYLES)],
        "marker": _MARKERS[par_i % len(_MARKERS)],
    }


def _series(rows: list[Row]) -> dict[str, list[Row]]:
    """Rows by line label: the arm, with the parallelism when a sweep has more than one."""
    parallelisms = {r.parallelism for r in rows}
    ordered = sorted(rows, key=lambda r: (arm_order(r.arm), r.parallelism, r.conc))
    out: dict[str, list[Row]] = {}
    for row in ordered:
        label = row.arm if len(parallelisms) == 1 else f"{row.arm} · {row.parallelism}"
        out.setdefault(label, []).append(row)
    return out


def _pareto(ax: Any, series: dict[str, list[Row]]) -> None:
    labelled: set[tuple[str, int]] = set()  # one "c<conc>" tag per parallelism and concurrency, not per arm
    for label, values in series.items():
        pts = [
            (v.intvty_p50, v.tput_per_gpu, v.conc)
            for v in values
            if v.intvty_p50 is not None and v.tput_per_gpu is not None
        ]
        if not pts:
            continue
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, label=label, linewidth=1.5, **_style(label, series))
        parallelism = values[0].parallelism
        for x, y, conc in pts:
            if (parallelism, conc) not in labelled:
                labelled.add((parallelism, conc))
                ax.annotate(f"c{conc}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7, color="0.3")
    ax.set_xlabel("interactivity: output tokens/s per user (median, 1/ITL p50)")
    ax.set_ylabel("throughput per GPU: total tokens/s/GPU")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)


def _view(view: frontier.View, ax: Any, series: dict[str, list[Row]]) -> None:
    """The Pareto view: every valid point per line, and each comparison group's frontier in gold on top."""
    for label, values in series.items():
        pts = sorted(
            (x, v.tput_per_gpu) for v in values if (x := v.metric(view.key)) is not None and v.tput_per_gpu is not None
        )
        if pts:
            style = {**_style(label, series), "linestyle": "none"}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, alpha=0.8, **style)
    rows = [v for values in series.values() for v in values]
    groups = {r.arm for r in rows}
    for group in sorted(groups, key=arm_order):
        winners = sorted(
            (x, r.tput_per_gpu)
            for r in rows
            if r.arm == group
            and view.key in r.frontier_views.split(";")
            and (x := r.metric(view.key)) is not None
            and r.tput_per_gpu is not None
        )
        if winners:
            legend = frontier_legend(view, group if len(groups) > 1 else "")
            ax.plot(*zip(*winners), color=FRONTIER_COLOUR, linewidth=2.5, marker="*", markersize=11, label=legend)
    frontier_axes(ax, view)


def frontier_axes(ax: Any, view: frontier.View) -> None:
    ax.set_xlabel(view.label + ("" if view.higher_is_better else ": lower is better"))
    ax.set_ylabel("throughput per GPU: total tokens/s/GPU")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)


def _energy(ax: Any, series: dict[str, list[Row]]) -> None:
    """GPU energy per output token against interactivity (points with valid power telemetry only)."""
    for label, values in series.items():
        pts = sorted(
            (v.intvty_p50, v.j_per_out_tok) for v in values if v.intvty_p50 is not None and v.j_per_out_tok is not None
        )
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, linewidth=1.5, **_style(label, series))
    ax.set_xlabel("interactivity: output tokens/s per user (median, 1/ITL p50)")
    ax.set_ylabel("GPU energy per output token (J)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)


def ttft_axes(ax: Any, concs: set[int]) -> None:
    """TTFT p90 against concurrency: the x axis names each concurrency run (log 2 when they span 8x or more)."""
    ax.set_xlabel("concurrency (concurrent sessions)")
    ax.set_ylabel("TTFT p90 (s)")
    if concs and max(concs) / max(min(concs), 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(concs))
    ax.set_xticklabels([str(c) for c in sorted(concs)])
    ax.set_ylim(bottom=0)


def _ttft(ax: Any, series: dict[str, list[Row]]) -> None:
    concs: set[int] = set()
    for label, values in series.items():
        pts = sorted((v.conc, v.ttft_p90_s) for v in values if v.ttft_p90_s is not None)
        if not pts:
            continue
        concs.update(p[0] for p in pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, linewidth=1.5, **_style(label, series))
    ttft_axes(ax, concs)
