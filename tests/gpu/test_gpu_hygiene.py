"""Preflight's node hygiene: the GPU states an H200 showed with a foreign process holding memory
(scripts/gpu/h200_proof.py), and real /dev/shm segments planted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.node import gpu_hygiene, preflight
from slurmx.node.gpu_hygiene import GpuProcess, GpuState

H200 = Path(__file__).resolve().parents[1] / "data" / "gpu" / "h200"
SUMMARY = json.loads((H200 / "proof_summary.json").read_text())


def h200_dirty_states() -> list[GpuState]:
    return [
        GpuState(**{**s, "processes": [GpuProcess(**p) for p in s["processes"]]}) for s in SUMMARY["gpu_states_dirty"]
    ]


def test_the_h200_run_refused_the_held_gpu_and_passed_the_clean_one() -> None:
    assert SUMMARY["hygiene_clean"]["problems"] == [] and SUMMARY["hygiene_after"]["problems"] == []
    assert "holds memory of a foreign process" in SUMMARY["hygiene_dirty"]["failure"]
    assert SUMMARY["holder_said"] == "holding 4096 MiB"


def test_foreign_gpu_memory_fails_the_point_with_the_node_name() -> None:
    findings = gpu_hygiene.node_hygiene(
        {"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, gpus=h200_dirty_states(), own_pids={os.getpid()}
    )
    failure = findings.failure("gpu-node-07")
    assert failure is not None and failure.startswith("node gpu-node-07 is not clean: GPU 0 (GPU-cdfacf4c")
    assert "pid 685 (4614 MiB)" in failure


def test_our_own_process_on_the_gpu_is_not_dirt() -> None:
    states = h200_dirty_states()
    assert gpu_hygiene.check_gpu_memory(states, own_pids={685}).problems == []


def test_memory_in_use_with_no_visible_process_fails() -> None:
    state = GpuState("0", "GPU-x", memory_used_mib=40_000, processes=[])
    assert "40000 MiB in use by no visible process" in gpu_hygiene.check_gpu_memory([state], set()).problems[0]
    idle = GpuState("0", "GPU-x", memory_used_mib=600, processes=[])  # the idle H200 showed 615 MiB
    assert gpu_hygiene.check_gpu_memory([idle], set()).problems == []


def test_ecc_errors_are_reported_and_a_failed_remap_fails() -> None:
    state = GpuState("3", "GPU-y", 0, [], ecc_uncorrected_volatile=2, retired_pages_pending=True, remapping_failed=True)
    findings = gpu_hygiene.check_ecc([state])
    assert findings.notes == [
        "GPU 3: 2 uncorrected ECC errors since boot",
        "GPU 3: retired pages pending (needs a GPU reset)",
    ]
    assert findings.problems == ["GPU 3: row remapping failed (the GPU needs service)"]
    clean = h200_dirty_states()[0]  # the H200: ECC enabled, 0 uncorrected, no remap failure
    assert gpu_hygiene.check_ecc([clean]).problems == [] and gpu_hygiene.check_ecc([clean]).notes == []


def test_gpus_must_be_the_ones_slurm_granted() -> None:
    states = h200_dirty_states()
    env = {"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0"}
    assert "Slurm granted 2 (0,1), CUDA_VISIBLE_DEVICES shows 1" in gpu_hygiene.check_grant(env, states).problems[0]
    env = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "GPU-cdfacf4c"}
    assert gpu_hygiene.check_grant(env, states).problems == []
    env = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "GPU-00000000"}
    assert "which the driver does not show" in gpu_hygiene.check_grant(env, states).problems[0]


@pytest.fixture
def planted() -> Iterator[Path]:
    # outside the default lmcache* pattern: a stack job on the local cluster may run beside this test
    path = Path("/dev/shm") / f"slurmxtest_pool_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"\0" * 4096)
    yield path
    path.unlink(missing_ok=True)


def test_planted_dev_shm_leftover_fails_the_point_unless_the_profile_allows_removing_it(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_hygiene, "LMCACHE_SHM_PATTERNS", (planted.name,))  # never touch others' segments
    failure = preflight.check_node_clean({"SLURMD_NODENAME": "node03"}, remove_shm=False)
    assert failure == (
        f"node node03 is not clean: /dev/shm: leftover {planted.name} (0 MiB) of an earlier LMCache server "
        "(the profile does not allow removing it)"
    )
    assert planted.exists()
    assert preflight.check_node_clean({"SLURMD_NODENAME": "node03"}, remove_shm=True) is None
    assert not planted.exists()


def test_a_segment_a_live_process_holds_is_not_a_leftover(planted: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"f = open({str(planted)!r}, 'rb'); print('open', flush=True); import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        assert gpu_hygiene.find_shm_leftovers(patterns=(planted.name,)) == []
    finally:
        holder.kill()
        holder.wait()  # reaped: gone from /proc, its open file with it
    assert gpu_hygiene.find_shm_leftovers(patterns=(planted.name,)) == [planted]


def test_the_default_pattern_matches_lmcaches_pool_segment(tmp_path: Path) -> None:
    (tmp_path / "lmcache_l1_pool_3f2a").write_bytes(b"x")
    (tmp_path / "psm_other_job").write_bytes(b"x")
    assert [p.name for p in gpu_hygiene.find_shm_leftovers(tmp_path)] == ["lmcache_l1_pool_3f2a"]


def test_a_node_without_gpus_skips_the_gpu_checks_and_passes(tmp_path: Path, no_nvml: None) -> None:
    findings = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, shm_dir=tmp_path)
    assert findings.problems == []
    assert findings.notes and findings.notes[0].startswith("GPU checks skipped: NVML not usable")
