"""InferenceX's North Star Pareto policy (MODELS.md, "E2E normalized interactivity and Pareto-frontier
policy"), on plain numbers: pure functions, no rows, no files.

Throughput per GPU (higher is better) is the y axis of every view. The North Star frontier is the Pareto
frontier against E2E-normalized interactivity P90, `1 / p90(e2el_i / osl_i)`; every other view (TTFT,
E2E latency, conventional interactivity) shows only the points that are North Star winners *and*
non-dominated in that view's own coordinates. A point lacking either coordinate of a view is on no
frontier of that view (InferenceX: runs without per-request traces cannot join the canonical frontier).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Y_METRIC = "tput_per_gpu"


@dataclass(frozen=True)
class View:
    """One x axis of the Pareto plot: the Row column it reads and which way is better."""

    key: str
    label: str  # the axis label
    short: str  # the name in tables and legends
    higher_is_better: bool


NORTH_STAR = View(
    "e2e_norm_intvty_p90",
    "E2E-normalized interactivity P90: 1 / p90(E2EL/OSL), output tokens/s per user",
    "E2E-norm interactivity P90",
    True,
)
VIEWS: dict[str, View] = {
    v.key: v
    for v in (
        NORTH_STAR,
        View("intvty_p50", "interactivity: output tokens/s per user (median, 1/ITL p50)", "interactivity p50", True),
        View("ttft_p90_s", "TTFT p90 (s)", "TTFT p90", False),
        View("e2el_p90_s", "E2E latency p90 (s)", "E2E latency p90", False),
    )
}
DEFAULT_VIEW = NORTH_STAR.key

Coords = Mapping[str, float | None]  # column -> value of one point


def pareto(points: Sequence[tuple[float | None, float | None]], x_higher_is_better: bool) -> list[bool]:
    """Per point: non-dominated among the points that have both coordinates (y: higher is better). Equal points
    do not dominate each other, so a tie keeps both. A sort and one sweep: a point is dominated by a better y at
    its own x, or by a y at least as good at a better x."""
    known = [
        (x if x_higher_is_better else -x, y, i) for i, (x, y) in enumerate(points) if x is not None and y is not None
    ]
    known.sort(key=lambda p: (-p[0], -p[1]))
    out = [False] * len(points)
    best_before = -math.inf  # the best y at a strictly better x
    start = 0
    while start < len(known):
        end = start
        while end < len(known) and known[end][0] == known[start][0]:
            end += 1
        top = known[start][1]  # the best y at this x (sorted)
        for _, y, i in known[start:end]:
            out[i] = y == top and y > best_before
        best_before = max(best_before, top)
        start = end
    return out


def on_view(points: Sequence[Coords], view: View, y: str = Y_METRIC, north: list[bool] | None = None) -> list[bool]:
    """Per point: on `view`'s published frontier, i.e. a North Star winner and non-dominated in `view`
    (`north`: the North Star frontier, when the caller has it already)."""
    if north is None:
        north = pareto([(p.get(NORTH_STAR.key), p.get(y)) for p in points], True)
    if view.key == NORTH_STAR.key:
        return north
    own = pareto([(p.get(view.key), p.get(y)) for p in points], view.higher_is_better)
    return [a and b for a, b in zip(north, own)]


def frontiers(points: Sequence[Coords], y: str = Y_METRIC) -> list[tuple[str, ...]]:
    """Per point: the keys of every view whose frontier it is on (North Star first); () when dominated."""
    north = on_view(points, NORTH_STAR, y)
    flags = {key: on_view(points, view, y, north) for key, view in VIEWS.items()}
    return [tuple(key for key in VIEWS if flags[key][i]) for i in range(len(points))]


def view_named(name: str) -> View:
    """The view of that column name; KeyError names the known ones."""
    try:
        return VIEWS[name]
    except KeyError:
        raise KeyError(f"unknown x metric {name!r} (choose from {', '.join(VIEWS)})") from None
