"""The Slurm request as sbatch receives it, without a cluster: --max-parallel becomes the array's throttle, and a
profile with `exclusive: false` (as InferenceX's MI300X/MI325X launchers ask none) asks for no --exclusive."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmx.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "configs" / "clusters.yaml"
KIMI = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"  # 4 points on cluster:b300-nv (exclusive: true)
DSV4 = "dsv4-fp4-b200-vllm-agentic-lmcache"  # 10 points on cluster:b200-dgxc


def dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, *extra: str, clusters: Path = CLUSTERS
) -> str:
    configs = [a for c in sorted((ROOT / "configs").glob("*master*.yaml")) for a in ("--config", str(c))]
    capsys.readouterr()
    code = main(["submit", key, "--dry-run", "--results", str(tmp_path / "results"), *configs,
                 "--clusters", str(clusters), *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def arrays(script: str) -> list[str]:
    return re.findall(r"^#SBATCH --array=(\S+)$", script, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("key", "max_parallel", "expected"),
    [
        (KIMI, None, "0-3%4"),  # the profile's 64 (clusters.py's default), capped by submitit at the 4 tasks
        (KIMI, "2", "0-3%2"),
        (KIMI, "1", "0-3%1"),  # one point at a time
        (DSV4, "3", "0-9%3"),
    ],
)
def test_max_parallel_is_the_arrays_throttle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, max_parallel: str | None, expected: str
) -> None:
    extra = ("--max-parallel", max_parallel) if max_parallel else ()
    assert arrays(dry_run(tmp_path, capsys, key, *extra)) == [expected]


def test_a_profile_that_is_not_exclusive_asks_for_no_exclusive_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "#SBATCH --exclusive" in dry_run(tmp_path, capsys, KIMI)
    # the same B300 profile with exclusive turned off: everything else of its request stays
    text = CLUSTERS.read_text()
    turned = text.replace("      exclusive: true  # launch_b300-nv.sh:486 (--exclusive)", "      exclusive: false", 1)
    assert turned != text
    (tmp_path / "clusters.yaml").write_text(turned)
    script = dry_run(tmp_path, capsys, KIMI, clusters=tmp_path / "clusters.yaml")
    assert "--exclusive" not in script
    assert "#SBATCH --mem=0" in script and "#SBATCH --gres=gpu:8" in script and arrays(script) == ["0-3%4"]
