"""`slurmx recipes check` as a user runs it, on a copy of an InferenceX tree: unchanged it exits 0; one
flag edited in the upstream script, or one salloc option in its launcher, it names that on every point and
exits 1; a launcher that stops before its container srun is one stderr line naming it and the step, exit 2;
a bad declared table is one located line, exit 2."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmx.errors import ConfigError
from slurmx.upstream.declared import load_declared
from tests.conftest import FIXTURES
from tests.test_cli_as_users_run_it import slurmx

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
SCRIPT = Path("benchmarks/single_node/agentic/kimik3_fp4_b300_vllm_mtp.sh")
LAUNCHER = Path("runners/launch_b300-nv.sh")
NEEDED = (
    Path("configs/nvidia-master.yaml"), Path("configs/amd-master.yaml"), Path("configs/runners.yaml"),
    LAUNCHER, Path("benchmarks/benchmark_lib.sh"), SCRIPT,
)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    source = FIXTURES / "repo-kimik3-b300-lmcache"
    if not source.exists():
        pytest.skip(f"InferenceX checkout not found at {source}")
    return copy_tree_files(source, NEEDED, tmp_path / "inferencex")


def copy_tree_files(source: Path, names: Sequence[Path], copy: Path) -> Path:
    """The named files of an InferenceX tree, at their paths under `copy`."""
    for name in names:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, copy / name)
    return copy


def test_check_of_an_unchanged_tree_exits_0_with_a_summary(tree: Path, tmp_path: Path) -> None:
    proc = slurmx(["recipes", "check", "--inferencex", str(tree), KEY], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("recipes check: 1 keys, 4 points, ")
    assert "declared rows used" in proc.stdout


@pytest.mark.parametrize(
    ("edited", "old", "new", "named"),
    [
        # one flag of the agentic script
        (SCRIPT, "--gpu-memory-utilization 0.90", "--gpu-memory-utilization 0.85",
         "undeclared: engine --gpu-memory-utilization: upstream '0.85', slurmx '0.9'"),
        # one salloc option of the launcher's single-node branch
        (LAUNCHER, "--exclusive --mem=0 --time=", "--exclusive --mem=512G --time=",
         "undeclared: launcher slurm --mem: upstream '512G', slurmx '0'"),
    ],
)  # fmt: skip
def test_check_names_one_edited_upstream_item_and_exits_1(
    tree: Path, tmp_path: Path, edited: Path, old: str, new: str, named: str
) -> None:
    text = (tree / edited).read_text()
    assert text.count(old) == 1
    (tree / edited).write_text(text.replace(old, new))
    proc = slurmx(["recipes", "check", "--inferencex", str(tree), KEY], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, lines  # one per point, nothing else
    for line in lines:
        assert line.startswith(f"{KEY} kimik3_tp8_conc") and line.endswith(named), line


def test_a_launcher_that_stops_before_its_container_srun_is_named_with_its_step(tree: Path, tmp_path: Path) -> None:
    launcher = tree / LAUNCHER
    text = launcher.read_text()
    salloc = "    salloc --partition=$SLURM_PARTITION --account=$SLURM_ACCOUNT -N 1 "
    assert text.count(salloc) == 1
    launcher.write_text(text.replace(salloc, '    echo "no allocation today"; exit 3\n' + salloc))
    proc = slurmx(["recipes", "check", "--inferencex", str(tree), KEY], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "launcher level not compared" in line]
    assert notes == [
        f"slurmx: recipes check: {KEY}: launcher level not compared: launch_b300-nv.sh: exited 3 before a container "
        "srun; last step: + exit 3"
    ], proc.stderr
    assert proc.stdout.startswith("recipes check: 1 keys, 4 points, "), proc.stdout  # the scripts still compared


def test_a_bad_declared_row_is_one_located_line(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text(
        "differences:\n- processes: [engine]\n  item: --x\n  upstream: null\n  slurmx: '1'\n  kind: odd\n  why: y\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_declared(table)
    assert str(raised.value).startswith(f"{table}:6: kind: 'odd' not in")


MULTINODE_KEY = "kimik3-fp4-h200-vllm-agentic"
SRT = Path("benchmarks/multi_node/srt-slurm-recipes/vllm/kimi-k3/agentic")
BALANCED = SRT / "agg-h200-tp8dp4ep32-balanced-agentic.yaml"


@pytest.fixture
def main_tree(tmp_path: Path) -> Path:
    """The files of InferenceX's main that the aggregated H200 key's check reads: its masters, the srt-slurm
    recipes its rows name, the replay script srtctl runs and its lib."""
    source = FIXTURES / "repo-main"
    needed = [*NEEDED[:3], Path("benchmarks/benchmark_lib.sh"), Path("benchmarks/multi_node/agentic_srt.sh")]
    needed += [SRT / p.name for p in (source / SRT).glob("agg-h200-*.yaml")]
    return copy_tree_files(source, needed, tmp_path / "inferencex")


def test_an_edited_srt_slurm_recipe_is_named_on_exactly_its_points(main_tree: Path, tmp_path: Path) -> None:
    # the drift gate for a multinode key: its srt-slurm recipe is the upstream side, flag by flag
    proc = slurmx(["recipes", "check", "--inferencex", str(main_tree), MULTINODE_KEY], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("recipes check: 1 keys, 35 points, ")
    text = (main_tree / BALANCED).read_text()
    assert text.count("moe-backend: marlin") == 1
    (main_tree / BALANCED).write_text(text.replace("moe-backend: marlin", "moe-backend: triton"))
    proc = slurmx(["recipes", "check", "--inferencex", str(main_tree), MULTINODE_KEY], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 12, lines  # the balanced row's 12 concurrencies, not the latency or vllm-simple rows
    for line in lines:
        assert line.startswith(f"{MULTINODE_KEY} kimik3_p4x8ep32dpa_d0x8ep32dpa_conc"), line
        assert "kvdram" not in line and line.endswith(
            "undeclared: engine --moe-backend: upstream 'triton', slurmx 'marlin'"
        ), line


def test_srt_slurm_renders_a_vllm_config_as_srtctl_does() -> None:
    from slurmx.upstream.srt import srt_argv

    config = {"max_num_seqs": 8, "enforce-eager": True, "no-async-scheduling": False, "x": None, "ids": [1, 2]}
    assert srt_argv(config) == ["--enforce-eager", "--ids", "1", "2", "--max-num-seqs", "8"]


def test_a_key_its_tree_has_no_script_for_is_named_and_left_out_of_the_default_set(tmp_path: Path) -> None:
    """InferenceX main lists qwen3.5-fp8-h100-sglang-agentic but holds no qwen3.5_fp8_h100.sh (its recipe came from
    repo-lmcache-agentix): `check` of main's default set compares its sibling -mtp key, names the scriptless one on
    stderr and exits 0; named on the command line, the missing script is a one-line error, exit 2."""
    from slurmx import paths

    source = FIXTURES / "repo-main"
    if not source.exists():
        pytest.skip(f"InferenceX checkout not found at {source}")
    jobs = tmp_path / "jobs"
    (jobs / "differences").mkdir(parents=True)
    for stem in ("qwen3.5_fp8_h100_sglang", "qwen3.5_fp8_h100_sglang_mtp"):
        shutil.copy(paths.jobs_dir() / f"{stem}.yaml", jobs)
        shutil.copy(paths.jobs_dir() / "differences" / f"{stem}.yaml", jobs / "differences")
    proc = slurmx(["recipes", "check", "--inferencex", str(source), "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("recipes check: 1 keys, 9 points,"), proc.stdout
    assert "qwen3.5-fp8-h100-sglang-agentic: not compared: no agentic script for it in" in proc.stderr
    named = ["recipes", "check", "--inferencex", str(source), "qwen3.5-fp8-h100-sglang-agentic", "--jobs", str(jobs)]
    proc = slurmx(named, cwd=tmp_path)
    assert proc.returncode == 2 and "no agentic script" in proc.stderr and "qwen3.5_fp8_h100.sh" in proc.stderr
