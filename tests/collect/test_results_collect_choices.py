"""Collect's choices on data built so that the wrong choice gives a different answer: which result of
a point wins (end time, not file time; an invalid newer file never displaces a valid older one),
which rows form a ratio group (parallelism and concurrency), which percentile a ratio uses (p90)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from slurmx.results.schema import Result
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def _r(point_id: str, *, sweep: str, **kw: Any) -> Result:
    return make_result(point_id=point_id, config_key=KEY, sweep_id=sweep, **kw)


def _set_mtime(path: Path, mtime: float) -> None:
    os.utime(path, (mtime, mtime))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    s1 = write_sweep(
        root,
        KEY,
        "s1",
        [
            # valid here; a newer run of it in s2 is invalid and must not displace it
            _r("keepvalid", sweep="s1", conc=4, tput_per_gpu=900.0, ended_at=1000.0),
            # ended later than its s2 run, but its file is older: end time decides, not mtime
            _r("endwins", sweep="s1", conc=8, tput_per_gpu=800.0, ended_at=5000.0),
            # two parallelisms at one concurrency: each is its own ratio group
            _r("tp8none16", sweep="s1", conc=16, tput_per_gpu=1000.0, ttft_p90_s=4.0, ttft_p50_s=1.0),
            _r("tp8lmc16", sweep="s1", conc=16, arm="lmcache", tput_per_gpu=1200.0, ttft_p90_s=1.0, ttft_p50_s=0.9),
            _r("dep8lmc16", sweep="s1", conc=16, tp=8, ep=8, dp_attn=True, arm="lmcache", tput_per_gpu=2000.0,
               ttft_p90_s=3.0, ttft_p50_s=2.0),
            _r("dep8moon16", sweep="s1", conc=16, tp=8, ep=8, dp_attn=True, arm="mooncake", tput_per_gpu=3000.0,
               ttft_p90_s=1.5, ttft_p50_s=1.9),
        ],
    )  # fmt: skip
    s2 = write_sweep(
        root,
        KEY,
        "s2",
        [
            _r("keepvalid", sweep="s2", conc=4, tput_per_gpu=100.0, requests=50, errors=50, ended_at=2000.0),
            _r("endwins", sweep="s2", conc=8, tput_per_gpu=700.0, ended_at=4000.0),
        ],
    )
    _set_mtime(s1 / "points" / "endwins" / "result.json", 1_000_000.0)
    _set_mtime(s2 / "points" / "endwins" / "result.json", 2_000_000.0)
    # a result filed under another point's directory (copied by hand, or a bug): not that point's result
    write_result(s1 / "points" / "elsewhere" / "result.json", _r("notelsewhere", sweep="s1", conc=32))
    return root


def _collect(capsys: pytest.CaptureFixture[str], root: Path, *targets: str) -> dict[str, Any]:
    assert main(["collect", "--results", str(root), *targets, "--json", "--no-plots"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _rows(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["point_id"]: r for s in out["sweeps"] for r in s["rows"]}


def _skipped(out: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {str(Path(s["path"]).relative_to(Path(s["path"]).parents[3])): s for s in out["skipped"]}


def test_a_newer_invalid_result_never_displaces_an_older_valid_one(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _collect(capsys, tree)
    row = _rows(out)["keepvalid"]
    assert (row["sweep_id"], row["tput_per_gpu"]) == ("s1", pytest.approx(900.0))
    skipped = _skipped(out)["s2/points/keepvalid/result.json"]
    assert skipped["kind"] == "invalid" and "validity gate" in skipped["reason"]
    assert "s1/points/keepvalid/result.json" not in _skipped(out)


def test_the_later_end_time_wins_whatever_the_file_times_say(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _collect(capsys, tree)
    row = _rows(out)["endwins"]
    assert (row["sweep_id"], row["ended_at"]) == ("s1", 5000.0)
    skipped = _skipped(out)["s2/points/endwins/result.json"]
    assert skipped["kind"] == "superseded" and "/s1/points/endwins/" in skipped["reason"]


def test_a_result_in_another_points_directory_is_skipped_and_named(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _collect(capsys, tree)
    assert "notelsewhere" not in _rows(out) and "elsewhere" not in _rows(out)
    skipped = _skipped(out)["s1/points/elsewhere/result.json"]
    assert skipped["reason"] == "point id notelsewhere in the file does not match its directory"


def test_ratio_groups_are_per_parallelism_and_use_ttft_p90(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(_collect(capsys, tree, f"{KEY}/s1"))
    assert rows["tp8lmc16"]["baseline_arm"] == "none"
    assert rows["tp8lmc16"]["tput_ratio"] == pytest.approx(1.2)
    assert rows["tp8lmc16"]["ttft_p90_ratio"] == pytest.approx(0.25)  # p50 would give 0.9
    # DEP8 at the same concurrency has no no-offload arm: its baseline is its own first arm, not TP8's none
    assert rows["dep8moon16"]["baseline_arm"] == "lmcache"
    assert rows["dep8moon16"]["tput_ratio"] == pytest.approx(1.5)
    assert rows["dep8moon16"]["ttft_p90_ratio"] == pytest.approx(0.5)  # p50 would give 0.95
    assert rows["dep8lmc16"]["tput_ratio"] == pytest.approx(1.0)
    assert (rows["tp8none16"]["ttft_p50_s"], rows["tp8none16"]["ttft_p90_s"]) == (1.0, 4.0)
