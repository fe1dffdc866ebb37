"""`collect --compare` over two synthetic trees: one point improved, one regressed, one unchanged, and points
on one side only; the baseline given as a results directory, a sweep id and InferenceX aggregate files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
NOISE = (0.99, 1.0, 1.01)  # +-1 % run to run


def _sweep(root: Path, sweep_id: str, points: dict[str, tuple[int, str, float]], repeats: int = 3) -> Path:
    """points: point id -> (conc, arm, throughput per GPU); TTFT p90 fixed at 1 s, each repeat +-1 %."""
    sweep = write_sweep(root, KEY, sweep_id, [])
    for point_id, (conc, arm, tput) in points.items():
        for repeat in range(1, repeats + 1):
            wiggle = NOISE[(repeat - 1) % 3]
            r = make_result(point_id=point_id, config_key=KEY, sweep_id=sweep_id, conc=conc, arm=arm,
                            tput_per_gpu=tput * wiggle, ttft_p90_s=1.0 * wiggle)  # fmt: skip
            assert r.slurmx is not None
            r.slurmx.repeat, r.slurmx.repeats, r.slurmx.repeat_mode = repeat, repeats, "separate-tasks"
            write_result(SweepDir(sweep).point(point_id, repeat).result_json, r)
    return sweep


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    _sweep(old, "s-old", {"a4": (4, "none", 1000.0), "a8": (8, "none", 2000.0), "a16": (16, "none", 3000.0),
                          "gone32": (32, "none", 4000.0)})  # fmt: skip
    # conc 4 improved by 20 %, conc 8 regressed by 10 %, conc 16 unchanged (different point ids: ids do not matter)
    _sweep(new, "s-new", {"b4": (4, "none", 1200.0), "b8": (8, "none", 1800.0), "b16": (16, "none", 3000.0),
                          "fresh64": (64, "none", 5000.0)})  # fmt: skip
    return old, new


def _collect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main(["collect", "--no-plots", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {}, err


def _verdicts(data: dict[str, Any]) -> dict[int, dict[str, str]]:
    out = {}
    for p in data["comparison"]["points"]:
        conc = int(p["point"].rsplit(" ", 1)[1])
        out[conc] = {"point": p["verdict"], **{c["metric"]: c["verdict"] for c in p["changes"]}}
    return out


def test_compare_gives_each_point_its_verdict_and_lists_one_sided_points(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = trees
    code, data, err = _collect(capsys, "--results", str(new), "--compare", str(old))
    assert code == 0, err
    verdicts = _verdicts(data)
    assert verdicts[4]["point"] == "better" and verdicts[4]["tput_per_gpu"] == "better"
    assert verdicts[8]["point"] == "worse" and verdicts[8]["tput_per_gpu"] == "worse"
    assert verdicts[16]["point"] == "within noise" and verdicts[16]["tput_per_gpu"] == "within noise"
    assert verdicts[16]["ttft_p90_s"] == "within noise"
    comparison = data["comparison"]
    assert [d.endswith("conc 64") for d in comparison["only_current"]] == [True]
    assert [d.endswith("conc 32") for d in comparison["only_baseline"]] == [True]
    assert "3 matched point(s): 1 better, 1 worse, 1 within noise" in comparison["summary"]
    change = next(c for p in comparison["points"] if p["point"].endswith("conc 8") for c in p["changes"]
                  if c["metric"] == "tput_per_gpu")  # fmt: skip
    assert change["change_pct"] == pytest.approx(-10.0)


def test_fail_on_regression_exits_1_only_beyond_the_threshold(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = trees
    code, data, _ = _collect(capsys, "--results", str(new), "--compare", str(old), "--fail-on-regression", "5%")
    assert code == 1
    assert data["comparison"]["regressions"] == [f"kimik3 fp4 b300 TP8 none conc 8: tok/s/GPU {-10.0:+.1f}%"]
    code, _, _ = _collect(capsys, "--results", str(new), "--compare", str(old), "--fail-on-regression", "15")
    assert code == 0


def test_an_earlier_sweep_of_the_same_tree_is_a_baseline_and_not_part_of_the_run(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = trees
    _sweep(new, "s-old", {"a4": (4, "none", 1000.0), "a8": (8, "none", 2000.0), "a16": (16, "none", 3000.0)})
    code, data, err = _collect(capsys, "--results", str(new), "--compare", "s-old", "--fail-on-regression", "5%")
    assert code == 1, err
    assert {p["verdict"] for p in data["comparison"]["points"]} == {"better", "worse", "within noise"}
    assert [s["sweep_id"] for s in data["sweeps"]] == ["s-new"]


def test_inferencex_aggregate_files_are_a_baseline(
    trees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = trees
    code, _, _ = _collect(capsys, "--results", str(old), "--format", "inferencex", "--no-report")
    assert code == 0
    agg = old / KEY / "s-old" / f"agg_{KEY}.json"
    entries = json.loads(agg.read_text())
    assert len(entries) == 12 and all("slurmx" not in e for e in entries)  # InferenceX's own schema
    one_each = tmp_path / "agg_once.json"  # InferenceX ran each point once
    one_each.write_text(json.dumps([e for e in entries if e["request_metrics"]["throughput"]["per_gpu"]["total_tput_tps"]
                                    in (1000.0, 2000.0, 3000.0, 4000.0)]))  # fmt: skip
    code, data, err = _collect(capsys, "--results", str(new), "--compare", str(one_each), "--fail-on-regression", "5%")
    assert code == 1, err
    verdicts = _verdicts(data)
    assert verdicts[4]["tput_per_gpu"] == "better" and verdicts[8]["tput_per_gpu"] == "worse"
    assert verdicts[16]["tput_per_gpu"] == "within noise"
    assert len(data["comparison"]["only_baseline"]) == 1
    # all three repeats of each point, as a list of files, count as repeats of one point
    code, data, _ = _collect(capsys, "--results", str(new), "--compare", str(agg))
    assert code == 0 and len(data["comparison"]["points"]) == 3
    first = data["comparison"]["points"][0]["changes"][0]
    assert first["baseline"]["n"] == 3


def test_bad_baselines_and_thresholds_are_one_line_errors(
    trees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = trees
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"hw": "b300"}]))
    for argv, needle in (
        (["--compare", "no-such-sweep"], "no sweep, results directory or file named no-such-sweep"),
        (["--compare", str(bad)], "bad.json: entry 0: not an InferenceX aggregate"),
        (["--compare", str(old), "--fail-on-regression", "lots"], "--fail-on-regression 'lots'"),
        (["--fail-on-regression", "5%"], "--fail-on-regression needs --compare"),
    ):
        capsys.readouterr()
        assert main(["collect", "--no-plots", "--results", str(new), *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
