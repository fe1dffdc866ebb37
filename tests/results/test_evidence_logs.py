"""The offload evidence's log scan and connector reading (issue 26): LMCache's known failure lines found in the
log of each of its servers, the fatal ones alone when the job body asks at the server's start, each reported once
per pattern at its first line; an engine argv read back by the engine that ran it, or by any registered one."""

from __future__ import annotations

from pathlib import Path

from slurmx import engines
from slurmx.results.evidence import engine_connector, log_failures

# LMCache 0.5.6's lines (backends/lmcache.py's patterns), each written out as the server prints it
FALLBACK = (
    "[2026-11-30 22:13:01] LMCache WARNING: lmcache.cuda_ops compiled extension not found; "
    "CudaDeviceOps stays on the torch baseline for all ops. (device_ops.py:128:lmcache.v1)\n"
)
SHM = "[2026-11-30 22:13:02] LMCache WARNING: Insufficient /dev/shm capacity for L1, using pickle\n"
QUIET = "[2026-11-30 22:13:00] LMCache INFO: server listening on 0.0.0.0:6555\n"


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_every_known_line_is_found_with_its_file_and_first_line_number(tmp_path: Path) -> None:
    log = _write(tmp_path / "lmcache.log", QUIET, SHM, QUIET, FALLBACK, FALLBACK)
    assert log_failures("lmcache", {"lmcache": log}) == [
        "LMCache fell back to torch ops (no compiled extension) (lmcache.log:4)",
        "LMCache's L1 fell back from /dev/shm to pickle (lmcache.log:2)",
    ]


def test_fatal_only_keeps_the_lines_that_fail_a_point_at_the_servers_start(tmp_path: Path) -> None:
    both = _write(tmp_path / "lmcache.log", SHM, FALLBACK)
    assert log_failures("lmcache", {"lmcache": both}, fatal_only=True) == [
        "LMCache fell back to torch ops (no compiled extension) (lmcache.log:2)"
    ]
    # the /dev/shm fallback alone degrades the tier but does not stop the point at its start
    shm_only = _write(tmp_path / "shm.log", SHM)
    assert log_failures("lmcache", {"lmcache": shm_only}, fatal_only=True) == []
    assert log_failures("lmcache", {"lmcache": shm_only}) == [
        "LMCache's L1 fell back from /dev/shm to pickle (shm.log:1)"
    ]


def test_each_server_of_the_arm_is_scanned_and_a_pattern_is_reported_once(tmp_path: Path) -> None:
    first = _write(tmp_path / "lmcache.0.log", QUIET)
    second = _write(tmp_path / "lmcache.1.log", QUIET, QUIET, FALLBACK)
    third = _write(tmp_path / "lmcache.2.log", FALLBACK)
    logs = {"lmcache.0": first, "lmcache.1": second, "lmcache.2": third, "lmcache_proxy": third}
    assert log_failures("lmcache", logs) == ["LMCache fell back to torch ops (no compiled extension) (lmcache.1.log:3)"]
    # a process named otherwise is not the pattern's, and a log that is not there is skipped
    assert log_failures("lmcache", {"lmcache_proxy": third, "lmcache": tmp_path / "absent.log"}) == []
    # the engine's patterns read the engine's log
    engine_log = _write(tmp_path / "engine.log", "ERROR No supported cuda connector found\n")
    assert log_failures("lmcache", {"engine": engine_log, "lmcache": first}) == [
        "LMCache has no connector for this device (engine.log:1)"
    ]


def test_the_connector_is_read_by_the_engine_that_ran_else_by_any_registered_engine() -> None:
    hicache = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--enable-hierarchical-cache"]
    # vLLM's reader finds no kv-transfer config in SGLang's argv; SGLang's reads its own tier flag
    assert engine_connector(hicache, engines.get("vllm")) is None
    assert engine_connector(hicache, engines.get("sglang")) == "hicache"
    assert engine_connector(hicache) == "hicache"
    lmcache = [
        "vllm",
        "serve",
        "m",
        "--kv-transfer-config",
        '{"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"}',
    ]
    assert engine_connector(lmcache, engines.get("sglang")) is None
    assert engine_connector(lmcache) == "LMCacheMPConnector"
    assert engine_connector(["vllm", "serve", "m"]) is None
