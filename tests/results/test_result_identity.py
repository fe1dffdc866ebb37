"""What build_result writes of a point's identity and of aiperf's run-level profile, worked by hand: the recipe
fingerprint (its digest taken by sha256sum of the canonical row written out below), dp_attention's strings, the
slurmx block's attempt, label, cancel, incomplete reason and aiperf's error count, and the power fields when the node
sampled its GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.results import certify, energy
from slurmx.results.aggregate import ReplayWindow, RunFacts, RunMeta, build_result, recipe_fingerprint
from slurmx.results.schema import Result
from tests.helpers.inferencex_results import POINT
from tests.helpers.points import point_from_row

# printf '%s' "$CANONICAL" | sha256sum, for POINT without conc and exp-name, keys sorted, no spaces
CANONICAL = (
    '{"dcp-size":1,"dp-attn":false,"duration":3600,"ep":1,"framework":"vllm","image":"test/image:0.1",'
    '"kv-offloading":"none","model":"test-model","model-prefix":"test/prefix","pcp-size":1,"pp":1,"precision":"fp4",'
    '"runner":"b200-x4","scenario-type":"agentic-coding","spec-decoding":"none","total-cpu-dram-gb":0,"tp":4}'
)
DIGEST = "d59ffe403dbb55dbfc365ffe4416bfe307080b0d49cb9b8328ee83a3ee8333c7"
T0 = 1_796_000_000.0


def _record(start_s: float, end_s: float) -> dict[str, Any]:
    return {
        "metadata": {
            "benchmark_phase": "profiling",
            "request_start_ns": int(start_s * 1e9),
            "request_end_ns": int(end_s * 1e9),
        },
        "metrics": {"input_sequence_length": {"value": 250}, "output_sequence_length": {"value": 25}},
        "error": None,
    }


def _build(
    tmp_path: Path, profile: dict[str, Any] | None = None, row: dict[str, Any] | None = None, **kw: Any
) -> Result:
    artifacts = tmp_path / "aiperf"
    artifacts.mkdir(exist_ok=True)
    records = [_record(T0 + 10 + i, T0 + 11 + i) for i in range(4)]
    (artifacts / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if profile is not None:
        (artifacts / "profile_export_aiperf.json").write_text(json.dumps(profile))
    return build_result(point_from_row(row or POINT), artifacts, run=kw.pop("run", RunMeta(sweep_id="s")), **kw)


def test_the_recipe_fingerprint_is_the_canonical_rows_digest() -> None:
    point = point_from_row(POINT)
    assert json.loads(CANONICAL) == {k: v for k, v in point.row().items() if k not in ("conc", "exp-name")}
    assert recipe_fingerprint(point) == DIGEST
    # conc and the names derived from it are not the recipe; any other field is
    assert recipe_fingerprint(point_from_row({**POINT, "conc": 64, "exp-name": "other"})) == DIGEST
    assert recipe_fingerprint(point_from_row({**POINT, "tp": 8})) != DIGEST
    assert recipe_fingerprint(point_from_row({**POINT, "image": "test/image:0.2"})) != DIGEST


def test_dp_attention_is_written_as_the_strings_inferencex_writes(tmp_path: Path) -> None:
    off = _build(tmp_path, row={**POINT, "dp-attn": False})
    on = _build(tmp_path, row={**POINT, "dp-attn": True, "ep": 4})
    assert (off.dp_attention, on.dp_attention) == ("false", "true")
    assert off.scenario_type == "agentic-coding"
    other = _build(tmp_path, row={**POINT, "scenario-type": "fixed-seq-len"})
    assert other.scenario_type == "fixed-seq-len"


def test_the_slurmx_block_carries_the_run_and_aiperfs_profile(tmp_path: Path) -> None:
    profile = {
        "is_complete": False,
        "incomplete_reason": "benchmark duration reached",
        "was_cancelled": True,
        "aiperf_version": "0.13.0",
        "error_summary": [{"count": 3, "error_details": {"code": 500}}, {"error_details": {}}, "x", {"count": "2"}],
    }
    run = RunMeta(sweep_id="s7", attempt=3, slurm_job_id="4242_1", node="n1", nodes=("n1", "n2"))
    meta = _build(tmp_path, profile, row={**POINT, "ep": 4, "dp-attn": True}, run=run).slurmx
    assert meta is not None
    assert (meta.sweep_id, meta.attempt, meta.slurm_job_id, meta.node, meta.nodes) == (
        "s7",
        3,
        "4242_1",
        "n1",
        ["n1", "n2"],
    )
    assert meta.parallelism == "DEP4"  # data-parallel attention with 4 experts
    assert meta.incomplete_reason == "benchmark duration reached"
    assert meta.was_cancelled is True and meta.aiperf_version == "0.13.0"
    assert meta.aiperf_error_count == 5  # 3 + none + 2: an entry without a count counts 0, a non-object nothing


@pytest.mark.parametrize(
    ("profile", "reason", "errors"),
    [
        ({"is_complete": False}, "aiperf marked the run incomplete", None),
        ({"is_complete": False, "incomplete_reason": ""}, "aiperf marked the run incomplete", None),
        ({"is_complete": True, "incomplete_reason": "ignored"}, None, None),
        ({"error_summary": []}, None, 0),
        ({"error_summary": {"count": 3}}, None, None),
    ],
)
def test_incomplete_reason_and_error_count(
    tmp_path: Path, profile: dict[str, Any], reason: str | None, errors: int | None
) -> None:
    meta = _build(tmp_path, profile).slurmx
    assert meta is not None
    assert (meta.incomplete_reason, meta.aiperf_error_count, meta.was_cancelled) == (reason, errors, False)
    assert meta.aiperf_version is None and meta.attempt == 1 and meta.nodes is None


def test_a_sampled_node_writes_the_power_fields(tmp_path: Path) -> None:
    """One GPU at 200 W over the window [T0 + 10, T0 + 14] aiperf's profile gives: 800 J, 200 J a query (4),
    0.8 J an input token (1000), 8 J an output token (100)."""
    telemetry = tmp_path / "telemetry"
    telemetry.mkdir()
    (telemetry / energy.INFO_JSON).write_text(json.dumps({"source": "nvml"}))
    rows = "".join(f"{T0 + t:.3f},0,200.000\n" for t in range(8, 17))
    (telemetry / energy.METRICS_CSV).write_text("timestamp,index,power.draw [W]\n" + rows)
    row = {**POINT, "tp": 1}
    result = _build(tmp_path, {"start_time": T0 + 10, "end_time": T0 + 14}, row=row, telemetry_dir=telemetry)
    assert (result.power_metric_schema_version, result.power_valid) == (2, 1)
    assert (result.avg_power_w, result.total_gpu_energy_j) == (200.0, 800.0)
    assert (result.joules_per_successful_query, result.joules_per_input_token) == (200.0, 0.8)
    assert result.joules_per_output_token == 8.0
    assert result.slurmx is not None and result.slurmx.energy is not None
    assert result.slurmx.energy.source == "nvml" and result.slurmx.energy.power_valid


def test_the_runs_facts_are_recorded_and_read_back_as_they_were(tmp_path: Path) -> None:
    facts = RunFacts(
        failed_request_threshold=0.05,
        engine_version="0.11.2",
        backend_version="0.3.6",
        image_digest="sha256:ab",
        repeat=2,
        repeats=3,
        repeat_mode="shared-server",
        partial_reason="the time limit",
        stopped_by="budget",
    )
    meta = _build(tmp_path, facts=facts).slurmx
    assert meta is not None
    assert (meta.failed_request_threshold, meta.engine_version, meta.backend_version, meta.image_digest) == (
        0.05,
        "0.11.2",
        "0.3.6",
        "sha256:ab",
    )
    assert (meta.repeat, meta.repeats, meta.repeat_mode, meta.stopped_by) == (2, 3, "shared-server", "budget")
    assert meta.partial_reason == "the time limit"
    assert RunFacts.of(meta) == facts
    defaults = _build(tmp_path).slurmx
    assert defaults is not None and RunFacts.of(defaults) == RunFacts()
    assert (defaults.failed_request_threshold, defaults.repeat, defaults.stopped_by) == (0.10, 1, None)


def test_a_tensorrt_llm_points_servers_are_listed_by_its_own_metric_names(tmp_path: Path) -> None:
    """Two data-parallel ranks in aiperf's export of a TRT-LLM engine: each rank's prompt and generated tokens,
    its prefix hit rate (hit tokens over its prompt tokens, every prompt token being looked up) and its KV usage."""

    def counter(*values: float) -> dict[str, Any]:
        return {
            "type": "counter",
            "series": [{"labels": {"dp_rank": str(i)}, "stats": {"total": v}} for i, v in enumerate(values)],
        }

    export = {
        "metrics": {
            "trtllm_prompt_tokens": counter(1000, 3000),
            "trtllm_prompt_cache_hit_tokens": counter(250, 300),
            "trtllm_generation_tokens": counter(100, 50),
            "trtllm_kv_cache_utilization": {
                "type": "gauge",
                "series": [
                    {"labels": {"dp_rank": "0"}, "stats": {"max": 0.4}},
                    {"labels": {"dp_rank": "1"}, "stats": {"max": 55.0}},
                ],
            },
        }
    }
    (tmp_path / "aiperf").mkdir()
    (tmp_path / "aiperf" / "server_metrics_export.json").write_text(json.dumps(export))
    sources = _build(tmp_path, row={**POINT, "framework": "trt"}).server_metrics.sources
    assert sources == [
        {
            "id": "combined|dp_rank=0",
            "role": "combined",
            "prompt_tokens": 1000.0,
            "generation_tokens": 100.0,
            "prefix_cache_hit_rate": 0.25,
            "gpu_kv_cache_usage_pct": 0.4,
        },
        {
            "id": "combined|dp_rank=1",
            "role": "combined",
            "prompt_tokens": 3000.0,
            "generation_tokens": 50.0,
            "prefix_cache_hit_rate": 0.1,
            "gpu_kv_cache_usage_pct": 0.55,
        },
    ]


def test_the_window_the_dataset_the_policy_and_the_warnings_are_written(tmp_path: Path) -> None:
    window = ReplayWindow(started_at=T0 + 9.5, ended_at=T0 + 15.25)
    profile = {"metadata": {"dataset": {"name": "semianalysisai/cc-traces-weka", "revision": "abc"}}}
    policy = certify.Policy(confidence=0.9, rel_width=0.25)
    row = {**POINT, "spec-decoding": "mtp"}
    result = _build(tmp_path, profile, row=row, window=window, policy=policy)
    meta = result.slurmx
    assert meta is not None and (meta.started_at, meta.ended_at) == (T0 + 9.5, T0 + 15.25)
    assert result.dataset == {"name": "semianalysisai/cc-traces-weka", "revision": "abc"}
    assert result.spec_decoding == "mtp"
    assert meta.certification is not None
    assert (meta.certification.confidence, meta.certification.rel_width) == (0.9, 0.25)
    # 4 requests: a p99 needs the floor of 0.99^n <= 0.05 at 90 %: n = 299 (0.99^298 = 0.05004 > 0.05)
    assert meta.certification.metrics["e2el"]["p99"].need == 299
    assert result.warnings == ["no engine metrics: neither before/after scrapes nor server_metrics_export.json"]
    named_only = _build(tmp_path, {"metadata": {"dataset": "cc-traces"}})
    assert named_only.dataset is None and named_only.slurmx is not None
    assert (named_only.slurmx.started_at, named_only.slurmx.ended_at) == (None, None)
    assert named_only.slurmx.certification is not None and named_only.slurmx.certification.rel_width == 0.10
    export = {"metrics": {"vllm:prompt_tokens": {"type": "counter", "series": [{"labels": {}, "stats": {"total": 4}}]}}}
    (tmp_path / "aiperf" / "server_metrics_export.json").write_text(json.dumps(export))
    assert _build(tmp_path).warnings is None


def test_an_sglang_points_ranks_pool_and_gpus_are_read_by_its_own_names(tmp_path: Path) -> None:
    """SGLang's rank label (dp_rank) and finished-request counter, its pool-size log line, and the point's two GPUs
    against telemetry of one: 6 and 4 requests on ranks 0 and 1, 4096 + 4096 tokens, power not valid."""
    export = {
        "metrics": {
            "sglang:num_requests": {
                "type": "counter",
                "series": [
                    {"labels": {"dp_rank": "1"}, "stats": {"total": 4}},
                    {"labels": {"dp_rank": "0"}, "stats": {"total": 6}},
                ],
            },
            "vllm:request_success": {
                "type": "counter",
                "series": [
                    {"labels": {"engine": "0"}, "stats": {"total": 1}},
                    {"labels": {"engine": "1"}, "stats": {"total": 2}},
                ],
            },
        }
    }
    (tmp_path / "aiperf").mkdir()
    (tmp_path / "aiperf" / "server_metrics_export.json").write_text(json.dumps(export))
    log = tmp_path / "server.log"
    log.write_text(
        "[2026 DP0 TP0 EP0] max_total_num_tokens=4096, chunked_prefill_size=8192\n"
        "[2026 DP1 TP0 EP0] max_total_num_tokens=4096, chunked_prefill_size=8192\n"
        "INFO GPU KV cache size: 99 tokens\n"  # vLLM's line: not SGLang's
    )
    telemetry = tmp_path / "telemetry"
    telemetry.mkdir()
    (telemetry / energy.INFO_JSON).write_text(json.dumps({"source": "nvml"}))
    rows = "".join(f"{T0 + t:.3f},0,200.000\n" for t in range(8, 17))
    (telemetry / energy.METRICS_CSV).write_text("timestamp,index,power.draw [W]\n" + rows)
    row = {**POINT, "framework": "sglang", "tp": 2}
    profile = {"start_time": T0 + 10, "end_time": T0 + 14}
    result = _build(tmp_path, profile, row=row, engine_logs=[log], telemetry_dir=telemetry)
    assert result.slurmx is not None and result.slurmx.requests_by_rank == {"0": 6, "1": 4}
    assert result.kv_cache_pool_tokens == 8192
    assert result.power_valid == 0 and result.slurmx.energy is not None
    assert result.slurmx.energy.reasons == ["expected_gpu_count_mismatch"]


def test_the_offload_backends_version_is_the_one_that_ran_when_the_recipe_pins_none(tmp_path: Path) -> None:
    """kv_offload_backend.version: the recipe's pin when it has one, else the version the node's lock recorded
    (RunFacts.backend_version); written to result.json either way."""
    unpinned = {**POINT, "kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache"}}
    ran = _build(tmp_path, row=unpinned, facts=RunFacts(backend_version="0.3.9"))
    assert ran.dump()["kv_offload_backend"] == {"name": "lmcache", "version": "0.3.9"}
    assert ran.slurmx is not None and ran.slurmx.backend_version == "0.3.9"
    pinned = {**unpinned, "kv-offload-backend": {"name": "lmcache", "version": "0.3.1"}}
    assert _build(tmp_path, row=pinned, facts=RunFacts(backend_version="0.3.9")).dump()["kv_offload_backend"] == {
        "name": "lmcache",
        "version": "0.3.1",
    }
    assert _build(tmp_path, row=unpinned).dump()["kv_offload_backend"] == {"name": "lmcache"}  # unknown: absent
