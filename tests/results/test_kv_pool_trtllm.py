"""TRT-LLM's KV pool from its log (engines/trtllm.py KV_POOL_LOG, results/server_metrics.py:kv_pool_tokens), on
logs laid out as TensorRT-LLM writes them (docs/kv-pool-log.md): every rank's KVCacheManager logs
"[MemUsageChange] Allocated N GiB for max tokens in paged KV cache (T)." with T its primary blocks times tokens per
block, after an estimation pass that logs a smaller pool first; the ranks agree on T (the block count is reduced to
the smallest over all ranks). The TP ranks of one engine shard that one pool by heads, so the engine's pool is T;
with attention DP every rank keeps whole heads for its own requests, so the engine holds one pool of T per rank.
Every expected figure is worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmx.engines import trtllm
from slurmx.results.aggregate import RunMeta, build_result
from slurmx.results.server_metrics import kv_pool_tokens
from tests.helpers.inferencex_aggregation import module
from tests.helpers.inferencex_results import POINT
from tests.helpers.points import point_from_row

ESTIMATE, FINAL = 8_224, 1_166_336  # the estimation pass's pool, then the pool the engine serves from


def _tagged(tp: int) -> str:
    """TensorRT-LLM's C++ logger with its rank known (TLLM_RANK, RANK, OMPI_COMM_WORLD_RANK, ...), four ranks
    interleaved as their processes write, between the Python logger's lines."""
    lines = [f"[12/05/2026-21:40:02] [TRT-LLM] [RANK {r}] [I] Use 1.02 GB for model weights." for r in range(tp)]
    for gib, tokens in (("0.56", ESTIMATE), ("79.87", FINAL)):
        for r in (2, 0, 3, 1) if tp == 4 else range(tp):
            lines.append(f"[TRT-LLM] [I] [batchmgr] [RANK {r}] Number of tokens per block: 32.")
            lines.append(
                f"[TRT-LLM] [I] [batchmgr] [RANK {r}] [MemUsageChange] Allocated {gib} GiB for max tokens in paged "
                f"KV cache ({tokens})."
            )
        lines.append("[12/05/2026-21:40:31] [TRT-LLM] [RANK 0] [I] max_seq_len=131072, max_num_requests=64")
    return "\n".join(lines)


def _untagged(tp: int) -> str:
    """An older build's C++ logger ("[TensorRT-LLM][INFO] "), which names no rank: one line per rank and pass."""
    lines = []
    for gib, tokens in (("0.56", ESTIMATE), ("79.87", FINAL)):
        for _ in range(tp):
            lines.append("[TensorRT-LLM][INFO] Number of tokens per block: 32.")
            lines.append(
                f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {gib} GiB for max tokens in paged KV cache ({tokens})."
            )
    return "\n".join(lines)


CASES = {
    # name -> (log text, attention-DP ranks, the engine's pool)
    "four TP ranks shard one pool": (_tagged(4), 1, 1_166_336),
    "four attention-DP ranks, a pool each": (_tagged(4), 4, 4_665_344),
    "one rank": (_tagged(1), 1, 1_166_336),
    "untagged lines of four TP ranks": (_untagged(4), 1, 1_166_336),
    "untagged lines of four attention-DP ranks": (_untagged(4), 4, 4_665_344),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_pool_counts_one_per_attention_dp_rank(tmp_path: Path, case: str) -> None:
    text, attention_dp, tokens = CASES[case]
    log = tmp_path / "engine.log"
    log.write_text(text + "\n")
    assert kv_pool_tokens([log], trtllm.KV_POOL_LOG, attention_dp) == tokens


@pytest.mark.parametrize(("dp_attn", "tokens"), [(False, 1_166_336), (True, 4_665_344)])
def test_result_json_takes_attention_dp_from_the_point(tmp_path: Path, dp_attn: bool, tokens: int) -> None:
    """InferenceX's TRT-LLM scripts write enable_attention_dp: $DP_ATTENTION, the point's dp-attn."""
    artifacts = tmp_path / "aiperf"
    artifacts.mkdir()
    record = {
        "metadata": {
            "benchmark_phase": "profiling",
            "request_start_ns": 1_000_000_000,
            "request_end_ns": 2_000_000_000,
        },
        "metrics": {"input_sequence_length": {"value": 250}, "output_sequence_length": {"value": 25}},
        "error": None,
    }
    (artifacts / "profile_export.jsonl").write_text(json.dumps(record) + "\n")
    log = tmp_path / "engine.log"
    log.write_text(_tagged(4) + "\n")
    row = {**POINT, "framework": "trt", "tp": 4, "ep": 4 if dp_attn else 1, "dp-attn": dp_attn}
    result = build_result(point_from_row(row), artifacts, run=RunMeta(sweep_id="s"), engine_logs=[log])
    assert result.kv_cache_pool_tokens == tokens


def test_inferencex_reads_no_trtllm_pool(tmp_path: Path) -> None:
    """A declared difference (docs/inferencex-parity.md): InferenceX's aggregation has no TRT-LLM adapter, so its
    pool stays None on the same log; slurmx reads the engine's pool."""
    log = tmp_path / "engine.log"
    log.write_text(_tagged(4) + "\n")
    compute = module("server_metrics").compute_server_metrics
    _flat, nested, _warnings = compute({}, framework="trt", records=[], server_log_paths=[log])
    assert nested["kv_cache"]["gpu_total_tokens"] is None
    assert kv_pool_tokens([log], trtllm.KV_POOL_LOG) == 1_166_336
    parity = (Path(__file__).parents[2] / "docs" / "inferencex-parity.md").read_text()
    assert "TRT-LLM's ranks each log the pool they shard" in parity
