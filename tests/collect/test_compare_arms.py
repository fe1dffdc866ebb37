"""`collect --compare`: every arm and parallelism is matched to its own counterpart (not only the none arm at one
TP), and each metric's verdict goes the metric's way: a lower TTFT is better, a lower throughput is worse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
NOISE = (0.99, 1.0, 1.01)  # +-1 % run to run, on every metric the test sets
# point id -> (conc, arm, ep and dp-attn, throughput per GPU, TTFT p90 s)
Points = dict[str, tuple[int, str, bool, float, float]]


def _sweep(root: Path, sweep_id: str, points: Points) -> None:
    sweep = write_sweep(root, KEY, sweep_id, [])
    for point_id, (conc, arm, dep, tput, ttft) in points.items():
        for repeat in (1, 2, 3):
            wiggle = NOISE[repeat - 1]
            r = make_result(point_id=point_id, config_key=KEY, sweep_id=sweep_id, conc=conc, arm=arm,
                            ep=8 if dep else 1, dp_attn=dep, tput_per_gpu=tput * wiggle, ttft_p90_s=ttft * wiggle)  # fmt: skip
            assert r.slurmx is not None
            r.slurmx.repeat, r.slurmx.repeats, r.slurmx.repeat_mode = repeat, 3, "separate-tasks"
            write_result(SweepDir(sweep).point(point_id, repeat).result_json, r)


def _compare(tmp_path: Path, old: Points, new: Points, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    _sweep(tmp_path / "old", "s-old", old)
    _sweep(tmp_path / "new", "s-new", new)
    capsys.readouterr()
    code = main(["collect", "--no-plots", "--json", "--results", str(tmp_path / "new"), "--compare",
                 str(tmp_path / "old")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    comparison: dict[str, Any] = json.loads(out)["comparison"]
    return comparison


def _by_point(comparison: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """'<parallelism> <arm> <conc>' -> its verdict and each metric's (verdict, change %)."""
    out = {}
    for p in comparison["points"]:
        parallelism, arm, _, conc = p["point"].split()[3:]
        changes = {c["metric"]: (c["verdict"], round(c["change_pct"], 6)) for c in p["changes"]}
        out[f"{parallelism} {arm} {conc}"] = {"point": p["verdict"], **changes}
    return out


def test_each_arm_and_parallelism_is_compared_with_its_own_counterpart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The three points share a concurrency; their figures differ so much that any cross-matching shows.
    old: Points = {"n8": (8, "none", False, 1000.0, 2.0), "l8": (8, "lmcache", False, 1500.0, 1.0),
                   "d8": (8, "none", True, 3000.0, 4.0), "v8": (8, "vllm-simple", False, 1200.0, 1.5)}  # fmt: skip
    new: Points = {"x1": (8, "vllm-simple", False, 1200.0, 1.5), "x2": (8, "none", True, 2700.0, 4.0),
                   "x3": (8, "lmcache", False, 1500.0, 0.8), "x4": (8, "none", False, 1000.0, 2.0),
                   "x5": (16, "lmcache", False, 1600.0, 1.0)}  # fmt: skip
    comparison = _compare(tmp_path, old, new, capsys)
    points = _by_point(comparison)
    assert set(points) == {"TP8 none 8", "TP8 lmcache 8", "DEP8 none 8", "TP8 vllm-simple 8"}
    # by hand, new / old - 1 for each point against its own arm and parallelism
    assert points["TP8 none 8"]["tput_per_gpu"] == ("within noise", 0.0)  # 1000 / 1000
    assert points["TP8 none 8"]["ttft_p90_s"] == ("within noise", 0.0)  # 2.0 / 2.0
    assert points["TP8 vllm-simple 8"]["point"] == "within noise"  # 1200 / 1200 and 1.5 / 1.5
    assert points["TP8 lmcache 8"]["tput_per_gpu"] == ("within noise", 0.0)  # 1500 / 1500
    assert points["TP8 lmcache 8"]["ttft_p90_s"] == ("better", -20.0)  # 0.8 / 1.0: the first token 20 % sooner
    assert points["TP8 lmcache 8"]["point"] == "better"
    assert points["DEP8 none 8"]["tput_per_gpu"] == ("worse", -10.0)  # 2700 / 3000
    assert points["DEP8 none 8"]["point"] == "worse"
    assert [d.split()[3:] for d in comparison["only_current"]] == [["TP8", "lmcache", "conc", "16"]]
    assert comparison["only_baseline"] == []


def test_each_metric_is_judged_in_its_own_direction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Four points, each with one metric moved 25 % one way; every other metric unchanged.
    old: Points = {"a": (4, "none", False, 1000.0, 1.0), "b": (8, "none", False, 1000.0, 1.0),
                   "c": (16, "none", False, 1000.0, 1.0), "d": (32, "none", False, 1000.0, 1.0)}  # fmt: skip
    new: Points = {"a": (4, "none", False, 1250.0, 1.0), "b": (8, "none", False, 800.0, 1.0),
                   "c": (16, "none", False, 1000.0, 1.25), "d": (32, "none", False, 1000.0, 0.8)}  # fmt: skip
    points = _by_point(_compare(tmp_path, old, new, capsys))
    assert points["TP8 none 4"]["tput_per_gpu"] == ("better", 25.0)  # more tokens per GPU: better
    assert points["TP8 none 8"]["tput_per_gpu"] == ("worse", -20.0)  # fewer: worse
    assert points["TP8 none 16"]["ttft_p90_s"] == ("worse", 25.0)  # a later first token: worse
    assert points["TP8 none 16"]["ttft_p50_s"] == ("worse", 25.0)  # the synthetic p50 is p90 / 1.25: it moves too
    assert points["TP8 none 32"]["ttft_p90_s"] == ("better", -20.0)  # a sooner one: better
    assert [points[f"TP8 none {c}"]["point"] for c in (4, 8, 16, 32)] == ["better", "worse", "worse", "better"]
