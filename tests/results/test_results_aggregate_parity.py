"""build_result on the inputs of InferenceX's own aggregation tests (utils/agentic/aggregation/
test_process_agentic_result.py), for what slurmx pins beyond them. Those tests' own assertions run as data:
tests/data/inferencex/process_agentic_result_cases.yaml (test_inferencex_process_cases.py); here are the exact
figures where they assert bounds or relations, the error rate of records alone, the identity and unreadable
artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.results.aggregate import ArtifactError, RunMeta, build_result
from slurmx.results.schema import Result
from tests.helpers.points import point_from_row

POINT: dict[str, Any] = {
    "image": "test/image:0.1", "model": "test-model", "model-prefix": "test/prefix", "precision": "fp4",
    "framework": "vllm", "runner": "b200-x4", "tp": 4, "pp": 1, "dcp-size": 1, "pcp-size": 1, "ep": 1,
    "dp-attn": False, "spec-decoding": "none", "conc": 8, "kv-offloading": "none", "total-cpu-dram-gb": 0,
    "duration": 3600, "exp-name": "test_tp4_conc8_kvnone", "scenario-type": "agentic-coding", "point-id": "0123456789ab",
}  # fmt: skip
META = RunMeta(sweep_id="s1")


def _record(isl: int, osl: int, ttft_ms: float, e2e_ms: float, itl_ms: float, start_ns: int, end_ns: int,
            phase: str = "profiling", error: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {
            "benchmark_phase": phase,
            "request_start_ns": start_ns,
            "request_end_ns": end_ns,
            "was_cancelled": False,
        },  # fmt: skip
        "metrics": {
            "input_sequence_length": {"value": isl, "unit": "tokens"},
            "output_sequence_length": {"value": osl, "unit": "tokens"},
            "time_to_first_token": {"value": ttft_ms, "unit": "ms"},
            "request_latency": {"value": e2e_ms, "unit": "ms"},
            "inter_token_latency": {"value": itl_ms, "unit": "ms"},
        },
        "error": error,
    }


def _build(tmp_path: Path, records: list[dict[str, Any]], point: dict[str, Any] | None = None) -> Result:
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return build_result(point_from_row(point or POINT), tmp_path, run=META)


FIVE = [
    _record(100, 50, 30.0, 1000.0, 18.0, 1_000_000_000, 2_000_000_000),
    _record(180, 60, 35.0, 1100.0, 18.5, 2_500_000_000, 3_700_000_000),
    _record(120, 40, 32.0, 900.0, 17.5, 1_500_000_000, 2_300_000_000),
    _record(200, 70, 40.0, 1400.0, 19.0, 3_000_000_000, 4_500_000_000),
    _record(240, 55, 33.0, 1050.0, 18.2, 4_000_000_000, 5_100_000_000),
]


def test_latencies_are_seconds(tmp_path: Path) -> None:
    latency = _build(tmp_path, FIVE).request_metrics.latency
    assert latency.ttft.mean == pytest.approx(0.034)
    assert latency.ttft.p50 == pytest.approx(0.033)
    assert latency.e2el.mean == pytest.approx(1.09)
    assert latency.itl.mean == pytest.approx(0.01824)
    assert latency.tpot == latency.itl


def test_interactivity_is_the_inverse_of_the_matching_itl_statistic(tmp_path: Path) -> None:
    records = [
        _record(100, 50, 30.0, 1000.0, itl, (i + 1) * 10**9, (i + 2) * 10**9)
        for i, itl in enumerate((10.0, 20.0, 100.0))
    ]
    intvty = _build(tmp_path, records).request_metrics.latency.intvty
    assert intvty.p90 == pytest.approx(11.90476)
    assert intvty.p75 == pytest.approx(16.66667)
    assert intvty.p50 == pytest.approx(50.0)


def test_throughput_per_gpu_divides_by_tp_pp_pcp(tmp_path: Path) -> None:
    point = {**POINT, "tp": 4, "pp": 2, "dcp-size": 2, "pcp-size": 2}
    result = _build(tmp_path, FIVE, point)
    throughput = result.request_metrics.throughput
    assert throughput.duration_seconds == pytest.approx(4.1)
    assert throughput.total is not None and throughput.total.tokens_per_second == pytest.approx((840 + 275) / 4.1)
    assert throughput.per_gpu.total_tput_tps == pytest.approx(throughput.total.tokens_per_second / 16)
    assert result.num_gpus == 16 and (result.pp, result.dcp_size, result.pcp_size) == (2, 2, 2)


def test_the_error_rate_of_records_alone_counts_profiled_requests_only(tmp_path: Path) -> None:
    """InferenceX's rule (issue 23) without an aggregate file: errors over completed profiled requests (1 good +
    1 failed), not over every record with the warmup one (the old 1/3). The accounting of the same records is
    the test_processor_surfaces_request_accounting case."""
    records = [
        _record(100, 50, 30.0, 1_000.0, 10.0, 1_000_000_000, 2_000_000_000),
        _record(100, 50, 30.0, 10_000.0, 10.0, 2_000_000_000, 3_000_000_000, phase="warmup"),
        _record(
            100,
            50,
            30.0,
            20_000.0,
            10.0,
            3_000_000_000,
            4_000_000_000,
            error={"type": "HTTPStatusError", "message": "500 server error"},
        ),  # fmt: skip
    ]
    assert _build(tmp_path, records).error_rate == pytest.approx(1 / 2)


def test_without_engine_metrics_the_result_says_so(tmp_path: Path) -> None:
    """The figures left unset are the test_processor_handles_missing_server_metrics case; slurmx's own field."""
    result = _build(tmp_path, FIVE)
    assert result.slurmx is not None and result.slurmx.engine_metrics_source == "none"


def test_identity_comes_from_the_inferencex_row(tmp_path: Path) -> None:
    point = {**POINT, "kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache", "version": "0.5.6"},
             "total-cpu-dram-gb": 1889, "ep": 8, "dp-attn": True}  # fmt: skip
    result = _build(tmp_path, FIVE, point)
    assert (result.hw, result.conc, result.infmax_model_prefix) == ("b200-x4", 8, "test/prefix")
    assert result.kv_offload_backend is not None and result.kv_offload_backend.model_dump() == {
        "name": "lmcache",
        "version": "0.5.6",
    }
    assert (result.allocated_cpu_dram_gb, result.ep, result.dp_attention) == (1889, 8, "true")
    assert len(result.recipe_fingerprint) == 64
    conc16 = _build(tmp_path, FIVE, {**point, "conc": 16, "exp-name": "other", "point-id": "ffffffffffff"})
    assert conc16.recipe_fingerprint == result.recipe_fingerprint
    assert result.slurmx is not None and result.slurmx.point_id == "0123456789ab"


def test_missing_or_broken_records_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="profile_export.jsonl: missing"):
        build_result(point_from_row(POINT), tmp_path, run=META)
    (tmp_path / "profile_export.jsonl").write_text('{"metadata": {}}\n{"metad\n{"metadata": {}}\n')
    with pytest.raises(ArtifactError, match=r"profile_export.jsonl:2: not JSON"):
        build_result(point_from_row(POINT), tmp_path, run=META)


def test_a_torn_last_line_is_a_killed_writer_and_left_out(tmp_path: Path) -> None:
    # aiperf appends whole batches; SIGKILL during a write leaves an unterminated last line
    (tmp_path / "profile_export.jsonl").write_text('{"metadata": {}}\n{"metad')
    result = build_result(point_from_row(POINT), tmp_path, run=META)
    assert result.request_accounting is not None and result.request_accounting.records_total == 1
