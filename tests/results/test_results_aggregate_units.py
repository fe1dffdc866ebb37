"""Small pieces of the aggregation checked on hand-made inputs where every step is countable: requests
per second in one-second windows, the error category of a failed request, and the engine's cache and
token figures from aiperf's export when the /metrics scrapes around the replay are missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmx.results.aggregate import (
    _error_category,
    _qps,
    _theoretical_hit_rate,
    compute_server_metrics,
    engine_counters,
    kv_pool_tokens,
    requests_by_rank,
)

S = 1_000_000_000  # ns per second


def _ended(*seconds: float) -> list[dict[str, Any]]:
    # 100 s on: a request ending at 0 ns would read as "no end time"
    return [{"metadata": {"request_end_ns": int((100 + s) * S)}} for s in seconds]


def test_qps_counts_request_ends_per_whole_one_second_window() -> None:
    # windows [0,1) [1,2) [2,3): 2, 1 and 2 ends; the end at exactly 3.0 s starts a window that never closes
    qps = _qps(_ended(2.5, 0.0, 0.5, 1.2, 2.0, 3.0))
    assert (qps.window_seconds, qps.samples) == (1.0, 3)
    assert qps.mean == pytest.approx(5 / 3)
    assert (qps.p50, qps.p90) == (2.0, 2.0)


def test_qps_boundaries_fall_into_the_next_window() -> None:
    qps = _qps(_ended(0.0, 1.0, 1.5, 2.0))  # [0,1): 1  [1,2): 2
    assert qps.samples == 2 and qps.mean == pytest.approx(1.5)


def test_qps_over_less_than_a_window_is_the_plain_rate_and_needs_two_distinct_ends() -> None:
    short = _qps(_ended(0.0, 0.25, 0.5))
    assert (short.mean, short.samples, short.window_seconds) == (6.0, 0, 1.0)
    assert _qps(_ended(0.0)).mean is None
    assert _qps(_ended(1.0, 1.0)).mean is None
    assert _qps([{"metadata": {}}, {}]).mean is None


@pytest.mark.parametrize(
    ("error", "category"),
    [
        ({"type": "HTTPStatusError", "code": 500, "message": "x: y"}, "HTTPStatusError"),
        ({"type": "", "error_type": "ReadTimeout"}, "ReadTimeout"),
        ({"code": 503, "class": "c"}, "503"),
        ({"class": "ServerDisconnected", "status": 1}, "ServerDisconnected"),
        ({"status": 429}, "429"),
        ({"message": "ConnectionError: refused\nat line 2"}, "ConnectionError"),
        ({"error": "  Overloaded: try later  "}, "Overloaded"),
        ({"message": ""}, "unknown"),
        ("RuntimeError: boom", "RuntimeError"),
        (": nothing before the colon", "unknown"),
        (None, "unknown"),
        ("x" * 200, "x" * 120),
    ],
)
def test_error_category(error: Any, category: str) -> None:
    assert _error_category(error) == category


# ---- the engine's counters from aiperf's export alone (no /metrics scrapes around the replay) ---------


def _counter(*series: tuple[dict[str, str], dict[str, Any]]) -> dict[str, Any]:
    return {"type": "counter", "series": [{"labels": labels, "stats": stats} for labels, stats in series]}


def _gauge(*maxima: float) -> dict[str, Any]:
    return {"type": "gauge", "series": [{"labels": {}, "stats": {"max": m, "avg": m / 2}} for m in maxima]}


EXPORT: dict[str, Any] = {
    "metrics": {
        # counters: stats.total is the window's delta; aiperf strips `_total`, the raw name may keep it
        "vllm:prefix_cache_queries_total": _counter(({}, {"total": 1000})),
        "vllm:prefix_cache_hits": _counter(({}, {"total": 250})),
        "vllm:external_prefix_cache_queries": _counter(({}, {"total": 800})),
        "vllm:external_prefix_cache_hits": _counter(
            ({"engine": "0"}, {"total": 150}), ({"engine": "1"}, {"total": 50})
        ),
        "vllm:prompt_tokens": _counter(({}, {"total": 5000})),
        "vllm:generation_tokens": _counter(({}, {"sum": 700, "max": 9})),  # no total: the sum stands in
        "vllm:prompt_tokens_by_source": _counter(
            ({"source": "local_cache_hit"}, {"total": 1000}),
            ({"source": "external_kv_transfer"}, {"total": 1500}),
            ({"source": "local_compute"}, {"total": 2500}),
        ),
        "vllm:prompt_tokens_cached_by_source": _counter(
            ({"source": "host"}, {"total": 1200}), ({"source": "device"}, {"total": 1000})
        ),
        "vllm:kv_offload_bytes_gpu_to_cpu": _counter(({}, {"total": 4e9})),
        "vllm:kv_offload_time_gpu_to_cpu": _counter(({}, {"total": 2.0})),
        "vllm:kv_offload_bytes_cpu_to_gpu": _counter(({}, {"total": True, "max": 3e9})),  # a bool is no number
        # gauges: the largest max over the series; usage in 0..1 or in percent
        "vllm:kv_cache_usage_perc": _gauge(0.4, 0.7),
        "vllm:cpu_kv_cache_usage_perc": _gauge(55.0),
        "junk": 3,  # not a metric entry: skipped, not counted
        "vllm:odd": {"type": "counter", "series": [{"stats": "n/a"}, "x"]},  # no usable series: named, no value
    }
}


def _request(isl: int, osl: int | None = None) -> dict[str, Any]:
    metrics = {"input_sequence_length": {"value": isl, "unit": "tokens"}}
    if osl is not None:
        metrics["output_sequence_length"] = {"value": osl, "unit": "tokens"}
    return {"metadata": {}, "metrics": metrics}


def test_server_metrics_come_from_the_export_when_the_scrapes_are_missing() -> None:
    records = [_request(10, 3)] * 4
    metrics, source = compute_server_metrics(records, EXPORT, None, None)
    assert source == "aiperf-export"
    assert (metrics.present, metrics.adapter, metrics.metric_count) == (True, "vllm", len(EXPORT["metrics"]) - 1)
    cache = metrics.cache
    assert (cache.prefix_cache_hits, cache.prefix_cache_queries) == (250, 1000)
    assert (cache.external_prefix_cache_hits, cache.external_prefix_cache_queries) == (200, 800)
    # by source (InferenceX's rule): local 1000, external 1500 of 5000; CPU is host DRAM alone (1200)
    assert cache.gpu_cache_hit_rate == pytest.approx(0.2)
    assert cache.external_cache_hit_rate == pytest.approx(0.3)
    assert cache.overall_cache_hit_rate == pytest.approx(0.5)
    assert cache.cpu_cache_hit_rate == pytest.approx(0.24)
    assert cache.cached_tokens_by_source == {"host": 1200, "device": 1000}
    split = metrics.tokens.prompt_by_source
    assert (split.gpu_cache_hit, split.cpu_or_external_cache_hit, split.computed) == (1000, 1500, 2500)
    assert (metrics.tokens.prompt_total, metrics.tokens.generation_total) == (5000, 700)
    assert metrics.tokens.requests_completed == 4
    assert (metrics.kv_cache.gpu_usage_pct, metrics.kv_cache.cpu_usage_pct) == (0.7, pytest.approx(0.55))
    offload = metrics.kv_offload
    assert (offload.bytes_gpu_to_cpu, offload.time_gpu_to_cpu, offload.bytes_cpu_to_gpu) == (4e9, 2.0, 3e9)
    assert offload.bandwidth_gpu_to_cpu_bytes_per_second == pytest.approx(2e9)
    assert offload.bandwidth_cpu_to_gpu_bytes_per_second is None  # no time for that direction


def test_without_a_split_by_source_the_prefix_counters_give_the_rates() -> None:
    metrics = {k: v for k, v in EXPORT["metrics"].items() if "by_source" not in k}
    result, _ = compute_server_metrics([], {"metrics": metrics}, None, None)
    cache = result.cache
    assert cache.gpu_cache_hit_rate == cache.overall_cache_hit_rate == pytest.approx(0.25)
    assert cache.cpu_cache_hit_rate == cache.external_cache_hit_rate == pytest.approx(0.25)  # 200 / 800
    assert result.tokens.prompt_by_source.raw is None or result.tokens.prompt_by_source.raw == {}


def test_scrapes_win_over_the_export_but_the_exports_gauge_maxima_count() -> None:
    before = "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 10\nvllm:kv_cache_usage_perc 0.2\n"
    after = "vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 110\nvllm:kv_cache_usage_perc 0.5\n"
    metrics, source = compute_server_metrics([], EXPORT, before, after)
    assert source == "scrape-delta"
    assert (metrics.cache.prefix_cache_hits, metrics.cache.prefix_cache_queries) == (100, 200)
    assert metrics.kv_cache.gpu_usage_pct == 0.7  # the export saw more over the window than the last scrape
    assert metrics.metric_count == 3


def test_requests_per_data_parallel_rank_come_from_the_engine_label_over_the_window() -> None:
    """Two ranks behind one API server (a multinode point): each rank's finished requests over the
    window, summed over finish reasons; one rank alone gives no split."""
    line = 'vllm:request_success_total{{engine="{e}",finished_reason="{r}",model_name="tiny"}} {n}\n'
    before = line.format(e=0, r="stop", n=4) + line.format(e=1, r="stop", n=1) + line.format(e=10, r="stop", n=0)
    after = (
        line.format(e=0, r="stop", n=9) + line.format(e=0, r="length", n=2)
        + line.format(e=1, r="stop", n=8) + line.format(e=10, r="stop", n=3)
    )  # fmt: skip
    counters, source = engine_counters({}, before, after)
    assert source == "scrape-delta"
    assert requests_by_rank(counters) == {"0": 7, "1": 7, "10": 3}
    before, after = before.replace('"1"', '"2"'), after.replace('"1"', '"2"')
    assert list(requests_by_rank(engine_counters({}, before, after)[0]) or {}) == ["0", "2", "10"]  # rank order
    export = {"metrics": {"vllm:request_success": {"type": "counter", "series": [
        {"labels": {"engine": "0"}, "stats": {"total": 5}}, {"labels": {"engine": "1"}, "stats": {"total": 6}},
    ]}}}  # fmt: skip
    assert requests_by_rank(engine_counters(export, None, None)[0]) == {"0": 5, "1": 6}
    single = engine_counters({}, "", line.format(e=0, r="stop", n=3))[0]
    assert requests_by_rank(single) is None


def test_no_engine_metrics_at_all_is_said_and_tokens_come_from_the_records() -> None:
    records = [_request(10, 3), _request(5)]
    metrics, source = compute_server_metrics(records, {}, None, None)
    assert source == "none" and not metrics.present and metrics.adapter == "none" and metrics.metric_count == 0
    assert (metrics.tokens.prompt_total, metrics.tokens.generation_total) == (15, 3)
    assert metrics.cache.gpu_cache_hit_rate is None and metrics.kv_offload.bytes_gpu_to_cpu is None
    assert compute_server_metrics([], {"metrics": []}, None, None)[0].tokens.prompt_total is None


@pytest.mark.parametrize(
    ("metric", "rate"),
    [
        ({"sum": 30, "count": 40, "avg": 99.0}, 0.75),  # sum / count first
        ({"sum": 30, "count": 0, "avg": 60.0, "unit": "%"}, 0.6),  # no count: the average, in percent
        ({"avg": 0.4, "unit": "ratio"}, 0.4),
        ({"avg": "n/a"}, None),
        ("75%", None),
    ],
)
def test_theoretical_prefix_hit_rate(metric: Any, rate: float | None) -> None:
    assert _theoretical_hit_rate({"theoretical_prefix_cache_hit": metric}) == (
        pytest.approx(rate) if rate is not None else None
    )


def test_the_kv_pool_of_a_multinode_engine_sums_every_nodes_ranks(tmp_path: Path) -> None:
    """Each node logs only its own ranks' KV cache (lines from the local two-node LMCache run): the pool
    the working set is compared with is theirs together, not the head's alone."""
    line = "({tag} pid={pid}) INFO 12-01 04:24:47 [kv_cache_utils.py:2327] CPU KV cache size: 2,176 tokens, ..."
    head, node02 = tmp_path / "engine.log", tmp_path / "node02-engine.log"
    head.write_text(line.format(tag="EngineCore_DP0", pid=3829) + "\n")
    node02.write_text(line.format(tag="EngineCore_DP1", pid=3796) + "\n")
    assert kv_pool_tokens([head]) == 2176
    assert kv_pool_tokens([head, node02]) == 4352
    untagged = tmp_path / "untagged.log"  # a single-rank engine core per node logs no DP tag: still two pools
    untagged.write_text("INFO CPU KV cache size: 2,176 tokens\n")
    assert kv_pool_tokens([untagged, untagged]) == 4352
    assert kv_pool_tokens([tmp_path / "missing.log"]) is None
