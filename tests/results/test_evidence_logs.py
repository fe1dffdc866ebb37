"""The offload evidence's log scan and connector reading (issue 26): LMCache's known failure lines found in the
log of each of its servers, the fatal ones alone when the job body asks at the server's start, each reported once
per pattern at its first line; an engine argv read back by the engine that ran it, or by any registered one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmx import engines
from slurmx.backends import lmcache, mooncake
from slurmx.results.evidence import ArmInputs, build_evidence, engine_connector, log_failures
from slurmx.results.schema import KvCache, PromptBySource, ServerCache, ServerMetrics, ServerTokens

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


def test_a_fatal_pattern_listed_after_other_patterns_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order a backend lists its patterns in decides nothing: LMCache's, listed last-first here."""
    monkeypatch.setattr(lmcache.BACKEND, "log_patterns", tuple(reversed(lmcache.LOG_PATTERNS)))
    log = _write(tmp_path / "lmcache.log", SHM, FALLBACK)
    assert log_failures("lmcache", {"lmcache": log}, fatal_only=True) == [
        "LMCache fell back to torch ops (no compiled extension) (lmcache.log:2)"
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


def test_a_log_with_undecodable_bytes_is_still_scanned(tmp_path: Path) -> None:
    log = tmp_path / "lmcache.log"
    log.write_bytes(b"[2026-11-30] device \xb5s latency\n" + FALLBACK.encode())
    assert log_failures("lmcache", {"lmcache": log}) == [
        "LMCache fell back to torch ops (no compiled extension) (lmcache.log:2)"
    ]


# ---------------------------------------------------------------- the evidence's figures, worked by hand

MOONCAKE_ARGV = ["vllm", "serve", "m", "--kv-transfer-config", '{"kv_connector": "MooncakeStoreConnector"}']


def _server(**tokens: Any) -> ServerMetrics:
    cache = ServerCache(external_prefix_cache_hits=tokens.pop("external_hits", None))
    return ServerMetrics(
        present=True, cache=cache, kv_cache=KvCache(gpu_total_tokens=2176), tokens=ServerTokens(**tokens)
    )


def test_a_tier_counting_blocks_is_turned_into_tokens_by_the_engines_block_size() -> None:
    """vLLM's prompt tokens by source (10,000 in all over the replay, the export's total 12,000 counts warmup too)
    and Mooncake's master: 200 blocks served of 16 tokens."""
    by_source = PromptBySource(
        gpu_cache_hit=4000,
        cpu_or_external_cache_hit=3000,
        computed=3000,
        raw={"local_cache_hit": 4000, "external_kv_transfer": 3000, "local_compute": 3000},
    )
    server = _server(prompt_total=12_000, prompt_by_source=by_source)
    deltas = {mooncake.HIT_BLOCKS: 200.0, "mem_cache_hit_bytes": 1.5e9, "total_get_nums_": 250.0}
    inputs = ArmInputs(engine_argv=MOONCAKE_ARGV, working_set_tokens=4763, block_tokens=16)
    ev = build_evidence("mooncake", server, deltas, {"master_key_count": 900.0}, inputs, engines.get("vllm"))
    assert (ev.arm, ev.expected_connector, ev.engine_argv_seen, ev.engine_connector) == (
        "mooncake",
        "MooncakeStoreConnector",
        True,
        "MooncakeStoreConnector",
    )
    assert ev.prompt_tokens == 10_000 and ev.local_hit_tokens == 4000 and ev.computed_tokens == 3000
    assert ev.tier_tokens == 3000 and ev.tier_hit_rate == pytest.approx(0.30)
    assert ev.tier == {"hit_blocks": 200.0, "hit_bytes": 1.5e9, "gets": 250.0, "keys_max": 900.0}
    assert ev.tier_side_hit_tokens == 3200 and ev.tier_side_hit_rate == pytest.approx(0.32)  # 200 x 16 of 10,000
    assert ev.tier_absent_reason is None and ev.kv_pool_tokens == 2176 and ev.exceeded_pool
    # without the block size the blocks cannot be tokens: no tier-side figure rather than a wrong one
    blind = build_evidence("mooncake", server, deltas, {}, ArmInputs(engine_argv=MOONCAKE_ARGV), engines.get("vllm"))
    assert blind.tier_side_hit_tokens is None and blind.tier_side_hit_rate is None and blind.tier_hit_rate == 0.30


def test_a_tier_counting_tokens_keeps_its_own_count_whatever_the_block_size() -> None:
    server = _server(prompt_total=8000, prompt_by_source=PromptBySource(cpu_or_external_cache_hit=1000))
    deltas = {"lmcache_mp_lookup_hit_tokens": 1200.0}
    ev = build_evidence("lmcache", server, deltas, {}, ArmInputs(block_tokens=16))
    assert ev.prompt_tokens == 8000  # no by-source breakdown: the export's prompt total
    assert ev.tier_side_hit_tokens == 1200 and ev.tier_side_hit_rate == pytest.approx(0.15)
    assert ev.tier_tokens == 1000 and ev.tier_hit_rate == pytest.approx(0.125)
    assert not ev.engine_argv_seen and ev.engine_connector is None  # the job body recorded no argv


def test_an_engine_without_tokens_by_source_counts_its_external_prefix_hits() -> None:
    server = _server(prompt_total=6000, external_hits=1500.0)
    ev = build_evidence("lmcache", server, {}, {}, ArmInputs())
    assert ev.tier_tokens == 1500 and ev.tier_hit_rate == pytest.approx(0.25)
    assert ev.tier_absent_reason == "no LMCache lookup counter in its /metrics"
    assert ev.tier_side_hit_tokens is None and ev.tier_side_hit_rate is None
    # a zero prompt total gives no rate rather than a division by zero
    assert (
        build_evidence("lmcache", _server(prompt_total=0, external_hits=0.0), {}, {}, ArmInputs()).tier_hit_rate is None
    )


def test_sglangs_tokens_by_tier_are_not_summed_into_the_prompt_and_its_argv_is_read_as_sglang_reads_it() -> None:
    """SGLang's by-source figures are cached tokens by tier, not a split of the prompt: the prompt is the total."""
    by_source = PromptBySource(cpu_or_external_cache_hit=700, raw={"device": 900, "host": 700})
    server = _server(prompt_total=5000, prompt_by_source=by_source)
    argv = ["python", "-m", "sglang.launch_server", "--enable-hierarchical-cache", "--kv-transfer-config", "{}"]
    ev = build_evidence("hicache", server, {}, {}, ArmInputs(engine_argv=argv), engines.get("sglang"))
    assert ev.prompt_tokens == 5000 and ev.tier_tokens == 700 and ev.tier_hit_rate == pytest.approx(0.14)
    assert ev.engine_connector == "hicache"  # vLLM's reader would take the kv-transfer config: "None" connector
