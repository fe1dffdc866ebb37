"""GPU hygiene reading NVML in this process, through a stand-in `pynvml` that answers as the H200s did while
a foreign process held 4 GiB (tests/helpers/h200_nvml.py); what it reads must be the state scripts/gpu/
h200_proof.py recorded there. And /dev/shm leftovers in a real directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from slurmx.node import gpu_hygiene, gpus
from slurmx.node.gpu_hygiene import GpuProcess, GpuState
from tests.helpers.h200_nvml import MIB, H200Nvml, NVMLError, Process, dirty_state, h200_dirty

RERUN_UUID = "GPU-81bc2e63-2271-5f9a-6089-d6ac676cfbe6"


def use_nvml(monkeypatch: pytest.MonkeyPatch, nv: H200Nvml) -> H200Nvml:
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def recorded(run: str) -> GpuState:
    state = dirty_state(run)
    return GpuState(**{**state, "processes": [GpuProcess(**p) for p in state["processes"]]})


@pytest.mark.parametrize("run", ["h200", "h200-rerun"])
def test_nvml_reads_the_state_the_h200_recorded(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_dirty(run)], uuid_bytes=run == "h200"))
    assert gpu_hygiene.read_gpus_nvml({"CUDA_VISIBLE_DEVICES": "0"}) == ([recorded(run)], None)
    assert nv.initialised == 1 and nv.shutdowns == 1


def test_only_the_granted_gpus_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_dirty("h200"), h200_dirty("h200-rerun")]))
    (state,), why = gpu_hygiene.read_gpus_nvml({"CUDA_VISIBLE_DEVICES": RERUN_UUID[:12]})
    assert why is None and state == GpuState(**{**recorded("h200-rerun").__dict__, "index": "1"})
    every, _ = gpu_hygiene.read_gpus_nvml({})  # no CUDA_VISIBLE_DEVICES: every GPU
    assert [(s.index, s.uuid) for s in every or []] == [("0", recorded("h200").uuid), ("1", RERUN_UUID)]


def test_graphics_processes_and_unknown_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200_dirty("h200")
    gpu.graphics = [Process(4242, None), Process(4243, 512 * MIB)]  # a container hides usedGpuMemory: None
    gpu.remapped_rows = (0, 1, 0, 1)  # failure occurred
    gpu.retired_pages_pending = True
    gpu.ecc_uncorrected_volatile = 7
    use_nvml(monkeypatch, H200Nvml([gpu]))
    (state,), _ = gpu_hygiene.read_gpus_nvml({"CUDA_VISIBLE_DEVICES": "0"})
    assert state.processes == [GpuProcess(685, 4614.0), GpuProcess(4242, None), GpuProcess(4243, 512.0)]
    assert (state.ecc_uncorrected_volatile, state.retired_pages_pending, state.remapping_failed) == (7, True, True)


def test_fields_nvml_cannot_read_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unsupported(H200Nvml):
        def nvmlDeviceGetMemoryInfo(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            raise NVMLError(3)

        def nvmlDeviceGetComputeRunningProcesses(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            raise NVMLError(3)

        def nvmlDeviceGetRemappedRows(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            return (0, 0, 0)  # a short answer: no failure flag to read

        def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):  # type: ignore[no-untyped-def]  # noqa: N802
            raise NVMLError(3)

    gpu = h200_dirty("h200")
    gpu.retired_pages_pending = False
    use_nvml(monkeypatch, Unsupported([gpu]))
    (state,), _ = gpu_hygiene.read_gpus_nvml({})
    assert state == GpuState("0", gpu.uuid, 0.0, [], None, False, None)


def test_without_a_driver_the_reason_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=NVMLError("Driver Not Loaded")))
    assert gpu_hygiene.read_gpus_nvml({}) == (None, "NVML not usable: NVMLError: Driver Not Loaded")
    findings = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, shm_dir=tmp_path)
    assert findings.notes == ["GPU checks skipped: NVML not usable: NVMLError: Driver Not Loaded"]
    assert findings.problems == []


def test_node_hygiene_reads_nvml_and_refuses_the_held_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_dirty("h200")]))
    findings = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, shm_dir=tmp_path)
    # what the H200 run reported (proof_summary.json, hygiene_dirty)
    assert findings.problems == [
        "GPU 0 (GPU-cdfacf4c-e42f-3aaf-e387-787cc88052a2) holds memory of a foreign process: pid 685 (4614 MiB)"
    ]
    assert findings.failure("vm") == "node vm is not clean: " + findings.problems[0]
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-09")
    assert (findings.failure() or "").startswith("node gpu-node-09 is not clean: GPU 0")


def test_the_jobs_own_processes_are_not_dirt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu = h200_dirty("h200")
    gpu.compute = [Process(os.getpid(), 4614 * MIB), Process(os.getppid(), None)]  # this process and its parent
    use_nvml(monkeypatch, H200Nvml([gpu]))
    findings = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, shm_dir=tmp_path)
    assert findings.problems == [] and findings.notes == []
    assert findings.failure("vm") is None


def test_a_profiles_absent_reason_skips_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_dirty("h200")]))
    findings = gpu_hygiene.node_hygiene(
        {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "0,1"}, remove_shm=False, shm_dir=tmp_path, gpus_absent="MI355X"
    )
    assert findings.notes == ["GPU checks skipped: MI355X"] and nv.initialised == 0
    assert findings.problems == ["GPUs: Slurm granted 2 (0,1), CUDA_VISIBLE_DEVICES shows 1 (0)"]


def test_a_remap_failure_and_ecc_reach_the_findings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu = h200_dirty("h200")
    gpu.compute = []
    gpu.memory_used = 615 * MIB  # idle
    gpu.remapped_rows = (0, 0, 0, 1)
    gpu.ecc_uncorrected_volatile = 3
    use_nvml(monkeypatch, H200Nvml([gpu]))
    findings = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0"}, remove_shm=False, shm_dir=tmp_path)
    assert findings.problems == ["GPU 0: row remapping failed (the GPU needs service)"]
    assert findings.notes == ["GPU 0: 3 uncorrected ECC errors since boot"]


def test_the_step_grant_wins_over_the_jobs() -> None:
    assert gpus.granted({"SLURM_STEP_GPUS": "2, 3", "SLURM_JOB_GPUS": "0,1,2,3"}) == ["2", "3"]
    assert gpus.granted({"SLURM_STEP_GPUS": "", "SLURM_JOB_GPUS": "0,1"}) == ["0", "1"]
    assert gpus.granted({}) is None


def test_a_leftover_that_cannot_be_removed_does_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "lmcache_a").mkdir()  # unlink() of a directory fails (EISDIR)
    (tmp_path / "lmcache_b").write_bytes(b"\0" * (3 * MIB))
    findings = gpu_hygiene.check_shm(True, tmp_path)
    assert findings.problems == [
        f"/dev/shm: could not remove leftover lmcache_a (0 MiB): [Errno 21] Is a directory: '{tmp_path / 'lmcache_a'}'"
    ]
    assert findings.removed == [str(tmp_path / "lmcache_b")]
    assert findings.notes == ["/dev/shm: removed leftover lmcache_b (3 MiB)"]
    assert not (tmp_path / "lmcache_b").exists()


def test_a_leftovers_size_is_shown_in_mib(tmp_path: Path) -> None:
    (tmp_path / "lmcache_l1_pool_1").write_bytes(b"\0" * (5 * MIB + MIB // 2 + 1))  # 5.5 MiB and a byte: 6
    assert gpu_hygiene.check_shm(False, tmp_path).problems == [
        "/dev/shm: leftover lmcache_l1_pool_1 (6 MiB) of an earlier LMCache server "
        "(the profile does not allow removing it)"
    ]
    assert gpu_hygiene.find_shm_leftovers(tmp_path / "absent") == []


def test_paths_in_use_reads_maps_and_open_files(tmp_path: Path) -> None:
    held = tmp_path / "held"
    with held.open("w"):
        used = gpu_hygiene.paths_in_use()
    assert str(held) in used
    assert any(p.endswith(".so") or ".so." in p for p in used)  # mapped libraries, from /proc/*/maps


def test_idle_memory_up_to_the_bound_is_not_dirt() -> None:
    at_bound = GpuState("0", "GPU-x", memory_used_mib=1024, processes=[])  # IDLE_MEMORY_MIB: not more than it
    assert gpu_hygiene.check_gpu_memory([at_bound], set()).problems == []
    over = GpuState("0", "GPU-x", memory_used_mib=1025, processes=[])
    assert gpu_hygiene.check_gpu_memory([over], set()).problems == [
        "GPU 0 (GPU-x) has 1025 MiB in use by no visible process"
    ]


def test_several_problems_make_one_line() -> None:
    findings = gpu_hygiene.Findings(problems=["GPU 0: a", "GPU 1: b"])
    assert findings.failure("node09") == "node node09 is not clean: GPU 0: a; GPU 1: b"
    assert gpu_hygiene.Findings(notes=["only a note"]).failure("node09") is None


def test_gpus_are_selected_in_the_order_named_and_mig_uuids_by_prefix() -> None:
    ids = [("0", "GPU-cdfacf4c-e42f"), ("1", "MIG-4f1b2c3d-0000"), ("2", "GPU-81bc2e63-2271")]
    assert gpus.select(ids, ["2", "0"]) == [ids[2], ids[0]]
    assert gpus.select(ids, ["MIG-4f1b"]) == [ids[1]]
    assert gpus.select(ids, ["mig-4f1b", "4f1b", "GPU-"]) == [ids[0]]  # only "GPU-"/"MIG-" prefixes, once each
    assert gpus.select(ids, None) == ids and gpus.select(ids, []) == []
    assert gpus.visible({"CUDA_VISIBLE_DEVICES": " 1, ,GPU-81bc "}) == ["1", "GPU-81bc"]
    assert gpus.visible_indices({"CUDA_VISIBLE_DEVICES": "3,GPU-81bc,12"}) == ["3", "12"]
    assert gpus.visible_count({}) == 0 and gpus.visible({}) is None


def test_closing_nvml_after_the_driver_went_away_raises_nothing() -> None:
    class Gone(H200Nvml):
        def nvmlShutdown(self) -> None:  # noqa: N802
            raise NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    gpus.close_nvml(Gone([]))  # nothing raised


def test_every_finding_is_kept_when_findings_are_joined() -> None:
    joined = gpu_hygiene.Findings(["p1"], ["n1"], ["r1"])
    joined.extend(gpu_hygiene.Findings(["p2"], ["n2"], ["r2"]))
    assert (joined.problems, joined.notes, joined.removed) == (["p1", "p2"], ["n1", "n2"], ["r1", "r2"])


def test_gpus_nvml_does_not_show_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_dirty("h200")]))
    env = {"CUDA_VISIBLE_DEVICES": "GPU-00000000,5"}
    findings = gpu_hygiene.node_hygiene(env, remove_shm=False, shm_dir=tmp_path)
    assert findings.problems == ["GPUs: CUDA_VISIBLE_DEVICES names GPU-00000000,5, which the driver does not show"]


def test_every_foreign_process_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu = h200_dirty("h200")
    gpu.graphics = [Process(4242, None)]  # its memory unknown: named without a size
    use_nvml(monkeypatch, H200Nvml([gpu]))
    findings = gpu_hygiene.node_hygiene({}, remove_shm=False, shm_dir=tmp_path, own_pids={1})
    assert findings.problems == [
        "GPU 0 (GPU-cdfacf4c-e42f-3aaf-e387-787cc88052a2) holds memory of a foreign process: pid 685 (4614 MiB), pid 4242"
    ]
    mine = gpu_hygiene.node_hygiene({}, remove_shm=False, shm_dir=tmp_path, own_pids={685, 4242})
    assert mine.problems == []  # the pids given are the job's own


def test_a_leftover_that_is_a_dangling_link_has_no_size(tmp_path: Path) -> None:
    (tmp_path / "lmcache_l1_pool_9").symlink_to(tmp_path / "gone")
    assert gpu_hygiene.check_shm(False, tmp_path).problems == [
        "/dev/shm: leftover lmcache_l1_pool_9 (0 MiB) of an earlier LMCache server (the profile does not allow removing it)"
    ]


def test_a_deleted_file_still_mapped_is_in_use_by_its_name(tmp_path: Path) -> None:
    import mmap

    path = tmp_path / "pool segment"  # a space in the name: the maps line's path is its sixth field, whole
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), mmap.PAGESIZE) as mapped:
        f.close()
        path.unlink()  # maps now shows "<path> (deleted)"
        used = gpu_hygiene.paths_in_use()
        assert mapped[0] == 0
    assert str(path) in used
