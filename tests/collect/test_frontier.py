"""InferenceX's North Star policy on hand-made points (collect/frontier.py), then as collect applies it to
rows: per comparison group, on the means over repeats, invalid points on no frontier."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.collect import collect as col
from slurmx.collect import frontier
from slurmx.collect.frontier import NORTH_STAR, VIEWS, Coords, on_view, pareto
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result, write_sweep


def _pt(ns: float | None, tput: float | None, ttft: float = 1.0, itl: float = 10.0, e2el: float = 30.0) -> Coords:
    return {"e2e_norm_intvty_p90": ns, "tput_per_gpu": tput, "ttft_p90_s": ttft, "intvty_p50": itl, "e2el_p90_s": e2el}


def test_a_single_point_is_on_every_frontier() -> None:
    assert pareto([(3.0, 4.0)], True) == [True]
    assert frontier.frontiers([_pt(3.0, 4.0)]) == [tuple(VIEWS)]


def test_equal_points_do_not_dominate_each_other() -> None:
    assert pareto([(3.0, 4.0), (3.0, 4.0), (2.0, 4.0)], True) == [True, True, False]
    # equal x, one higher y: the lower is dominated (strictly worse on one axis, no better on the other)
    assert pareto([(3.0, 4.0), (3.0, 5.0)], True) == [False, True]


def test_all_dominated_but_one() -> None:
    points = [(1.0, 1.0), (2.0, 3.0), (5.0, 9.0), (4.0, 8.0), (0.5, 2.0)]
    assert pareto(points, True) == [False, False, True, False, False]


def test_a_tradeoff_keeps_both_ends_and_drops_the_inside() -> None:
    # the classic staircase: more interactivity, less throughput; (2, 2) lies under (2.5, 6)
    points = [(1.0, 10.0), (2.0, 2.0), (2.5, 6.0), (4.0, 1.0)]
    assert pareto(points, True) == [True, False, True, True]


def test_lower_is_better_axes_are_minimised() -> None:
    # TTFT: the faster point with the same throughput wins; higher-is-better would pick the other
    assert pareto([(0.5, 4.0), (2.0, 4.0)], False) == [True, False]
    assert pareto([(0.5, 4.0), (2.0, 4.0)], True) == [False, True]


def test_a_point_without_a_coordinate_is_on_no_frontier() -> None:
    points = [_pt(None, 100.0), _pt(1.0, 1.0)]
    assert on_view(points, NORTH_STAR) == [False, True]  # it beats no one on the North Star
    # it is still drawn in the other views, whose true frontier (InferenceX: in the displayed coordinates)
    # it dominates: the North Star winner is on no other view, and the point without the metric on none
    assert frontier.frontiers(points) == [(), ("e2e_norm_intvty_p90",)]


def test_a_view_shows_only_north_star_winners_non_dominated_in_it() -> None:
    a = _pt(10.0, 100.0, ttft=1.0)  # wins the North Star
    b = _pt(5.0, 50.0, ttft=0.1)  # dominated on the North Star, unbeaten on TTFT
    c = _pt(12.0, 40.0, ttft=2.0)  # a North Star winner, dominated on TTFT by a
    ttft = VIEWS["ttft_p90_s"]
    assert pareto([(p["ttft_p90_s"], p["tput_per_gpu"]) for p in (a, b, c)], False) == [True, True, False]
    assert on_view([a, b, c], NORTH_STAR) == [True, False, True]
    assert on_view([a, b, c], ttft) == [True, False, False]  # b excluded by the gate, c by its own view
    assert frontier.frontiers([a, b, c]) == [
        ("e2e_norm_intvty_p90", "intvty_p50", "ttft_p90_s", "e2el_p90_s"),
        (),
        ("e2e_norm_intvty_p90",),  # a matches its interactivity and E2E latency with more throughput
    ]


def test_an_unknown_view_names_the_known_ones() -> None:
    try:
        frontier.view_named("ttft")
    except KeyError as exc:
        assert "e2e_norm_intvty_p90" in str(exc)
    else:
        raise AssertionError("no KeyError")


KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def test_collect_marks_each_comparison_group_on_point_means(tmp_path: Path) -> None:
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", []))

    def put(point_id: str, arm: str, tput: float, ns: float, repeat: int = 1, errors: int = 0) -> None:
        r = make_result(point_id=point_id, config_key=KEY, sweep_id="s1", arm=arm, tput_per_gpu=tput, errors=errors)
        assert r.slurmx is not None
        r.request_metrics.latency.e2e_norm_intvty.p90 = ns
        r.slurmx.repeat = repeat
        write_result(sweep.point(point_id, repeat).result_json, r)

    put("n1", "none", 100.0, 10.0)
    put("n2", "none", 50.0, 5.0)  # dominated by n1
    put("l1", "lmcache", 40.0, 4.0)  # the lmcache group's only valid point: a winner though n1 beats it
    put("l2", "lmcache", 900.0, 90.0, errors=100)  # invalid: on no frontier, and it beats no one
    # two repeats whose mean (60, 6) beats n2's... and loses to n1's: a repeat alone would say otherwise
    put("n3", "none", 110.0, 11.0, repeat=1)
    put("n3", "none", 10.0, 1.0, repeat=2)
    rows = {(r.point_id, r.repeat): r for r in col.collect([sweep]).rows}
    assert {k: r.north_star for k, r in rows.items()} == {
        ("n1", 1): True, ("n2", 1): False, ("l1", 1): True, ("l2", 1): False, ("n3", 1): False, ("n3", 2): False,
    }  # fmt: skip
    assert rows[("l2", 1)].frontier_views == "" and not rows[("l2", 1)].valid
    groups = {g["arm"]: g for g in col.frontier_json(rows.values())}
    assert [w["point_id"] for w in groups["none"]["north_star"]] == ["n1"]
    assert sorted(groups["none"]["dominated"]) == ["n2", "n3"]
    assert groups["none"]["north_star"][0]["tput_per_gpu"] == 100.0
    assert [w["point_id"] for w in groups["lmcache"]["north_star"]] == ["l1"]


def test_collect_shows_the_headline_column_and_the_frontier_and_draws_the_chosen_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurmx.cli import main
    from slurmx.collect import plots

    results = [make_result(point_id=f"p{c}", config_key=KEY, sweep_id="s1", conc=c) for c in (4, 8, 16)]
    results.append(make_result(point_id="slow", config_key=KEY, sweep_id="s1", conc=8, tput_per_gpu=1.0))
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", results))
    assert main(["collect", "--results", str(tmp_path), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "E2E-norm p90" in out and "dominated" in out
    (line,) = [x for x in out.splitlines() if "North Star frontier" in x]
    assert "p4, p8, p16" in line and "slow" not in line and "1 dominated" in line
    assert (sweep.plots / plots.pareto_png("e2e_norm_intvty_p90")).is_file()
    assert (sweep.plots / plots.PARETO_PNG).is_file()  # the old 1/ITL p50 plot, under its own name
    assert main(["collect", "--results", str(tmp_path), "--no-report", "--x-metric", "ttft_p90_s"]) == 0
    assert "TTFT p90 frontier" in capsys.readouterr().out
    assert (sweep.plots / plots.pareto_png("ttft_p90_s")).is_file()


def test_the_sweep_equals_the_pairwise_definition_of_dominance() -> None:
    """pareto() sorts and sweeps; on random points with ties and missing values it keeps exactly the points no
    other point dominates (at least as good on both axes, better on one)."""
    import random

    from slurmx.collect.frontier import pareto

    def pairwise(points: list[tuple[int | None, int | None]], higher: bool) -> list[bool]:
        known = [(i, (x if higher else -x, y)) for i, (x, y) in enumerate(points) if x is not None and y is not None]
        out = [False] * len(points)
        for i, (px, py) in known:
            out[i] = not any(qx >= px and qy >= py and (qx > px or qy > py) for j, (qx, qy) in known if j != i)
        return out

    rng = random.Random(20261201)
    for _ in range(300):
        values = [None, 0, 1, 2, 3, 4]
        points = [(rng.choice(values), rng.choice(values)) for _ in range(rng.randint(0, 12))]
        for higher in (True, False):
            assert pareto(points, higher) == pairwise(points, higher), (points, higher)
