"""preflight() as the body calls it: every check in one list, a /dev/shm leftover refused unless the profile
allows removing it, host memory read from a meminfo file, and the bounds of each check."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.backends.base import GB
from slurmx.backends.lmcache import LMCacheSpec
from slurmx.backends.none import NoneSpec
from slurmx.node import gpu_hygiene, preflight
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.runtimes.venv import VenvRuntime


def _spec(gpus: int = 1, backend: object = None) -> ServingSpec:
    return ServingSpec(
        recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model="tiny-llama",
        served_model_name="m", engine_flags=[], env={}, block_size=128, health_path="/health",
        startup_timeout_s=10, gpus=gpus, backend=backend or NoneSpec(name="none"), replay=Replay(kind="synthetic"),
        conc=2, duration_s=60,
    )  # fmt: skip


def _lmcache(l1_size_gb: int) -> LMCacheSpec:
    return LMCacheSpec(name="lmcache", l1_size_gb=l1_size_gb, l1_fraction=1.0, chunk_size=256,
                       transfer_mode="engine_driven", server_flags=["--shm-name", ""])  # fmt: skip


@pytest.fixture
def model_root(tmp_path: Path) -> Path:
    (tmp_path / "tiny-llama").mkdir()
    return tmp_path


@pytest.fixture
def leftover(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # a segment of a name only this test uses: a stack job beside it may own real lmcache* segments
    path = Path("/dev/shm") / f"slurmxpre_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"\0")
    monkeypatch.setattr(gpu_hygiene, "LMCACHE_SHM_PATTERNS", (path.name,))
    yield path
    path.unlink(missing_ok=True)


def venv(root: Path) -> VenvRuntime:
    return VenvRuntime(
        engine_python=sys.executable, lmcache_bin="lmcache", aiperf_bin=sys.executable, model_root=str(root)
    )


def test_a_leftover_fails_the_point_unless_removal_is_asked(
    model_root: Path, leftover: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0", "SLURMD_NODENAME": "node04"}
    problems = preflight.preflight(_spec(), venv(model_root), env, gpus_absent="the profile's reason")
    assert problems == [
        f"node node04 is not clean: /dev/shm: leftover {leftover.name} (0 MiB) of an earlier LMCache server "
        "(the profile does not allow removing it)"
    ]
    assert "preflight: GPU checks skipped: the profile's reason\n" in capsys.readouterr().out
    assert leftover.exists()
    assert preflight.preflight(_spec(), venv(model_root), env, remove_shm=True, gpus_absent="x") == []
    assert not leftover.exists()
    assert f"preflight: /dev/shm: removed leftover {leftover.name} (0 MiB)" in capsys.readouterr().out


def test_every_failed_check_is_listed_cheapest_first(model_root: Path, leftover: Path) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURMD_NODENAME": "node04"}
    runtime = VenvRuntime(engine_python="/nonexistent/python", lmcache_bin="lmcache", aiperf_bin=sys.executable,
                          model_root=str(model_root))  # fmt: skip
    problems = preflight.preflight(_spec(gpus=1), runtime, env, gpus_absent="x")
    assert [p.split(":")[0] for p in problems] == [
        "GPUs",
        "/nonexistent/python is not an executable (build the stack",
        "node node04 is not clean",
    ]


def test_host_memory_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8192000 kB\n")
    assert preflight.available_memory_bytes(meminfo) == 8192000 * 1024
    meminfo.write_text("MemTotal:       16384000 kB\n")
    with pytest.raises(RuntimeError, match=r"^no MemAvailable in /proc/meminfo$"):
        preflight.available_memory_bytes(meminfo)
    assert preflight.available_memory_bytes() > 0  # this host's


def test_the_margin_is_five_percent_at_least_one_gb() -> None:
    assert preflight.memory_margin_bytes(10 * GB) == GB  # 5 % is 0.5 GB: the 1 GB floor
    assert preflight.memory_margin_bytes(100 * GB) == 5 * GB
    assert preflight.memory_margin_bytes(1000 * GB + 39) == 50 * GB + 1  # (1000 GB + 39) // 20
    spec = _spec(backend=_lmcache(100))  # needs 100 GB + 5 GB
    assert preflight.check_memory(spec, 105 * GB) is None
    assert preflight.check_memory(spec, 105 * GB - 1) == (
        "host memory: 105.0 GB available, the lmcache pool needs 100 GB plus 5 GB margin"
    )


def test_the_gpu_count_check_names_what_it_saw() -> None:
    assert preflight.check_gpus(_spec(gpus=2), {}) == "GPUs: the point needs 2, CUDA_VISIBLE_DEVICES shows 0 (unset)"
    assert preflight.check_gpus(_spec(gpus=2), {"CUDA_VISIBLE_DEVICES": "0,1"}) is None


def test_a_container_runtime_checks_its_tools_when_it_starts(tmp_path: Path) -> None:
    pyxis = PyxisRuntime(engine_python="/in/the/image/python", lmcache_bin="lmcache", aiperf_bin="/in/the/image/aiperf",
                         model_root=str(tmp_path / "absent"), image="vllm/vllm-openai:v0.32.0")  # fmt: skip
    assert preflight.check_tools(_spec(), pyxis) is None
    not_aiperf = VenvRuntime(engine_python=sys.executable, lmcache_bin="lmcache", aiperf_bin=str(tmp_path / "aiperf"),
                             model_root=str(tmp_path))  # fmt: skip
    assert preflight.check_tools(_spec(), not_aiperf) == (
        f"{tmp_path / 'aiperf'} is not an executable (build the stack: scripts/local-stack.sh)"
    )


def test_a_backend_with_a_pool_is_checked_whole(model_root: Path, leftover: Path) -> None:
    # 1 GB of L1 kept out of /dev/shm: this host holds it plus the 1 GB margin, and LMCache's own checks pass
    env = {"CUDA_VISIBLE_DEVICES": "0", "SLURMD_NODENAME": "node04"}
    assert (
        preflight.preflight(_spec(backend=_lmcache(1)), venv(model_root), env, remove_shm=True, gpus_absent="x") == []
    )
