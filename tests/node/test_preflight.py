"""Preflight refuses a point before any server starts, with one line saying what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

from slurmx.backends import BackendSpec
from slurmx.backends.lmcache import LMCacheSpec, check_shm
from slurmx.backends.none import NoneSpec
from slurmx.node.gpus import visible_count
from slurmx.node.preflight import GB, check_gpus, check_memory, check_tools
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.venv import VenvRuntime


def _spec(backend: BackendSpec, model: str = "tiny-llama", gpus: int = 1) -> ServingSpec:
    return ServingSpec(
        recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model=model,
        served_model_name="m", engine_flags=[], env={"PYTHONHASHSEED": "0"}, block_size=128, health_path="/health",
        startup_timeout_s=10, gpus=gpus, backend=backend, replay=Replay(kind="synthetic"), conc=2, duration_s=60,
    )  # fmt: skip


def _lmcache(l1_size_gb: int, server_flags: list[str] | None = None) -> LMCacheSpec:
    return LMCacheSpec(name="lmcache", l1_size_gb=l1_size_gb, l1_fraction=1.0, chunk_size=256,
                       transfer_mode="engine_driven", server_flags=server_flags or [])  # fmt: skip


def _runtime(tmp_path: Path, python: str = sys.executable) -> VenvRuntime:
    return VenvRuntime(engine_python=python, lmcache_bin="lmcache", aiperf_bin=sys.executable, model_root=str(tmp_path))


def test_gpu_count_must_match_what_slurm_gave() -> None:
    spec = _spec(NoneSpec(name="none"), gpus=8)
    assert visible_count({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == 4
    assert check_gpus(spec, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}) is None
    reason = check_gpus(spec, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert reason == "GPUs: the point needs 8, CUDA_VISIBLE_DEVICES shows 4 (0,1,2,3)"
    assert "unset" in (check_gpus(spec, {}) or "")


def test_host_memory_must_hold_the_l1_pool_plus_margin() -> None:
    spec = _spec(_lmcache(1889))
    assert check_memory(spec, 2000 * GB) is None
    reason = check_memory(spec, 1900 * GB)
    assert reason is not None and "1889 GB" in reason and "94 GB margin" in reason
    assert check_memory(_spec(NoneSpec(name="none")), 0) is None


def test_l1_in_shared_memory_must_fit_dev_shm(tmp_path: Path) -> None:
    named = _lmcache(10**6, ["--shm-name", "slurmx"])
    reason = check_shm(named, tmp_path)
    assert reason is not None and reason.startswith("/dev/shm has")
    kept_out = _lmcache(10**6, ["--shm-name", ""])
    assert check_shm(kept_out, tmp_path) is None


def test_missing_model_and_tools_are_named(tmp_path: Path) -> None:
    spec = _spec(NoneSpec(name="none"))
    assert "model" in (check_tools(spec, _runtime(tmp_path)) or "") and "does not exist" in (
        check_tools(spec, _runtime(tmp_path)) or ""
    )
    (tmp_path / "tiny-llama").mkdir()
    assert check_tools(spec, _runtime(tmp_path)) is None
    assert "is not an executable" in (check_tools(spec, _runtime(tmp_path, "/nonexistent/python")) or "")
