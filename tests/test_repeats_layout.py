"""`submit --repeats`: point ids stay, the repeat lives in the member id and the directory, and the arrays
run repeats as separate tasks or back to back on a shared server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.store.tree import PointDir, SweepDir, member_id, parse_member

ROOT = Path(__file__).resolve().parents[1]


def test_repeat_n_lives_under_the_point_and_keeps_its_point_id(tmp_path: Path) -> None:
    sweep = SweepDir(tmp_path / "key" / "s1")
    first, third = sweep.point("0123456789ab"), sweep.point("0123456789ab", 3)
    assert first.path == tmp_path / "key/s1/points/0123456789ab" and first.repeat == 1
    assert third.path == first.path / "repeats" / "3" and third.repeat == 3
    assert third.point_id == "0123456789ab" and third.point_json == first.point_json
    assert third.state_json != first.state_json and third.result_json != first.result_json
    assert member_id("0123456789ab", 1) == "0123456789ab" and parse_member("0123456789ab") == ("0123456789ab", 1)
    assert parse_member(member_id("0123456789ab", 3)) == ("0123456789ab", 3)
    assert sweep.member("0123456789ab.r3") == third and PointDir(third.path).repeat_dir(1) == first


@pytest.mark.parametrize(
    ("key", "points", "tasks", "mode"),
    [
        ("tiny-fp32-local-vllm-agentic-lmcache", 8, 4, "back to back"),  # share-server: one task per arm's server
        ("kimik3-fp4-b300-vllm-agentic-dspark-lmcache", 4, 4 * 3, "separate"),  # a task per point and repeat
    ],
)
def test_repeats_are_tasks_or_back_to_back_runs(
    key: str, points: int, tasks: int, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = [str(p) for p in sorted((ROOT / "configs").glob("*master*.yaml"))]
    argv = ["submit", key, "--dry-run", "--repeats", "3", "--results", str(tmp_path)]
    argv += [a for c in configs for a in ("--config", c)] + ["--clusters", str(ROOT / "configs/clusters.yaml")]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)[0]
    assert len({p["point-id"] for p in report["points"]}) == points and len(report["points"]) == 3 * points
    assert sorted(p["repeat"] for p in report["points"]) == [1] * points + [2] * points + [3] * points
    assert not list(tmp_path.rglob("*.json"))  # a dry run writes no ledger
    assert [a["tasks"] for a in report["arrays"]] == [tasks]
    assert main(argv) == 0
    script = capsys.readouterr().out
    assert re.search(rf"#SBATCH --array=0-{tasks - 1}", script), script[:2000]


def test_repeats_below_one_are_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    assert main(["submit", key, "--dry-run", "--repeats", "0", "--results", str(tmp_path),
                 "--config", str(ROOT / "configs/local-master.yaml"),
                 "--clusters", str(ROOT / "configs/clusters.yaml")]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == "slurmx: error: --repeats 0: must be 1 or more"
